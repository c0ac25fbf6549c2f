#!/usr/bin/env python3
"""The Python half of benchmarks/train_step/run.sh (transformers + PEFT):

  train_step_bench.py prepare <model> <work>   ids.safetensors; a PEFT adapter (r=32, alpha 64, every
                                               projection, random B) in <work>/peft_adapter and its
                                               bf16 logits in <work>/peft_logits.safetensors
  train_step_bench.py check <model> <work>     PEFT loads kbrl's adapter: logits against kbrl's; kbrl's
                                               logits with PEFT's adapter against PEFT's -> parity.json
  train_step_bench.py time <model> <work>      forward + backward of one 4096-token sequence with PEFT
                                               (sdpa, gradient checkpointing, bf16 base, fp32 adapters)
  train_step_bench.py summarize <work> <out>   results.md
"""
import argparse
import json
import os
import statistics
import time

import torch

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: only to try the script
PEAK_BF16 = {"H100 80GB HBM3": 989e12, "H200": 989e12}  # dense bf16 tensor-core peak, FLOP/s


def base(model_dir, dtype=torch.bfloat16):
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype, attn_implementation="sdpa").to(DEVICE)


def prepare(args):
    import peft
    from safetensors.torch import save_file
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    ids = torch.randint(0, cfg["vocab_size"], (2, 64), generator=torch.Generator().manual_seed(1))
    save_file({"input_ids": ids}, os.path.join(args.work, "ids.safetensors"))
    torch.manual_seed(5)
    model = peft.get_peft_model(base(args.model), peft.LoraConfig(r=32, lora_alpha=64, target_modules=TARGETS,
                                                                   task_type="CAUSAL_LM"))
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.02)
    model.save_pretrained(os.path.join(args.work, "peft_adapter"))
    with torch.no_grad():
        logits = model.eval()(ids.to(DEVICE)).logits.float().cpu().contiguous()
    save_file({"logits": logits}, os.path.join(args.work, "peft_logits.safetensors"))


def check(args):
    import peft
    from safetensors.torch import load_file
    ids = load_file(os.path.join(args.work, "ids.safetensors"))["input_ids"].to(DEVICE)
    out = {}
    with torch.no_grad():
        for name, adapter, theirs in (("kbrl adapter in PEFT", "kbrl_adapter", "kbrl_logits_kbrl_adapter"),
                                      ("PEFT adapter in kbrl", "peft_adapter", "kbrl_logits_peft_adapter")):
            ref16 = peft.PeftModel.from_pretrained(base(args.model), os.path.join(args.work, adapter)).eval()
            dtypes = sorted({str(p.dtype) for n, p in ref16.named_parameters() if "lora_" in n})
            peft16 = ref16(ids).logits.float().cpu()
            del ref16
            ref32 = peft.PeftModel.from_pretrained(base(args.model, torch.float32), os.path.join(args.work, adapter)).eval()
            peft32 = ref32(ids).logits.float().cpu()
            del ref32
            kbrl = load_file(os.path.join(args.work, theirs + ".safetensors"))["logits"].float()
            scale = peft32.abs().max().item()
            diff = (kbrl - peft16).abs().max().item() / scale
            own = (peft16 - peft32).abs().max().item() / scale
            ours = (kbrl - peft32).abs().max().item() / scale
            bound = max(2e-2, 2 * own)
            out[name] = dict(kbrl_vs_peft_bf16=diff, peft_bf16_vs_fp32=own, kbrl_bf16_vs_peft_fp32=ours, bound=bound,
                             adapter_dtypes=dtypes, ok=diff <= bound and ours <= 1.5 * own + 1e-6)
            print(f"{name}: kbrl vs PEFT bf16 {diff:.4g} of the largest logit (bound {bound:.3g}); "
                  f"errors vs PEFT fp32: kbrl {ours:.4g}, PEFT bf16 {own:.4g}; adapters {dtypes}")
    json.dump(out, open(os.path.join(args.work, "parity.json"), "w"), indent=2)


def time_peft(args):
    import peft
    model = base(args.model)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    model = peft.get_peft_model(model, peft.LoraConfig(r=args.rank, lora_alpha=2 * args.rank, target_modules=TARGETS,
                                                       task_type="CAUSAL_LM"))
    model.train()
    torch.manual_seed(3)
    tokens = torch.randint(0, model.config.vocab_size, (1, args.seq + 1)).to(DEVICE)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]

    def step():
        model.zero_grad(set_to_none=False)
        logits = model(input_ids=inputs).logits
        loss = torch.nn.functional.cross_entropy(logits.float().view(-1, logits.size(-1)), labels.reshape(-1))
        loss.backward()
        return loss.item()  # waits for the backward pass

    step()
    times, loss = [], 0
    for _ in range(args.steps):
        start = time.perf_counter()
        loss = step()
        times.append(time.perf_counter() - start)
    t = statistics.median(times)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    import transformers
    result = dict(implementation="transformers+peft", transformers=transformers.__version__, peft=peft.__version__,
                  torch=torch.__version__, seq=args.seq, rank=args.rank, steps=args.steps, step_s=t,
                  tokens_per_s=args.seq / t, trainable=trainable, loss=loss,
                  max_memory_gb=torch.cuda.max_memory_allocated() / 1e9 if DEVICE == "cuda" else 0,
                  gpu=torch.cuda.get_device_name() if DEVICE == "cuda" else "cpu")
    print(f"transformers+PEFT: {t:.3f} s per step, {args.seq / t:.0f} tokens/s, loss {loss:.4f}, "
          f"peak memory {result['max_memory_gb']:.1f} GB")
    json.dump(result, open(os.path.join(args.work, "peft_time.json"), "w"), indent=2)


