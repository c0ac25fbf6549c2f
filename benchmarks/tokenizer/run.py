#!/usr/bin/env python3
"""Tokenizer throughput, kbrl against Hugging Face `tokenizers`, one core each.

Trains a Qwen2-style byte-level BPE tokenizer (NFC, Qwen2's split, 32,000 tokens) on one half
of the local source code (Python's standard library, C headers), then encodes the other half plus
this repository's sources in 4 KB documents: kbrl through benchmarks/tokenizer/encode.cpp, the
library through Tokenizer.encode in a loop with parallelism off. The ids of both are compared on
every document, so the run is also a parity check at a realistic vocabulary size.

    python benchmarks/tokenizer/run.py --build build/dev [--vocab 32000] [--work /tmp/kbrl_tok_bench]
"""
import argparse
import glob
import os
import subprocess
import sys
import sysconfig
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"
import tokenizers  # noqa: E402
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")


def read(paths):
    out = []
    for p in paths:
        try:
            with open(p, encoding="utf-8") as f:
                out.append(f.read())
        except (OSError, UnicodeDecodeError):
            pass
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the CMake build folder")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--work", default="/tmp/kbrl_tok_bench")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    stdlib = sysconfig.get_paths()["stdlib"]
    files = sorted(glob.glob(f"{stdlib}/**/*.py", recursive=True)) + sorted(glob.glob("/usr/include/**/*.h", recursive=True))
    train_files, test_files = files[0::2], files[1::2]
    repo_files = sorted(glob.glob(f"{REPO}/libkbrl/**/*.[ch]pp", recursive=True) + glob.glob(f"{REPO}/apps/**/*.cpp", recursive=True))
    train_text = read(train_files)
    test_text = "".join(read(test_files + repo_files))[:8_000_000]
    corpus = os.path.join(args.work, "code.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write(test_text)

    tok_path = os.path.join(args.work, f"qwen2_style_{args.vocab}.json")
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    t0 = time.time()
    tok.train_from_iterator(train_text, trainers.BpeTrainer(vocab_size=args.vocab, show_progress=False,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]])
    tok.save(tok_path)
    print(f"trained {tok.get_vocab_size()} tokens on {sum(map(len, train_text)) / 1e6:.1f} MB in {time.time() - t0:.0f} s")

    data = test_text.encode()
    docs = [data[i:i + 4096].decode("utf-8", "replace") for i in range(0, len(data), 4096)]
    hf = Tokenizer.from_file(tok_path)
    best = 1e30
    for _ in range(3):
        t0 = time.perf_counter()
        expected = [hf.encode(d, add_special_tokens=False).ids for d in docs]
        best = min(best, time.perf_counter() - t0)
    print(f"tokenizers {tokenizers.__version__}: {len(data) / 1e6 / best:.1f} MB/s (best of 3, one core)")

    bench = os.path.join(args.build, "benchmarks", "tokenizer", "kbrl_bench_tokenizer")
    print(subprocess.run([bench, tok_path, corpus, "5"], check=True, capture_output=True, text=True).stdout, end="")

    load_qwen_sized(tok_path, bench, args.work)

    tool = os.path.join(args.build, "tests", "model", "kbrl_tokenizer_tool")
    if os.path.exists(tool):
        src, dst = os.path.join(args.work, "docs.hex"), os.path.join(args.work, "docs.ids")
        with open(src, "w") as f:
            f.write("\n".join(data[i:i + 4096].hex() for i in range(0, len(data), 4096)) + "\n")
        subprocess.run([tool, "encode", tok_path, src, dst], check=True)
        with open(dst) as f:
            got = f.read().split("\n")[:len(docs)]
        same = sum(1 for e, g in zip(expected, got) if " ".join(map(str, e)) == g)
        print(f"parity: {same} of {len(docs)} documents give the same ids")
        return 0 if same == len(docs) else 1
    return 0


def load_qwen_sized(tok_path, bench, work):
    """Loading time for a tokenizer.json of Qwen2.5's size: 151,643 tokens, as many merges."""
    import json
    import random
    with open(tok_path, encoding="utf-8") as f:
        data = json.load(f)
    by_id = sorted(data["model"]["vocab"].items(), key=lambda kv: kv[1])
    base = [t for t, _ in by_id[:256]]  # the byte alphabet comes first
    vocab = {t: i for i, t in enumerate(base)}
    tokens, merges, rng = list(base), [], random.Random(1)
    while len(vocab) < 151643:
        a, b = rng.choice(tokens[-5000:] if rng.random() < 0.5 else tokens), rng.choice(base)
        if a + b in vocab or len(a + b) > 40:
            continue
        vocab[a + b] = len(vocab)
        tokens.append(a + b)
        merges.append([a, b])
    data["model"]["vocab"], data["model"]["merges"] = vocab, merges
    data["added_tokens"] = [dict(t, id=len(vocab) + i) for i, t in enumerate(data["added_tokens"])]
    big, text = os.path.join(work, "qwen_sized.json"), os.path.join(work, "tiny.txt")
    with open(big, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    with open(text, "w") as f:
        f.write("x")
    out = subprocess.run([bench, big, text, "1"], check=True, capture_output=True, text=True).stdout
    t0 = time.perf_counter()
    Tokenizer.from_file(big)
    print(f"Qwen-sized tokenizer.json ({os.path.getsize(big) / 1e6:.1f} MB, {len(vocab)} tokens, {len(merges)} merges): "
          f"kbrl {out.split('load ')[1].split(',')[0]}, tokenizers {time.perf_counter() - t0:.3f} s to load")


if __name__ == "__main__":
    sys.exit(main())
