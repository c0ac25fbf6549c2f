#!/usr/bin/env python3
"""The sampler benchmark's Python side (benchmarks/sampler/run.sh runs all three):

  sampler_bench.py make <dir> [--shapes 1.5b|0.5b|7b]  a random bf16 model with Qwen2.5-Coder-1.5B's shapes
  sampler_bench.py transformers <dir> [--cache static|dynamic] [opts]
                                              transformers' generate, measured as decode.cpp measures
  sampler_bench.py summarize <out>            results.md from kbrl.json, transformers-static.json,
                                              transformers-dynamic.json, machine.json
  sampler_bench.py config <dir> [--shapes ..]  config.json alone (kbrl_bench_rollout --random-weights)
  sampler_bench.py rollout-summary <out>      rollout.md from rollout.sh's files

transformers runs generate with sdpa attention, sampling at temperature 1 with top-k and top-p off
and min_new_tokens = max_new_tokens, so every row runs to the end, as kbrl's rows do, with either
cache: "static" (cache_implementation="static": preallocated, and generate compiles the decoding
forward with torch.compile, the configuration transformers documents for fast generation; the
comparison) or "dynamic" (its default, for reference). The warm-up call of each batch size pays
the compilation. decode tokens/s = B * (N - 1) / (t(N) - t(1)).
"""
import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

SHAPES = dict(vocab_size=151936, hidden_size=1536, intermediate_size=8960, num_hidden_layers=28,
              num_attention_heads=12, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0,
              rms_norm_eps=1e-6, max_position_embeddings=32768, use_sliding_window=False)
# Other sizes of the same family (Qwen2.5-0.5B's and Qwen2.5-7B's shapes), for the training checks.
OTHER_SHAPES = {
    "0.5b": dict(SHAPES, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2),
    "7b": dict(SHAPES, vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
               num_attention_heads=28, num_key_value_heads=4, tie_word_embeddings=False),
}

# Peak HBM bandwidth by the name nvidia-smi / torch report (vendor figures, bytes/s).
HBM = {"H100 80GB HBM3": 3.35e12, "H100 PCIe": 2.0e12, "H100 NVL": 3.9e12, "H200": 4.8e12}


def make(args):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config
    sys.path.insert(0, os.path.join(ROOT, "tests", "model"))
    import make_models
    config = Qwen2Config(**(SHAPES if args.shapes == "1.5b" else OTHER_SHAPES[args.shapes]))
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(1)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    make_models.randomize(model, 1, embed_std=0.15)
    model.to(torch.bfloat16).save_pretrained(args.dir)
    print(f"wrote {args.dir}: {sum(p.numel() for p in model.parameters()) / 1e9:.3f} B parameters, bf16")


def run_transformers(args):
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(args.dir, dtype=torch.bfloat16).to(args.device).eval()
    vocab = model.config.vocab_size
    g = torch.Generator().manual_seed(7)

    sync = torch.cuda.synchronize if args.device.startswith("cuda") else (lambda: None)

    def timed(ids, n):
        sync()
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                                 top_p=1.0, max_new_tokens=n, min_new_tokens=n, pad_token_id=0, **cache)
        sync()
        assert out.shape[1] == ids.shape[1] + n, out.shape
        return time.perf_counter() - start

    # The static cache is sized for the longest call, so that every call of a batch size reuses one
    # compiled graph.
    cache = dict(cache_implementation="static") if args.cache == "static" else {}
    rows = []
    print(f"transformers generate, {args.device} bf16, attention {model.config._attn_implementation}, "
          f"{args.cache} cache, prompt {args.prompt_tokens}, new {args.new_tokens} tokens")
    for b in [int(x) for x in args.batches.split(",")]:
        ids = torch.randint(0, vocab, (b, args.prompt_tokens), generator=g).to(args.device)
        timed(ids, args.new_tokens)  # warm-up: for the static cache, compiles
        timed(ids, 1)
        one, full = [], []
        for _ in range(args.repeats):
            one.append(timed(ids, 1))
            full.append(timed(ids, args.new_tokens))
        t1, tn = statistics.median(one), statistics.median(full)
        row = dict(batch=b, t1_s=t1, tn_s=tn, decode_tokens_per_s=b * (args.new_tokens - 1) / (tn - t1),
                   total_tokens_per_s=b * args.new_tokens / tn)
        print(f"{b:6d} {t1:10.3f} {tn:10.3f} {row['decode_tokens_per_s']:14.1f} {row['total_tokens_per_s']:14.1f}", flush=True)
        rows.append(row)
    import transformers
    result = dict(implementation="transformers", version=transformers.__version__, torch=torch.__version__,
                  attention=model.config._attn_implementation, cache=args.cache, prompt_tokens=args.prompt_tokens,
                  new_tokens=args.new_tokens, repeats=args.repeats, rows=rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)


