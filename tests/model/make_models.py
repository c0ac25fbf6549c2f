#!/usr/bin/env python3
"""Tiny random Llama / Qwen2 / Qwen3 checkpoints and transformers' answers for them.

The C++ decoder is checked against these (tests/model/decoder_test.cpp, model_parity.cpp):
  <out>/<name>/config.json, model.safetensors (or shards + model.safetensors.index.json)
  <out>/<name>/reference.safetensors:
    prompt.<i>        I64  [len_i]          token ids
    logits_fp32.<i>   F32  [len_i, vocab]   transformers, float32, prompt i alone
    greedy_fp32.<i>   I64  [N]              N greedy tokens after prompt i, float32
    greedy_gap_fp32.<i> F32 [N]             top-1 minus top-2 logit at each of those steps
    logits_bf16.<i>   BF16 [len_i, vocab]   the same model cast to bfloat16
    greedy_bf16.<i>   I64  [N]
    metadata: greedy_tokens, min_gap_fp32 (smallest top-1 minus top-2 logit on the greedy
    path), hf_config (what transformers made of config.json, as JSON)

Every parameter is drawn at random (norm weights around 1, biases non-zero), so that a weight
loaded into the wrong place or skipped changes the logits. Seeds are chosen so that the greedy
path never has a near tie (min_gap_fp32 > 1e-3): then a 1e-4 logit error cannot flip a token.

  make_models.py <out> [--set unit|fresh] [--greedy-tokens 32]
"""
import argparse
import json
import math
import os
import sys

import torch
from safetensors.torch import save_file
import transformers
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config, Qwen3Config

GREEDY_TOKENS = 32
PROMPT_LENGTHS = (5, 9, 12)


def model_specs(which):
    common = dict(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  max_position_embeddings=256, rms_norm_eps=1e-6)
    specs = {
        # Llama 3.1 rope scaling with a small original context (256) so that all three
        # wavelength bands occur (kept below 64, interpolated up to 256, divided above); biases
        # on; GQA 4/2.
        # Its config.json is rewritten in transformers v4 spelling (rope_scaling, rope_theta,
        # torch_dtype) and transformers itself reads it back before computing the answers.
        "llama3_gqa": (LlamaConfig, dict(common, num_attention_heads=4, num_key_value_heads=2,
                                          max_position_embeddings=1024,
                                          attention_bias=True, mlp_bias=True, rope_theta=500000.0,
                                          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                            high_freq_factor=4.0,
                                                            original_max_position_embeddings=256)), "v4"),
        # Qwen2: q/k/v biases, a single key-value head (MQA), tied embeddings.
        "qwen2_tied": (Qwen2Config, dict(common, num_attention_heads=4, num_key_value_heads=1,
                                          tie_word_embeddings=True, rope_theta=1000000.0), "v5"),
        # Qwen3: head_dim 16 with 4 heads over hidden 32 (heads*head_dim != hidden), q/k norms.
        "qwen3_gqa": (Qwen3Config, dict(common, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                         rope_theta=1000000.0), "v5"),
        # Plain Llama, multi-head attention, saved in shards.
        "llama_sharded": (LlamaConfig, dict(common, num_attention_heads=4, num_key_value_heads=4,
                                             tie_word_embeddings=True), "v5-sharded"),
    }
    if which == "fresh":
        # The same families at other sizes, so that the fresh run is not a copy of the unit one.
        for name, (cls, kw, spelling) in list(specs.items()):
            kw = dict(kw, hidden_size=64, intermediate_size=80, num_hidden_layers=3, vocab_size=160)
            if "head_dim" in kw:
                kw["head_dim"] = 32
            specs[name] = (cls, kw, spelling)
    return specs


def randomize(model, seed, embed_std=1.0):
    """Norm weights 1 +- 0.3, projections with unit gain (std 1/sqrt(fan_in)), biases half that,
    embeddings `embed_std` (tied, it sets the logits' scale: about embed_std * sqrt(hidden))."""
    device = next(model.parameters()).device
    g = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, device=device)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.3 * r)
            elif name.endswith("embed_tokens.weight"):
                p.copy_(embed_std * r)
            else:
                p.copy_(r / math.sqrt(p.shape[-1]) * (0.5 if name.endswith("bias") else 1.0))


