#!/usr/bin/env python3
"""scripts/plot_run.py on a run directory written here: a PNG of the steps, the held-out points
and the before/after rates, and clear errors for a missing or malformed metrics file."""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += not ok


def plot(run, *extra):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_run.py"), run, *extra],
                          capture_output=True, text=True)


def main():
    work = tempfile.mkdtemp(prefix="kbrl_plot_run_")
    try:
        run = os.path.join(work, "run")
        os.makedirs(run)
        with open(os.path.join(run, "metrics.jsonl"), "w") as f:
            for step in range(6):
                row = {"step": step, "reward/mean": 0.1 * step, "kernel/correct_rate": step / 10}
                if step % 3 == 2:
                    row.update({"eval/reward_mean": 0.05 * step, "eval/correct_rate": step / 20})
                f.write(json.dumps(row) + "\n")
            f.write(json.dumps({"step": 5, "reward/mean": 0.7, "kernel/correct_rate": 0.6}) + "\n")  # resumed
        with open(os.path.join(run, "demo_rates.json"), "w") as f:
            json.dump({"before": {"train": {"correct_rate": 0.1, "samples": 32},
                                  "heldout": {"correct_rate": 0.0, "samples": 8}},
                       "after": {"train": {"correct_rate": 0.4, "samples": 32},
                                 "heldout": {"correct_rate": 0.0, "samples": 8}}}, f)
        r = plot(run)
        png = os.path.join(run, "progress.png")
        check(r.returncode == 0 and os.path.exists(png), "a run directory gives progress.png: " + r.stderr[-300:])
        with open(png, "rb") as f:
            head = f.read(24)
        check(head[:8] == b"\x89PNG\r\n\x1a\n", "the file is a PNG")
        width, height = struct.unpack(">II", head[16:24])
        check(width >= 800 and height >= 300, f"a readable size ({width} x {height})")
        other = os.path.join(work, "other.png")
        r = plot(run, "--out", other, "--title", "a title")
        check(r.returncode == 0 and os.path.exists(other), "--out writes elsewhere")

        r = plot(os.path.join(work, "nothing"))
        check(r.returncode != 0 and "metrics.jsonl does not exist" in r.stderr, "a folder without metrics: named")
        bad = os.path.join(work, "bad")
        os.makedirs(bad)
        with open(os.path.join(bad, "metrics.jsonl"), "w") as f:
            f.write('{"step": 0, "reward/mean": 1}\n{not json\n')
        r = plot(bad)
        check(r.returncode != 0 and "metrics.jsonl:2: not JSON" in r.stderr, "a malformed line: file and line named")
        sft = os.path.join(work, "sft")
        os.makedirs(sft)
        with open(os.path.join(sft, "metrics.jsonl"), "w") as f:
            f.write('{"step": 0, "sft/loss": 2.5}\n')
        r = plot(sft)
        check(r.returncode != 0 and "no GRPO step" in r.stderr, "a supervised run: no GRPO step to plot, said so")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
