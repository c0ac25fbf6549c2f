#!/usr/bin/env python3
"""Fits LoRA adapters of a (random) demo policy to answer each of a few KernelBench problems with
our own working kernel from tests/gpu/kernelbench_l1/, so that a training run on the GPU samples
answers that compile and run: its evaluation phase is real work (tests/gpu/train_scale.sh).

The prompts are the ones kbrl-train renders (read from a run's traces.jsonl, one per problem), the
answer is the format the answer parser reads (<think>, then the kernel in <KERNEL> tags) followed
by <|im_end|>. Teacher-forced cross entropy on the answer tokens with Hugging Face transformers
and PEFT (the oracle kbrl's own LoRA is checked against), until the mean loss per token is below
--target-loss or --max-steps. Writes a PEFT adapter folder that kbrl-train reads as
lora.init_adapter.

    fit_policy.py <model dir> <traces.jsonl> <kernelbench_l1 dir> <adapter out dir>
"""
import argparse
import json
import os
import sys

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("traces")
    ap.add_argument("kernels")
    ap.add_argument("out")
    ap.add_argument("--rank", type=int, default=32)
    ap.add_argument("--alpha", type=float, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--max-steps", type=int, default=600)
    ap.add_argument("--target-loss", type=float, default=0.02)
    args = ap.parse_args()

    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    prompts = {}
    for line in open(args.traces):
        t = json.loads(line)
        prompts.setdefault(t["problem_id"], t["prompt"])
    examples = []
    for pid, prompt in sorted(prompts.items()):
        stem = os.path.basename(pid)
        stem = stem[:-3] if stem.endswith(".py") else stem
        path = os.path.join(args.kernels, stem + ".py")
        if not os.path.isfile(path):
            sys.exit(f"fit_policy: no kernel {path} for problem {pid}")
        source = open(path).read().rstrip("\n")
        answer = ("<think>\nAn elementwise CUDA kernel built with load_inline.\n</think>\n<KERNEL>\n```python\n"
                  f"{source}\n```\n</KERNEL><|im_end|>")
        examples.append((pid, prompt, answer))
    if not examples:
        sys.exit(f"fit_policy: no prompts in {args.traces}")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).to(device)
    config = LoraConfig(r=args.rank, lora_alpha=args.alpha, lora_dropout=0.0, bias="none",
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = get_peft_model(model, config)
    batch = []
    for pid, prompt, answer in examples:
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        a = tok(answer, add_special_tokens=False)["input_ids"]
        ids = torch.tensor([p + a], device=device)
        labels = torch.tensor([[-100] * len(p) + a], device=device)
        batch.append((pid, ids, labels))
        print(f"fit_policy: {pid}: prompt {len(p)} tokens, answer {len(a)} tokens", flush=True)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    loss_mean = float("inf")
    for step in range(args.max_steps):
        opt.zero_grad()
        losses = []
        for _, ids, labels in batch:
            loss = model(input_ids=ids, labels=labels).loss
            (loss / len(batch)).backward()
            losses.append(loss.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_mean = sum(losses) / len(losses)
        if step % 20 == 0:
            print(f"fit_policy: step {step}: loss per answer token {loss_mean:.4f}", flush=True)
        if loss_mean < args.target_loss:
            break
    print(f"fit_policy: stopped at step {step} with loss {loss_mean:.4f}", flush=True)
    model.save_pretrained(args.out)
    json.dump({"steps": step + 1, "loss": loss_mean, "problems": [e[0] for e in examples]},
              open(os.path.join(args.out, "fit.json"), "w"))


if __name__ == "__main__":
    main()
