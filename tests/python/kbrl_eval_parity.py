"""The Python module evaluates the bundled solutions (examples/solutions) with the same results as
kbrl-eval: a subset covering every verdict (correct, wrong values, a build failure, a runtime
error, a static-check rejection, a runtime-caught hack) goes through kbrl.LocalEvaluator, then
through `kbrl-eval generations` with the same settings and work directory (so kbrl-eval reuses
the builds and its run costs seconds); per candidate the verdicts must agree with each other and
with examples/solutions/expected.json. Also: the GIL is released while evaluating (a Python
thread keeps running), and submit() gives the same verdict through a future.

    python kbrl_eval_parity.py --source <checkout> --eval <kbrl-eval> --work <evaluator work dir>
        [--compile-cache <dir>] --scratch <dir>     (PYTHONPATH holds kbrl*.so)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time

import kbrl

SUBSET = [
    "level_1_problem_3_sample_0_kernel.py",   # correct
    "level_1_problem_2_sample_1_kernel.py",   # correctness: values differ
    "level_1_problem_6_sample_1_kernel.py",   # compile
    "level_1_problem_12_sample_1_kernel.py",  # runtime
    "level_1_problem_2_sample_2_kernel.py",   # static_check (pure PyTorch)
    "level_1_problem_1_sample_1_kernel.py",   # reward_hack (writes into its input)
]


def verdict(result):
    """What must agree: the stages passed, the category, the static-check errors."""
    return {"format_ok": result["format_ok"], "compiled": result["compiled"], "correctness": result["correctness"],
            "error_category": result["error_category"], "trials_total": result["trials_total"],
            "static_errors": sorted(f["rule"] for f in result["static_findings"] if f["severity"] == "error")}


def expected_ok(want, result):
    if want.get("correct"):
        return result["correctness"]
    categories = want["error_category"]
    categories = [categories] if isinstance(categories, str) else categories
    return (not result["correctness"] and result["error_category"] in categories
            and sorted(want.get("static_rules", [])) == verdict(result)["static_errors"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--eval", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--compile-cache", default="")
    p.add_argument("--scratch", required=True)
    args = p.parse_args()
    folder = os.path.join(args.source, "examples", "solutions")
    problems_dir = os.path.join(args.source, "examples", "problems")
    with open(os.path.join(folder, "expected.json")) as f:
        expected = json.load(f)

    # kbrl-eval's flags, as the settings schema's keys.
    settings = {"device": "cpu", "timing_trials": 5, "warmup_runs": 1, "work_dir": args.work}
    flags = ["--device", "cpu", "--timing-trials", "5", "--warmup", "1", "--work-dir", args.work]
    if args.compile_cache:
        settings["compile_cache_dir"] = args.compile_cache
        flags += ["--compile-cache-dir", args.compile_cache]

    problems = {p["number"]: p for p in kbrl.load_problems(problems_dir)}
    requests = []
    for file in SUBSET:
        with open(os.path.join(folder, file)) as f:
            requests.append({"request_id": file, "problem": problems[int(file.split("_")[3])], "candidate_source": f.read()})

    ticks = 0
    stop = threading.Event()

    def tick():
        nonlocal ticks
        while not stop.wait(0.02):
            ticks += 1

    start = time.monotonic()
    with kbrl.LocalEvaluator(settings, profile="evaluation") as evaluator:
        ticker = threading.Thread(target=tick)
        ticker.start()
        t0 = time.monotonic()
        results = evaluator.evaluate(requests)
        seconds = time.monotonic() - t0
        stop.set()
        ticker.join()
        again = evaluator.submit(requests[0]).result(timeout=600)
        stats = evaluator.stats()
    print(f"kbrl module: {len(results)} candidates in {seconds:.1f} s ({stats['compiles']} builds, "
          f"{stats['compile_cache_hits']} from the build cache); a Python thread ticked {ticks} times meanwhile")
    failures = []
    if ticks < seconds / 0.02 / 4:
        failures.append(f"the GIL was held while evaluating: {ticks} ticks in {seconds:.1f} s")
    if verdict(again) != verdict(results[0]):
        failures.append(f"submit() gave {verdict(again)}, evaluate() {verdict(results[0])}")

    run_dir = os.path.join(args.scratch, "run")
    shutil.rmtree(run_dir, ignore_errors=True)
    os.makedirs(run_dir)
    for file in SUBSET:
        shutil.copy(os.path.join(folder, file), run_dir)
    t0 = time.monotonic()
    proc = subprocess.run([args.eval, "generations", "--problems", problems_dir, "--level", "1", "--run", run_dir] + flags,
                          capture_output=True, text=True)
    print(f"kbrl-eval: {time.monotonic() - t0:.1f} s, exit {proc.returncode}")
    if proc.returncode != 0:
        print(proc.stderr[-4000:])
        sys.exit(1)
    with open(os.path.join(run_dir, "eval_results.jsonl")) as f:
        by_file = {line["file"]: line["result"] for line in map(json.loads, f) if line}

    for file, result in zip(SUBSET, results):
        cli = by_file.get(file)
        mine, theirs = verdict(result), verdict(cli) if cli else None
        print(f"  {file}: module {mine['error_category']}/{mine['correctness']}, "
              f"kbrl-eval {theirs and theirs['error_category']}/{theirs and theirs['correctness']}")
        if result["request_id"] != file:
            failures.append(f"{file}: request_id came back as {result['request_id']!r}")
        if mine != theirs:
            failures.append(f"{file}: module {mine} != kbrl-eval {theirs}")
        if not expected_ok(expected[file], result):
            failures.append(f"{file}: module's {mine} is not expected.json's {expected[file]}")
    categories = {verdict(r)["error_category"] for r in results}
    if len(categories) < len(SUBSET):
        failures.append(f"the subset should cover {len(SUBSET)} verdicts, got {sorted(categories)}")
    print(f"total {time.monotonic() - start:.1f} s")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