def summarize(args):
    out = args.out
    kb = json.load(open(os.path.join(out, "kbrl.json")))
    tf = {c: json.load(open(os.path.join(out, f"transformers-{c}.json"))) for c in ("static", "dynamic")
          if os.path.exists(os.path.join(out, f"transformers-{c}.json"))}
    machine = json.load(open(os.path.join(out, "machine.json")))
    cfg = machine["config"]
    weight_bytes = machine["weight_bytes"]
    head_dim = cfg["hidden_size"] // cfg["num_attention_heads"]
    kv_per_token = cfg["num_hidden_layers"] * 2 * cfg["num_key_value_heads"] * head_dim * 2  # bf16
    bw = args.hbm or next((v for k, v in HBM.items() if k in machine["gpu"]), None)
    P, N = kb["prompt_tokens"], kb["new_tokens"]
    st = tf["static"]
    lines = ["# Sampler decode speed: kbrl vs transformers generate (static cache)", "",
             f"Machine: {machine['gpu']}, driver {machine.get('driver', '?')}; torch {st['torch']}, "
             f"transformers {st['version']} (attention: {st['attention']}); {machine['date']}.",
             f"Model: random bf16 weights with Qwen2.5-Coder-1.5B's shapes ({weight_bytes / 1e9:.2f} GB of weights), "
             f"prompts of {P} random tokens, {N} new tokens per row, sampling at temperature 1, no stop tokens; "
             f"medians of {kb['repeats']} runs after a warm-up.",
             "transformers: `generate` with `cache_implementation=\"static\"` (its compiled decoding forward: the "
             "configuration its documentation gives for fast generation), and with its default dynamic cache for "
             "reference" + (f" (medians of {tf['dynamic']['repeats']})" if "dynamic" in tf and
                            tf["dynamic"]["repeats"] != kb["repeats"] else "") + ".",
             "decode tok/s = B x (N - 1) / (t(N) - t(1)): generation after the prefill. "
             "Roofline: every step reads all weights once plus each row's KV cache (mean context P + N/2) "
             f"at the peak HBM bandwidth ({bw / 1e12:.2f} TB/s)." if bw else "No HBM bandwidth known for this GPU.",
             "", "| batch | kbrl decode tok/s | transformers static | kbrl / static | transformers dynamic | "
             "roofline tok/s | kbrl % of roofline | static % of roofline |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = {c: {r["batch"]: r for r in t["rows"]} for c, t in tf.items()}
    for r in kb["rows"]:
        b = r["batch"]
        s_row, d_row = rows["static"].get(b), rows.get("dynamic", {}).get(b)
        if not s_row:
            continue
        roof = b * bw / (weight_bytes + b * (P + N / 2) * kv_per_token) if bw else None
        pct = (lambda x: f"{100 * x / roof:.1f}%") if roof else (lambda x: "-")
        k, t = r["decode_tokens_per_s"], s_row["decode_tokens_per_s"]
        d = f"{d_row['decode_tokens_per_s']:.0f}" if d_row else "-"
        lines.append(f"| {b} | {k:.0f} | {t:.0f} | {k / t:.2f}x | {d} | {roof:.0f} | {pct(k)} | {pct(t)} |"
                     if roof else f"| {b} | {k:.0f} | {t:.0f} | {k / t:.2f}x | {d} | - | - | - |")
    profiled = [r for r in kb["rows"] if "kernel_us" in r]
    if profiled:
        groups = sorted({g for r in profiled for g in r["kernel_us"]},
                        key=lambda g: -max(r["kernel_us"].get(g, 0) for r in profiled))
        ideal = {r["batch"]: (weight_bytes + r["batch"] * (P + N / 2) * kv_per_token) / bw * 1e6 if bw else None
                 for r in profiled}
        lines += ["", "Where a decode step's time goes (kbrl): GPU time per step by kernel group, from libtorch's "
                  "profiler over eager steps (the graph replays the same kernels); microseconds, and the share of "
                  "the graphed step's wall time. \"roofline\" is the step at peak bandwidth.", "",
                  "| kernel group | " + " | ".join(f"batch {r['batch']}" for r in profiled) + " |",
                  "|---|" + "---:|" * len(profiled)]
        for g in groups:
            lines.append(f"| {g} | " + " | ".join(
                f"{r['kernel_us'].get(g, 0):.0f} ({100 * r['kernel_us'].get(g, 0) / r['step_us']:.0f}%)"
                for r in profiled) + " |")
        lines.append("| all kernels | " + " | ".join(
            f"{sum(r['kernel_us'].values()):.0f} ({100 * sum(r['kernel_us'].values()) / r['step_us']:.0f}%)"
            for r in profiled) + " |")
        lines.append("| graphed step (wall) | " + " | ".join(f"{r['step_us']:.0f}" for r in profiled) + " |")
        if bw:
            lines.append("| roofline step | " + " | ".join(f"{ideal[r['batch']]:.0f}" for r in profiled) + " |")
    lines += ["", "Re-run on the GPU machine: `bash benchmarks/sampler/run.sh [build/cuda] [out dir]`.", ""]
    text = "\n".join(lines)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(text)
    print(text)


def write_config(args):
    from transformers import Qwen2Config
    shapes = SHAPES if args.shapes == "1.5b" else OTHER_SHAPES[args.shapes]
    Qwen2Config(**shapes).save_pretrained(args.dir)


def rollout_summary(args):
    out = args.out
    gpu = open(os.path.join(out, "rollout-gpu.txt")).read().strip()
    r15 = json.load(open(os.path.join(out, "rollout-1.5b.json")))
    r7 = json.load(open(os.path.join(out, "rollout-7b-8k.json")))
    by = {r["mode"]: r for r in r15["rows"]}
    lines = ["# Rollout-shaped sampling: continuous batching vs fixed batches", "",
             f"Machine: {gpu}. Random bf16 weights (Qwen2.5-Coder-1.5B's shapes), {r15['prompts']} prompts of "
             f"{r15['prompt_tokens']} tokens x {r15['samples']} samples; completion lengths log-normal with median "
             f"{r15['median']} and sigma {r15['sigma']}, clipped to {r15['max_tokens']} ({r15['completion_tokens']} "
             f"tokens in all), each sample ending at its length; temperature 1; at most {r15['max_batch']} rows "
             "decoded together in both modes.", "",
             "| mode | seconds | tokens/s | decode steps | prefills | preemptions | peak GPU memory (GB) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for mode in ("continuous", "fixed"):
        if mode in by:
            r = by[mode]
            lines.append(f"| {mode} | {r['seconds']:.1f} | {r['tokens_per_s']:.0f} | {r['steps']} | {r['prefills']} | "
                         f"{r['preemptions']} | {r['peak_gpu_gb']:.1f} |")
    if "continuous" in by and "fixed" in by:
        lines += ["", f"Continuous / fixed: {by['continuous']['tokens_per_s'] / by['fixed']['tokens_per_s']:.2f}x."]
    r = r7["rows"][0]
    lines += ["", f"7B shapes (Qwen2.5-7B: 28 layers, 4 KV heads), {r7['prompts']} rows of {r7['prompt_tokens']} prompt "
              f"tokens plus up to {r7['max_tokens']} new ones ({r7['prompts']} x ~{(r7['prompt_tokens'] + r7['max_tokens']) // 1000}k "
              f"tokens in flight): peak GPU memory {r['peak_gpu_gb']:.1f} GB, {r['preemptions']} preemptions, "
              f"{r['seconds']:.1f} s ({r['prefills']} prefills, {r['steps']} decode steps).",
              "", "Re-run on the GPU machine: `bash benchmarks/sampler/rollout.sh [build/cuda] [out dir]`.", ""]
    text = "\n".join(lines)
    with open(os.path.join(out, "rollout.md"), "w") as f:
        f.write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("make")
    m.add_argument("--shapes", choices=["1.5b", *OTHER_SHAPES], default="1.5b")
    m.add_argument("dir")
    t = sub.add_parser("transformers")
    t.add_argument("dir")
    t.add_argument("--device", default="cuda")
    t.add_argument("--cache", choices=["static", "dynamic"], default="static")
    t.add_argument("--batches", default="1,16,64")
    t.add_argument("--prompt-tokens", type=int, default=128)
    t.add_argument("--new-tokens", type=int, default=256)
    t.add_argument("--repeats", type=int, default=3)
    t.add_argument("--json")
    c = sub.add_parser("config")
    c.add_argument("--shapes", choices=["1.5b", *OTHER_SHAPES], default="1.5b")
    c.add_argument("dir")
    r = sub.add_parser("rollout-summary")
    r.add_argument("out")
    s = sub.add_parser("summarize")
    s.add_argument("out")
    s.add_argument("--hbm", type=float, help="peak HBM bandwidth in bytes/s (default: by GPU name)")
    args = ap.parse_args()
    {"make": make, "transformers": run_transformers, "summarize": summarize, "config": write_config,
     "rollout-summary": rollout_summary}[args.cmd](args)


if __name__ == "__main__":
    main()
