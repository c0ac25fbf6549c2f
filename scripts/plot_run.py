#!/usr/bin/env python3
"""Plots a kbrl-train GRPO run: the mean reward and the correct-kernel rate of each step's fresh
samples (metrics.jsonl: reward/mean, kernel/correct_rate), with the held-out evaluations beside
them (eval/reward_mean, eval/correct_rate) where the run made them, and the rates measured
before and after the RL steps by scripts/demo.sh (RUN/demo_rates.json) when present. Writes
RUN/progress.png (or --out).

    plot_run.py RUN [--out FILE] [--title TEXT]
"""
import argparse
import json
import os
import sys


def read_metrics(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        raise SystemExit(f"plot_run.py: {path} does not exist (not a kbrl-train run directory?)")
    rows = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"plot_run.py: {path}:{n}: not JSON ({e})")
            rows[row["step"]] = {**rows.get(row["step"], {}), **row}  # a resumed step's line replaces the first
    return [rows[s] for s in sorted(rows)]


def series(rows, key):
    pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    return [p[0] for p in pts], [p[1] for p in pts]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--out", default="")
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    rows = read_metrics(args.run)
    steps, reward = series(rows, "reward/mean")
    if not steps:
        raise SystemExit(f"plot_run.py: {args.run}/metrics.jsonl has no GRPO step (reward/mean) to plot")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax_r, ax_c) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax_r.plot(steps, reward, "o-", label="training samples")
    es, er = series(rows, "eval/reward_mean")
    if es:
        ax_r.plot(es, er, "s--", label="held-out problems")
    ax_r.set_xlabel("step")
    ax_r.set_ylabel("mean reward")
    ax_r.set_title("reward")
    ax_r.legend(loc="best")
    ax_r.grid(alpha=0.3)

    cs, cr = series(rows, "kernel/correct_rate")
    ax_c.plot(cs, cr, "o-", label="training samples")
    es, ec = series(rows, "eval/correct_rate")
    if es:
        ax_c.plot(es, ec, "s--", label="held-out problems")
    rates = os.path.join(args.run, "demo_rates.json")
    if os.path.exists(rates):
        with open(rates) as f:
            r = json.load(f)
        last = max(steps)
        for split, marker in (("train", "D"), ("heldout", "v")):
            if split in r.get("before", {}) and split in r.get("after", {}):
                ax_c.plot([0, last], [r["before"][split]["correct_rate"], r["after"][split]["correct_rate"]],
                          marker + ":", markersize=9,
                          label=f"{split} problems, {r['before'][split]['samples']} fresh samples before / after")
    ax_c.set_xlabel("step")
    ax_c.set_ylabel("correct-kernel rate")
    ax_c.set_ylim(-0.03, 1.03)
    ax_c.set_title("correct kernels")
    ax_c.legend(loc="best", fontsize=8)
    ax_c.grid(alpha=0.3)
    for ax in (ax_r, ax_c):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    fig.suptitle(args.title or os.path.basename(os.path.abspath(args.run)))
    fig.tight_layout()
    out = args.out or os.path.join(args.run, "progress.png")
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