def summarize(args):
    k = json.load(open(os.path.join(args.work, "kbrl_time.json")))
    p = json.load(open(os.path.join(args.work, "peft_time.json")))
    parity = json.load(open(os.path.join(args.work, "parity.json")))
    cfg = json.load(open(os.path.join(args.model, "config.json")))
    H, L, I, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["intermediate_size"], cfg["vocab_size"]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    D = H // heads
    # Matmul FLOPs per token: forward 2 x the projection weights (+ lm_head), backward 2 x again
    # for the input gradients (the frozen base gets no weight gradients; LoRA's are negligible);
    # causal attention QK^T and AV: forward 2 x 2 x (T/2) x heads x D per layer, backward twice that.
    proj = L * (H * heads * D + 2 * H * kv * D + heads * D * H + 3 * H * I) + V * H
    T = k["seq"]
    per_token = 4 * proj + 3 * 2 * T * heads * D * L
    peak = next((v for n, v in PEAK_BF16.items() if n in p["gpu"]), None)
    mfu = (lambda tps: f"{100 * tps * per_token / peak:.0f}%") if peak else (lambda tps: "-")
    lines = ["# LoRA training step: kbrl vs transformers + PEFT", "",
             f"Machine: {p['gpu']}; torch {p['torch']}, transformers {p['transformers']}, peft {p['peft']}.",
             f"Model: random bf16 weights with Qwen2.5-Coder-1.5B's shapes; LoRA r={k['rank']}, alpha {2 * k['rank']}, "
             f"fp32 adapters on q/k/v/o/gate/up/down ({k['trainable']:,} trainable parameters in kbrl, "
             f"{p['trainable']:,} in PEFT); one sequence of {T} tokens, mean next-token cross-entropy, forward + backward, "
             f"activation checkpointing per layer in both, sdpa (fused) attention; median of {k['steps']} steps after a warm-up.",
             f"Model FLOPs per token {per_token / 1e9:.2f} G (4 x the projection weights incl. lm_head, plus causal "
             "attention; recomputation not counted); MFU against 989 TFLOP/s dense bf16.", "",
             "| implementation | s per step | tokens/s | MFU | loss |", "|---|---:|---:|---:|---:|",
             f"| kbrl | {k['step_s']:.3f} | {k['tokens_per_s']:.0f} | {mfu(k['tokens_per_s'])} | {k['loss']:.4f} |",
             f"| transformers + PEFT | {p['step_s']:.3f} | {p['tokens_per_s']:.0f} | {mfu(p['tokens_per_s'])} | {p['loss']:.4f} |",
             "", f"kbrl / transformers + PEFT: **{k['tokens_per_s'] / p['tokens_per_s']:.2f}x** tokens per second "
             f"(transformers + PEFT peak memory {p['max_memory_gb']:.1f} GB).", "",
             "Adapter parity on this model, bf16 base with fp32 adapters (max |logit difference| / max |logit|):", "",
             "| check | kbrl vs PEFT, bf16 | bound | kbrl vs PEFT fp32 | PEFT bf16 vs PEFT fp32 | ok |",
             "|---|---:|---:|---:|---:|---|"]
    for name, r in parity.items():
        lines.append(f"| {name} | {r['kbrl_vs_peft_bf16']:.4g} | {r['bound']:.3g} | {r['kbrl_bf16_vs_peft_fp32']:.4g} | "
                     f"{r['peft_bf16_vs_fp32']:.4g} | {'yes' if r['ok'] else 'NO'} |")
    lines += ["", "Re-run on the GPU machine: `bash benchmarks/train_step/run.sh [build/cuda] [out dir]`.", ""]
    text = "\n".join(lines)
    os.makedirs(args.out, exist_ok=True)
    open(os.path.join(args.out, "results.md"), "w").write(text)
    print(text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("prepare", "check", "time"):
        s = sub.add_parser(name)
        s.add_argument("model")
        s.add_argument("work")
        s.add_argument("--seq", type=int, default=4096)
        s.add_argument("--rank", type=int, default=32)
        s.add_argument("--steps", type=int, default=5)
    s = sub.add_parser("summarize")
    s.add_argument("model")
    s.add_argument("work")
    s.add_argument("out")
    args = ap.parse_args()
    {"prepare": prepare, "check": check, "time": time_peft, "summarize": summarize}[args.cmd](args)


if __name__ == "__main__":
    main()
