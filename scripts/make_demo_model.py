#!/usr/bin/env python3
"""Writes the demo policy: a tiny random Qwen2 checkpoint with a real byte-level BPE tokenizer
(trained here on the bundled problems and solutions) and ChatML special tokens, in Hugging Face's
layout (config.json, model.safetensors, tokenizer.json, tokenizer_config.json,
generation_config.json). It answers with noise, but ends its turn (<|im_end|>) at a few percent
per token after any context (--stop-probability), so completions vary in length and a length-shaped reward gives GRPO something to
learn on a CPU in seconds. Deterministic for a given seed.

    make_demo_model.py <out dir> [--seed 0] [--vocab 1024] [--hidden 64] [--layers 2]
    make_demo_model.py <out dir> --shapes 1.5b [--vocab 32000]   # Qwen2.5-Coder-1.5B's shapes, bf16

With --shapes 1.5b the model has the 1.5B model's layers and widths (not its vocabulary: the
tokenizer is trained here, on the bundled files and Python sources next to torch, to --vocab
tokens) and is written in bf16, for GPU runs of the whole loop.
"""
import argparse
import glob
import json
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
         r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHATML = ("{% for m in messages %}{{'<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n'}}{% endfor %}"
          "{% if add_generation_prompt %}{{'<|im_start|>assistant\\n'}}{% endif %}")


def bundled_texts():
    texts = []
    for pattern in ("examples/problems/*.py", "examples/solutions/*.py"):
        for path in sorted(glob.glob(os.path.join(ROOT, pattern))):
            with open(path, encoding="utf-8") as f:
                texts.append(f.read())
    return texts


def train_tokenizer(vocab):
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    texts = bundled_texts()
    if vocab > 4096:  # a large vocabulary needs more text than the bundled files
        import torch
        budget = 40 << 20
        for path in sorted(glob.glob(os.path.join(os.path.dirname(torch.__file__), "**", "*.py"), recursive=True)):
            with open(path, encoding="utf-8", errors="replace") as f:
                texts.append(f.read())
            budget -= len(texts[-1])
            if budget < 0:
                break
    texts.append("<think>\n</think>\n<KERNEL>\n</KERNEL>\nclass ModelNew(nn.Module):\n")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab - len(SPECIALS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS])
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--shapes", choices=["demo", "1.5b"], default="demo")
    ap.add_argument("--stop-probability", type=float, default=0.04,
                    help="about how likely <|im_end|> is at each token")
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    os.makedirs(args.out, exist_ok=True)
    tok = train_tokenizer(args.vocab)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    vocab = tok.get_vocab_size()
    ids = {t: tok.token_to_id(t) for t in SPECIALS}
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "bos_token": None, "chat_template": CHATML, "model_max_length": 4096}, f, indent=2)
    if args.shapes == "1.5b":
        args.hidden = 1536
        shape = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                     num_key_value_heads=2, max_position_embeddings=32768, rope_theta=1000000.0)
    else:
        shape = dict(hidden_size=args.hidden, intermediate_size=2 * args.hidden, num_hidden_layers=args.layers,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rope_theta=10000.0)
    config = Qwen2Config(vocab_size=vocab, tie_word_embeddings=False, eos_token_id=ids["<|im_end|>"],
                         bos_token_id=None, **shape)
    config.architectures = ["Qwen2ForCausalLM"]
    torch.manual_seed(args.seed)
    device = "cuda" if args.shapes != "demo" and torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        g = torch.Generator(device=device).manual_seed(args.seed)
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g, device=device)
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * r)
            elif name.endswith("bias"):
                p.copy_(0.02 * r)
            else:
                p.copy_(r / math.sqrt(p.shape[-1]))
        # The end-of-turn token gets about the same probability after any context. Layer 0's
        # value bias passes through attention unchanged (the weights of a position sum to one),
        # so its output projection adds one constant vector to the residual stream at every
        # position; the head row of <|im_end|> points along it. Its scale is fitted on contexts
        # like the ones the policy sees: tokenized problem text followed by the policy's noise.
        layer0 = model.model.layers[0].self_attn
        layer0.v_proj.bias.copy_(torch.randn(layer0.v_proj.bias.shape, generator=g, device=device))
        kv_heads, heads = config.num_key_value_heads, config.num_attention_heads
        per_head = layer0.v_proj.bias.view(kv_heads, 1, -1).expand(kv_heads, heads // kv_heads, -1)
        constant = layer0.o_proj(per_head.reshape(-1))  # every query head reads its group's value
        model.model.norm.weight.fill_(1.0)
        head = model.lm_head.weight
        eos = ids["<|im_end|>"]
        head[eos] = 0
        text = tok.encode("\n".join(bundled_texts())).ids
        probe = torch.stack([torch.cat([torch.tensor(text[i:i + 192], device=device),
                                        torch.randint(0, vocab, (64,), generator=g, device=device)])
                             for i in range(0, 4 * 192, 192)])
        direction = constant / constant.norm()
        hidden = model.model(probe).last_hidden_state
        along = hidden @ direction  # the final normed state's component along the constant vector
        logits = model.lm_head(hidden)
        others = torch.logsumexp(torch.cat([logits[..., :eos], logits[..., eos + 1:]], -1), -1)
        lo, hi = 0.0, 1000.0
        for _ in range(60):  # the scale that gives the mean stop probability asked for
            mid = (lo + hi) / 2
            p = torch.sigmoid(mid * along - others).mean().item()
            lo, hi = (mid, hi) if p < args.stop_probability else (lo, mid)
        head[eos] = direction * lo
    if args.shapes != "demo":
        model.to(torch.bfloat16)
    model.save_pretrained(args.out)
    with open(os.path.join(args.out, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]], "do_sample": True}, f, indent=2)
    with torch.no_grad():
        logits = model(probe).logits
        p_stop = torch.softmax(logits.float(), -1)[..., ids["<|im_end|>"]].mean().item()
    print(f"wrote {args.out}: vocab {vocab}, {sum(p.numel() for p in model.parameters())} parameters, "
          f"p(<|im_end|>) per token about {p_stop:.3f}")


if __name__ == "__main__":
    main()
