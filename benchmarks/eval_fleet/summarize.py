#!/usr/bin/env python3
"""Summarizes a benchmarks/eval_fleet/run.sh output folder: candidates per minute of each
configuration, the fleet's scaling (two servers over one, alone and beside a busy twin) and its
gap to one LocalEvaluator with both GPUs, and the verdicts (all configurations must agree on
every candidate).

    summarize.py <out dir>     writes <out dir>/results.md and results.json
"""
import argparse
import datetime
import json
import os
import statistics
import sys

NAMES = {
    "one": "RemoteEvaluator, one kbrl-evald (GPU 0, half the cores)",
    "two": "RemoteEvaluator, two kbrl-evald (one GPU and half the cores each)",
    "local": "LocalEvaluator (kbrl-eval --gpus 0,1, all cores)",
    "shared": "RemoteEvaluator, one kbrl-evald (GPU 0, half A) while its twin (GPU 1, half B) works",
}
CONFIGS = tuple(NAMES)


def load(out):
    runs = {}
    with open(os.path.join(out, "runs.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            runs[r["config"]] = r
    for name, r in runs.items():
        results = []
        path = os.path.join(out, f"{name}.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                results = [json.loads(l) for l in f if l.strip()]
        r["results"] = {x["file"]: x["result"] for x in results}
        r["wall_s"] = r["end"] - r["start"]
        r["per_min"] = len(r["results"]) / r["wall_s"] * 60 if r["wall_s"] > 0 else 0.0
        compiles = [x["stage_seconds"]["compile"] for x in r["results"].values() if "compile" in x.get("stage_seconds", {})]
        r["compile_median_s"] = statistics.median(compiles) if compiles else None
        servers = {}
        for x in r["results"].values():
            s = x.get("metadata", {}).get("evaluated_by")
            if s:
                servers[s] = servers.get(s, 0) + 1
        r["by_server"] = servers
        runs_by_server = {}
        for x in r["results"].values():
            s = x.get("metadata", {}).get("evaluated_by", "local")
            if "run" in x.get("stage_seconds", {}):
                runs_by_server[s] = runs_by_server.get(s, 0.0) + x["stage_seconds"]["run"]
        r["run_s_by_server"] = runs_by_server
        r["gpus"] = gpu_timeline(os.path.join(out, f"{name}.gpu.csv"), r["start"], r["end"])
    return runs


def gpu_timeline(path, start, end):
    """Per GPU index: seconds from the pass's start to its first busy sample, and the share of
    samples within the pass that were busy (nvidia-smi's utilization above 0)."""
    samples = {}
    if not os.path.exists(path):
        return {}
    with open(path) as f:
        for line in f:
            parts = [p.strip() for p in line.split(",")]
            if len(parts) != 3:
                continue
            try:
                t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                util = float(parts[2])
            except ValueError:
                continue
            if start <= t <= end:
                samples.setdefault(parts[1], []).append((t, util))
    out = {}
    for gpu, xs in sorted(samples.items()):
        busy = [t for t, u in xs if u > 0]
        out[gpu] = {"first_busy_s": (busy[0] - start) if busy else None,
                    "busy_fraction": len(busy) / len(xs) if xs else 0.0}
    return out


def gpu_text(r):
    parts = []
    for gpu, g in r.get("gpus", {}).items():
        if g["busy_fraction"] == 0:
            continue
        first = f"{g['first_busy_s']:.0f} s" if g["first_busy_s"] is not None else "-"
        parts.append(f"GPU {gpu}: first work at {first}, busy {100 * g['busy_fraction']:.0f}%")
    return "; ".join(parts) or "-"


def verdict(x):
    return "correct" if x.get("correctness") else x.get("error_category", "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage="summarize.py <out dir>")
    ap.add_argument("out", help="a folder run.sh wrote")
    out = ap.parse_args().out
    runs = load(out)
    lines = ["# Evaluation throughput of a kbrl-evald fleet", ""]
    for name in ("gpus.txt", "machine.txt"):
        p = os.path.join(out, name)
        if os.path.exists(p):
            lines += [f"- {l.strip()}" for l in open(p) if l.strip()]
    lines += ["", "| configuration | candidates evaluated | wall s | candidates / min | compile s, median | "
              "run s, sum per server | GPUs | exit |",
              "|---|---|---|---|---|---|---|---|"]
    for name in CONFIGS:
        if name in runs:
            r = runs[name]
            med = f"{r['compile_median_s']:.1f}" if r["compile_median_s"] is not None else "-"
            run_sums = " + ".join(f"{v:.0f}" for _, v in sorted(r["run_s_by_server"].items())) or "-"
            lines.append(f"| {NAMES[name]} | {len(r['results'])} | {r['wall_s']:.0f} | {r['per_min']:.2f} | {med} | "
                         f"{run_sums} | {gpu_text(r)} | {r['exit_code']} |")
    summary = {n: {k: v for k, v in r.items() if k != "results"} for n, r in runs.items()}
    lines.append("")
    if "one" in runs and "two" in runs and runs["one"]["per_min"] > 0:
        scale = runs["two"]["per_min"] / runs["one"]["per_min"]
        summary["two_over_one"] = scale
        lines.append(f"**Two servers / one server: {runs['two']['per_min']:.2f} / {runs['one']['per_min']:.2f} = "
                     f"{scale:.2f}x** candidates per minute (target: at least 1.8x).")
    if "two" in runs and "shared" in runs and runs["shared"]["per_min"] > 0:
        scale = runs["two"]["per_min"] / runs["shared"]["per_min"]
        summary["two_over_shared"] = scale
        lines.append(f"**Two servers / one server beside a busy twin: {runs['two']['per_min']:.2f} / "
                     f"{runs['shared']['per_min']:.2f} = {scale:.2f}x** (the fleet's own scaling, with the host's "
                     "shared resources equally busy in both).")
    if "two" in runs and "local" in runs and runs["local"]["per_min"] > 0:
        gap = runs["two"]["per_min"] / runs["local"]["per_min"]
        summary["two_over_local"] = gap
        lines.append(f"**Two servers / LocalEvaluator with both GPUs: {gap:.2f}** (target: within 10%, at least 0.90).")
    # Verdicts: every configuration must agree on every candidate it evaluated.
    names = [n for n in CONFIGS if n in runs]
    files = sorted(set().union(*[set(runs[n]["results"]) for n in names])) if names else []
    disagree = []
    for f in files:
        vs = {n: verdict(runs[n]["results"][f]) for n in names if f in runs[n]["results"]}
        if len(set(vs.values())) > 1:
            disagree.append((f, vs))
    summary["verdicts_disagree"] = len(disagree)
    lines += ["", f"Verdicts: {len(files) - len(disagree)} of {len(files)} candidates get the same verdict in every configuration."]
    for f, vs in disagree:
        lines.append(f"- {f}: " + ", ".join(f"{n} {v}" for n, v in vs.items()))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
