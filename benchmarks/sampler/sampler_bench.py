#!/usr/bin/env python3
"""The sampler benchmark's Python side (benchmarks/sampler/run.sh runs all three):

  sampler_bench.py make <dir> [--shapes 1.5b|0.5b|7b]  a random bf16 model with Qwen2.5-Coder-1.5B's shapes
  sampler_bench.py transformers <dir> [--cache static|dynamic] [opts]
                                              transformers' generate, measured as decode.cpp measures
  sampler_bench.py summarize <out>            results.md from kbrl.json, transformers-static.json,
                                              transformers-dynamic.json, machine.json

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
    tf = {c: json.load(open(os.path.join(out, f"transformers-{c}.json"))) for c in ("static", "dynamic")}
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
             "reference.",
             "decode tok/s = B x (N - 1) / (t(N) - t(1)): generation after the prefill. "
             "Roofline: every step reads all weights once plus each row's KV cache (mean context P + N/2) "
             f"at the peak HBM bandwidth ({bw / 1e12:.2f} TB/s)." if bw else "No HBM bandwidth known for this GPU.",
             "", "| batch | kbrl decode tok/s | transformers static | kbrl / static | transformers dynamic | "
             "roofline tok/s | kbrl % of roofline | static % of roofline |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    rows = {c: {r["batch"]: r for r in t["rows"]} for c, t in tf.items()}
    for r in kb["rows"]:
        b = r["batch"]
        s_row, d_row = rows["static"].get(b), rows["dynamic"].get(b)
        if not s_row or not d_row:
            continue
        roof = b * bw / (weight_bytes + b * (P + N / 2) * kv_per_token) if bw else None
        pct = (lambda x: f"{100 * x / roof:.0f}%") if roof else (lambda x: "-")
        k, t, d = r["decode_tokens_per_s"], s_row["decode_tokens_per_s"], d_row["decode_tokens_per_s"]
        lines.append(f"| {b} | {k:.0f} | {t:.0f} | {k / t:.2f}x | {d:.0f} | {roof:.0f} | {pct(k)} | {pct(t)} |"
                     if roof else f"| {b} | {k:.0f} | {t:.0f} | {k / t:.2f}x | {d:.0f} | - | - | - |")
    lines += ["", "Re-run on the GPU machine: `bash benchmarks/sampler/run.sh [build/cuda] [out dir]`.", ""]
    text = "\n".join(lines)
    with open(os.path.join(out, "results.md"), "w") as f:
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
    s = sub.add_parser("summarize")
    s.add_argument("out")
    s.add_argument("--hbm", type=float, help="peak HBM bandwidth in bytes/s (default: by GPU name)")
    args = ap.parse_args()
    {"make": make, "transformers": run_transformers, "summarize": summarize}[args.cmd](args)


if __name__ == "__main__":
    main()
