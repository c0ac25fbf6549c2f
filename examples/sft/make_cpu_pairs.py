#!/usr/bin/env python3
"""Writes cpu_pairs.jsonl: the supervised examples of the CPU demo (examples/configs/cpu_demo.yaml
with train.mode=sft), one line per candidate in ../solutions that expected.json marks correct:
{"id", "source": the problem's reference program from ../problems, "kernel": the solution,
"language": "cpp"}, in the order of expected.json. kbrl-train reads it as a corpus (sft.format
corpus: asked as RL asks the problem, answered in the <KERNEL> format).

    make_cpu_pairs.py            rewrite cpu_pairs.jsonl
    make_cpu_pairs.py --check    exit 1 when cpu_pairs.jsonl is not what the files above make
"""
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.dirname(HERE)


def pairs():
    with open(os.path.join(EXAMPLES, "solutions", "expected.json")) as f:
        expected = json.load(f)
    lines = []
    for name, verdict in expected.items():
        if verdict.get("correct") is not True:
            continue
        m = re.fullmatch(r"level_(\d+)_problem_(\d+)_sample_(\d+)_kernel\.py", name)
        problem = glob.glob(os.path.join(EXAMPLES, "problems", f"{m.group(2)}_*.py"))
        assert len(problem) == 1, (name, problem)
        with open(problem[0]) as f:
            source = f.read()
        with open(os.path.join(EXAMPLES, "solutions", name)) as f:
            kernel = f.read()
        stem = os.path.splitext(os.path.basename(problem[0]))[0]
        lines.append(json.dumps({"id": f"{stem}/sample_{m.group(3)}", "source": source, "kernel": kernel,
                                 "language": "cpp"}) + "\n")
    return "".join(lines)


def main():
    out = os.path.join(HERE, "cpu_pairs.jsonl")
    text = pairs()
    if "--check" in sys.argv[1:]:
        with open(out) as f:
            same = f.read() == text
        print("cpu_pairs.jsonl is " + ("up to date" if same else "stale: run examples/sft/make_cpu_pairs.py"))
        return 0 if same else 1
    with open(out, "w") as f:
        f.write(text)
    print(f"wrote {out}: {text.count(chr(10))} examples")
    return 0


if __name__ == "__main__":
    sys.exit(main())
