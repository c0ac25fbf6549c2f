#!/usr/bin/env python3
"""Table of per-candidate run-stage seconds: inputs made on the device against on the host.

usage: summarize.py DEVICE.jsonl HOST.jsonl [gpu.txt]
"""
import argparse
import json
import statistics

STAGES = ("reference", "load", "correctness", "timing")


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)["result"]  # kbrl-eval's lines: {problem, sample, file, result}
                rows[r["problem_id"]] = r
    return rows


def run_seconds(r):
    s = r.get("stage_seconds", {})
    return sum(s.get(k, 0.0) for k in STAGES)


def verdict(r):
    if r.get("correctness"):
        return "correct, {:.2f}x".format(r["speedup"]) if r.get("speedup") else "correct"
    return r.get("error_category", "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("device", metavar="DEVICE.jsonl", help="eval_results.jsonl of the run with inputs made on the GPU")
    ap.add_argument("host", metavar="HOST.jsonl", help="eval_results.jsonl of the run with --kernelbench-inputs")
    ap.add_argument("gpu", metavar="gpu.txt", nargs="?", help="nvidia-smi's name line for the GPU")
    args = ap.parse_args()
    device, host = load(args.device), load(args.host)
    gpu = open(args.gpu).read().strip() if args.gpu else "?"
    print("GPU: {}\n".format(gpu))
    print("| problem | verdict (device inputs) | verdict (host inputs) | run s, device inputs | "
          "run s, host inputs | ratio |")
    print("|---|---|---|---|---|---|")
    ratios = []
    total_d = total_h = 0.0
    for pid in sorted(device, key=lambda k: (len(k), k)):
        if pid not in host:
            continue
        d, h = run_seconds(device[pid]), run_seconds(host[pid])
        total_d += d
        total_h += h
        ratio = h / d if d > 0 else float("nan")
        ratios.append(ratio)
        print("| {} | {} | {} | {:.1f} | {:.1f} | {:.1f}x |".format(
            pid, verdict(device[pid]), verdict(host[pid]), d, h, ratio))
    if ratios:
        print("\nAll candidates: {:.1f} s with device inputs, {:.1f} s with host inputs: {:.1f}x; "
              "median per-candidate ratio {:.1f}x.".format(total_d, total_h, total_h / total_d,
                                                            statistics.median(ratios)))


if __name__ == "__main__":
    main()