@torch.no_grad()
def greedy(model, prompt, n):
    """The definition, not generate(): the whole sequence again at every step, no cache."""
    ids = prompt.unsqueeze(0).to(model.device)
    out, gaps = [], []
    for _ in range(n):
        logits = model(ids).logits[0, -1].float()
        gaps.append((lambda top: (top[0] - top[1]).item())(torch.topk(logits, 2).values))
        # argmax takes the first of equal maxima (bf16 logits tie often), as the C++ side does.
        token = logits.argmax()
        out.append(token.item())
        ids = torch.cat([ids, token.view(1, 1)], dim=1)
    return torch.tensor(out, dtype=torch.int64), torch.tensor(gaps, dtype=torch.float32)


def to_v4_spelling(config_path):
    with open(config_path) as f:
        c = json.load(f)
    rope = dict(c.pop("rope_parameters"))
    c["rope_theta"] = rope.pop("rope_theta")
    c["rope_scaling"] = rope if rope.get("rope_type", "default") != "default" else None
    if "dtype" in c:
        c["torch_dtype"] = c.pop("dtype")
    c["transformers_version"] = "4.46.0"
    with open(config_path, "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)


def hf_config_summary(config):
    rope = dict(config.rope_parameters or {})
    return {
        "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size, "num_hidden_layers": config.num_hidden_layers,
        "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
        "head_dim": getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
        "rms_norm_eps": config.rms_norm_eps, "rope_theta": rope.get("rope_theta"),
        "rope_type": rope.get("rope_type", "default"), "rope_factor": rope.get("factor"),
        "tie_word_embeddings": config.tie_word_embeddings,
    }


def make(out_dir, name, cls, kwargs, spelling, seed, device="cpu", embed_std=1.0, shard_size=None,
         prompt_lengths=PROMPT_LENGTHS, greedy_tokens=GREEDY_TOKENS):
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    config = cls(**kwargs)
    config.architectures = [{"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                             "qwen3": "Qwen3ForCausalLM"}[config.model_type]]
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    randomize(model, seed, embed_std)
    if spelling == "v5-sharded":
        shard_size = shard_size or "20KB"
    model.save_pretrained(d, **({"max_shard_size": shard_size} if shard_size else {}))
    del model
    if spelling == "v4":
        to_v4_spelling(os.path.join(d, "config.json"))
    # The answers come from what transformers reads back from disk, not from the object above.
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(device).eval()
    bf16 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16).to(device).eval()

    g = torch.Generator().manual_seed(seed + 1)
    ref, min_gap = {}, math.inf
    with torch.no_grad():
        for i, n in enumerate(prompt_lengths):
            prompt = torch.randint(0, config.vocab_size, (n,), generator=g)
            ref[f"prompt.{i}"] = prompt
            ref[f"logits_fp32.{i}"] = model(prompt.unsqueeze(0).to(device)).logits[0].cpu().contiguous()
            ref[f"greedy_fp32.{i}"], ref[f"greedy_gap_fp32.{i}"] = greedy(model, prompt, greedy_tokens)
            min_gap = min(min_gap, ref[f"greedy_gap_fp32.{i}"].min().item())
            ref[f"logits_bf16.{i}"] = bf16(prompt.unsqueeze(0).to(device)).logits[0].cpu().contiguous()
            ref[f"greedy_bf16.{i}"], _ = greedy(bf16, prompt, greedy_tokens)
    meta = {"greedy_tokens": str(greedy_tokens), "min_gap_fp32": f"{min_gap:.6g}",
            "hf_config": json.dumps(hf_config_summary(model.config), sort_keys=True),
            "transformers": transformers.__version__, "device": str(device)}
    return d, ref, meta, min_gap


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--set", choices=["unit", "fresh"], default="unit")
    ap.add_argument("--greedy-tokens", type=int, default=GREEDY_TOKENS, help="greedy tokens per prompt in the references")
    args = ap.parse_args()
    torch.set_num_threads(1)  # deterministic and light on a shared machine
    for k, (name, (cls, kwargs, spelling)) in enumerate(model_specs(args.set).items()):
        base = (1000 if args.set == "fresh" else 0) + 100 * k
        for seed in range(base, base + 50):
            d, ref, meta, gap = make(args.out, name, cls, kwargs, spelling, seed, greedy_tokens=args.greedy_tokens)
            if gap > 1e-3:
                break
        else:
            sys.exit(f"{name}: no seed without a near tie on the greedy path")
        save_file(ref, os.path.join(d, "reference.safetensors"), metadata=meta)
        files = sorted(os.listdir(d))
        print(f"{name}: seed {seed}, min greedy gap {gap:.4g}, files {files}")


if __name__ == "__main__":
    main()
