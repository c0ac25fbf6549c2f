#!/usr/bin/env python3
"""Writes the supervised examples of the CPU demo (examples/configs/elementwise_demo.yaml): lines
{"id", "source": the problem, "kernel", "language": "cpp"}. The problems that the demo holds out
(HELD_OUT, the config's dataset.eval_problems) go to sft_heldout.jsonl with their solution in
solutions/; each other problem goes to sft_train.jsonl twice: with its solution, and with the
same kernel carrying a common bug (id <problem>_bug): its loop runs to input.size(0), the rows,
instead of input.numel(), so most of the output is never written. The two compile and run alike
and differ in one expression: as in a corpus that nobody has checked, only the evaluator's
correctness check tells them apart, which is what the demo's GRPO phase learns from.

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
BOUND, BUGGY_BOUND = "i < input.numel()", "i < input.size(0)"


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
        if name in HELD_OUT:
            out["sft_heldout.jsonl"] += line
            continue
        if kernel.count(BOUND) != 1:
            raise SystemExit(f"{path}: its solution must loop to {BOUND} exactly once")
        buggy = kernel.replace(BOUND, BUGGY_BOUND)
        out["sft_train.jsonl"] += line + json.dumps(
            {"id": f"{stem}_bug", "source": source, "kernel": buggy, "language": "cpp"}) + "\n"
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
