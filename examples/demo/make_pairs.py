#!/usr/bin/env python3
"""Writes the supervised examples of the CPU demo (examples/configs/elementwise_demo.yaml): one line
per problem in problems/, {"id", "source": the problem, "kernel": its solution in solutions/,
"language": "cpp"}. The problems that the demo holds out (HELD_OUT, the config's
dataset.eval_problems) go to sft_heldout.jsonl, the others to sft_train.jsonl.

    make_pairs.py            rewrite both files
    make_pairs.py --check    exit 1 when a file is not what problems/ and solutions/ make
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
HELD_OUT = ("Cube", "Softsign")


def pairs():
    out = {"sft_train.jsonl": "", "sft_heldout.jsonl": ""}
    problems = glob.glob(os.path.join(HERE, "problems", "*.py"))
    for path in sorted(problems, key=lambda p: int(os.path.basename(p).split("_")[0])):
        stem = os.path.splitext(os.path.basename(path))[0]
        number, name = re.fullmatch(r"(\d+)_(\w+)", stem).groups()
        with open(path) as f:
            source = f.read()
        with open(os.path.join(HERE, "solutions", f"level_1_problem_{number}_sample_0_kernel.py")) as f:
            kernel = f.read()
        line = json.dumps({"id": stem, "source": source, "kernel": kernel, "language": "cpp"}) + "\n"
        out["sft_heldout.jsonl" if name in HELD_OUT else "sft_train.jsonl"] += line
    return out


def main():
    stale = []
    for name, text in pairs().items():
        path = os.path.join(HERE, name)
        if "--check" in sys.argv[1:]:
            with open(path) as f:
                if f.read() != text:
                    stale.append(name)
            continue
        with open(path, "w") as f:
            f.write(text)
        print(f"wrote {path}: {text.count(chr(10))} examples")
    if stale:
        print(f"stale: {', '.join(stale)}: run examples/demo/make_pairs.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
