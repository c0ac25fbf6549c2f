#!/usr/bin/env python3
"""Writes results.md (and results.json) for the evaluation-throughput benchmark.

usage: summarize.py [-o results.md] OUT_DIR [OUT_DIR ...]

Reads what run.sh wrote into each OUT_DIR (machine.json, kb-fresh.jsonl, kb-precompile.jsonl,
kbrl.jsonl, gpu.csv); configurations run in separate commands can be summarized together by
naming every folder (a configuration found in several folders is taken from the last). Partial
files (a configuration stopped before its end line) are summarized from what they hold.

Candidates per minute:
  kb-fresh       candidates evaluated / the sum of their processes' wall times
  kb-precompile  projected for the pre-compiled batch: its size / (the parallel build's wall
                 time + its size x the mean GPU-evaluation wall time of the candidates evaluated);
                 the plain measured rate is reported beside it
  kbrl           candidates evaluated / kbrl-eval's wall time
kb-verdicts (KernelBench's verdict and speedup on every candidate, several evaluations at once
taking turns on the GPU) is compared on verdicts and speedups only, not on throughput.
"""
import argparse
import json
import math
import re
import statistics
import sys
import tarfile
from pathlib import Path

from kb_runner import RETRY, retry_error

CONFIGS = ("kb-fresh", "kb-precompile", "kb-verdicts", "kbrl")
KB_THROUGHPUT = ("kb-fresh", "kb-precompile")  # the ways people run KernelBench: compared with kbrl-eval
TITLES = {
    "kb-fresh": "KernelBench, a fresh process per candidate",
    "kb-precompile": "KernelBench, parallel CPU pre-compile, then GPU evaluation",
    "kb-verdicts": "KernelBench on every candidate (verdicts and speedups; evaluations taking turns on the GPU)",
    "kbrl": "kbrl-eval",
}


def read_jsonl(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:  # a torn last line of a stopped run
                pass
    return rows


def percentile(values, q):
    values = sorted(values)
    if not values:
        return None
    k = (len(values) - 1) * q
    lo, hi = math.floor(k), math.ceil(k)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def kbrl_candidate(row):
    """A kbrl-eval eval_results.jsonl line as the runner's candidate record."""
    r = row["result"]
    stats, ref_stats = r.get("runtime_stats") or {}, r.get("ref_runtime_stats") or {}
    return {
        "type": "candidate", "file": row.get("file"), "problem": row.get("problem"), "sample": row.get("sample"),
        "status": "done", "compiled": bool(r.get("compiled")), "correct": bool(r.get("correctness")),
        "compile_s": (r.get("stage_seconds") or {}).get("compile"),
        "runtime_ms": r.get("runtime"), "ref_runtime_ms": r.get("ref_runtime"),
        "runtime_std_ms": stats.get("std"), "ref_runtime_std_ms": ref_stats.get("std"),
        "speedup": r.get("speedup") if r.get("correctness") else None,
        "error": "{}: {}".format(r.get("error_category"), (r.get("error_message") or "").split("\n")[0][:200])
        if r.get("error_category") not in (None, "none") else "",
    }


def load_config(path):
    rows = read_jsonl(path)
    meta = next((r for r in rows if r.get("type") == "meta"), {})
    end = next((r for r in rows if r.get("type") == "end"), None)
    phases = [r for r in rows if r.get("type") == "phase"]
    cands = [r for r in rows if r.get("type") == "candidate"]
    cands += [kbrl_candidate(r) for r in rows if "result" in r and "type" not in r]
    return {"meta": meta, "end": end, "phases": phases, "candidates": cands, "path": str(path)}


def utilization(paths):
    """Per configuration, from csv lines "configuration, ..., percent" (gpu.csv, cpu.csv): the
    number of samples, the share above zero and the mean."""
    samples = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                parts = [p.strip() for p in line.split(",")]
                if len(parts) < 3:
                    continue
                try:
                    util = float(parts[-1])
                except ValueError:
                    continue
                samples.setdefault(parts[0], []).append(util)
    return {cfg: {"samples": len(v), "busy_fraction": sum(1 for u in v if u > 0) / len(v),
                  "mean_utilization": sum(v) / len(v)} for cfg, v in samples.items() if v}


def done(c):
    return c.get("status") == "done" and "compiled" in c


def summarize_config(name, data):
    cands = data["candidates"]
    evaluated = [c for c in cands if done(c)]
    s = {"config": name, "title": TITLES[name], "evaluated": len(evaluated), "records": len(cands),
         "not_evaluated": [{"file": c.get("file"), "status": c.get("status")} for c in cands if not done(c)],
         "meta": {k: v for k, v in data["meta"].items() if k != "order"}, "ended": data["end"] is not None}
    started = data["meta"].get("started")
    if data["end"]:
        # The configuration's whole wall time, its build phase included (kb_runner.py's own
        # wall_s of kb-precompile runs up to 2026-11-25 counted the last candidate only).
        finished = data["end"].get("finished")
        s["wall_s"] = finished - started if None not in (finished, started) else data["end"].get("wall_s")
        s["stopped"] = data["end"].get("stopped") or "exit code {}".format(data["end"].get("exit_code"))
    elif started is not None:
        if cands:
            s["wall_s"] = max(c.get("finished", started) for c in cands) - started
        s["stopped"] = "no end line: stopped from outside"
        if name == "kb-precompile" and not data["phases"]:
            s["stopped"] += ", before the parallel build finished"
    if name == "kb-fresh":
        walls = [c["wall_s"] for c in evaluated]
        compile_s = [c["compile_s"] for c in evaluated if c.get("compile_s") is not None]
        s["candidate_wall_s"] = sum(walls)
        s["per_minute"] = 60.0 * len(walls) / sum(walls) if walls else None
        s["mean_candidate_wall_s"] = statistics.mean(walls) if walls else None
    elif name == "kb-precompile":
        phase = next((p for p in data["phases"] if p.get("name") == "compile"), None)
        walls = [c["wall_s"] for c in evaluated]
        compile_s = [v for v in (phase or {}).get("compile_s", {}).values() if v is not None]
        if phase:
            n = len(phase.get("candidates", []))
            s["precompiled"] = n
            s["precompile_wall_s"] = phase["wall_s"]
            s["precompile_ok"] = sum(1 for ok in phase.get("compiled", {}).values() if ok)
            s["rebuilt_after_timeout"] = sorted(f for f, n in phase.get("builds", {}).items() if n > 1)
            if walls:
                mean_eval = statistics.mean(walls)
                s["mean_eval_wall_s"] = mean_eval
                s["per_minute"] = 60.0 * n / (phase["wall_s"] + n * mean_eval)
                s["measured_per_minute"] = 60.0 * len(walls) / (phase["wall_s"] + sum(walls))
            rebuilt = [c["eval_build_s"] for c in evaluated if c.get("eval_build_s")]
            s["eval_phase_build_s_median"] = percentile(rebuilt, 0.5)
        if not walls:
            s["per_minute"] = None
    elif name == "kb-verdicts":
        phase = merged_compile_phases(data["phases"])
        compile_s = [v for v in (phase or {}).get("compile_s", {}).values() if v is not None]
        if phase:
            s["precompile_runs"] = phase["runs"]
            s["precompiled"] = len(phase.get("candidates", []))
            s["precompile_wall_s"] = phase["wall_s"]
            s["precompile_ok"] = sum(1 for ok in phase.get("compiled", {}).values() if ok)
            s["rebuilt_after_timeout"] = sorted(f for f, n in phase.get("builds", {}).items() if n > 1)
        s["per_minute"] = None  # not one of KernelBench's configurations: no throughput compared
        s["retried_alone"] = sorted({c["file"] for c in evaluated if c.get("retry_of")})
        carried = {c["file"] for c in cands if c.get("carried_from")}
        if carried:
            s["carried"] = len(carried)
        active = [c["active_s"] for c in evaluated if c.get("active_s") is not None]
        s["active_s_max"] = max(active) if active else None
        s["over_kernelbench_timeout"] = sorted(c["file"] for c in evaluated if (c.get("active_s") or 0) > 180)
    else:
        compile_s = [c["compile_s"] for c in evaluated if c.get("compile_s") is not None]
        wall = s.get("wall_s")
        s["per_minute"] = 60.0 * len(evaluated) / wall if wall and evaluated else None
        s["workload_complete"] = len(evaluated)
    s["compile_s_median"] = percentile(compile_s, 0.5)
    s["compile_s_p90"] = percentile(compile_s, 0.9)
    s["compile_samples"] = len(compile_s)
    return s


def whole_workload_precompile(data):
    """KernelBench's pre-compile configuration projected over every candidate from a kb-verdicts
    run: its batch_compile's wall time plus each candidate's evaluation time (active_s: without
    the waits for its GPU turn) added up, as one evaluation after another would take; None
    unless the run judged every candidate it built."""
    if not data:
        return None
    phase = merged_compile_phases(data["phases"])
    last = {c["file"]: c for c in data["candidates"] if c.get("file")}
    active = [c.get("active_s") for c in last.values()]
    if not phase or not last or any(a is None for a in active) or set(last) != set(phase["candidates"]):
        return None
    total = phase["wall_s"] + sum(active)
    return {"candidates": len(last), "build_s": phase["wall_s"], "evaluations_s": sum(active),
            "per_minute": 60.0 * len(last) / total}


def merged_compile_phases(phases):
    """The build phases of a run and of the stopped runs it resumed, as one: per candidate, the
    last build's numbers; the wall times added up."""
    phases = [p for p in phases if p.get("name") == "compile"]
    if not phases:
        return None
    merged = {"runs": len(phases), "wall_s": sum(p.get("wall_s") or 0.0 for p in phases), "candidates": []}
    for key in ("compile_s", "compiled", "builds"):
        merged[key] = {}
    for p in phases:
        merged["candidates"] += [f for f in p.get("candidates", []) if f not in merged["candidates"]]
        for key in ("compile_s", "compiled", "builds"):
            merged[key].update(p.get(key) or {})
    return merged


BUILD_RETRY = "no compile (retry)"


def add_retry_errors(data, logs_tar, name):
    """For a candidate that KernelBench asked to retry and whose record does not say why (runs
    before the runner recorded it), what KernelBench printed, from the candidate's log."""
    wanted = {c["file"]: c for c in data["candidates"] if c.get("status") == RETRY and not c.get("retry_error")}
    if not wanted or not logs_tar.is_file():
        return
    try:
        with tarfile.open(logs_tar) as tar:
            for member in tar.getmembers():
                parts = member.name.split("/")
                stem = parts[-1][:-4] if parts[-1].endswith(".log") else None
                if stem is None or name not in parts or stem + ".py" not in wanted:
                    continue
                c = wanted[stem + ".py"]
                if not c.get("retry_error"):
                    c["retry_error"] = retry_error(tar.extractfile(member).read().decode("utf-8", "replace"))
    except (OSError, tarfile.TarError):
        pass


def verdict(c):
    if c is not None and c.get("status") == RETRY and "Error building extension" in (c.get("retry_error") or ""):
        # eval_kernel_against_ref asks for a retry when the build's error message contains "lock"
        # (its test for a concurrent build's lock file): the build failed.
        return BUILD_RETRY
    if c is None or not done(c):
        return None
    if not c["compiled"]:
        return "no compile"
    return "correct" if c["correct"] else "wrong"


def same_as(v):
    return "no compile" if v == BUILD_RETRY else v


def expected_verdict(expect):
    if not expect:
        return None
    if not expect["compiled"]:
        return "no compile"
    return "correct" if expect["correct"] else "wrong"


def short_commit(commit):
    """A commit as 12 hex digits, keeping what follows the hash (" + N changed files")."""
    if not commit:
        return "?"
    head, _, rest = commit.partition(" ")
    return head[:12] + (" " + rest if rest else "")


def fmt(v, spec="{:.2f}", none="-"):
    return none if v is None else spec.format(v)


def speed_noise(c):
    """Coefficients of variation of the two timings behind a speedup."""
    cvs = []
    for mean, std in ((c.get("runtime_ms"), c.get("runtime_std_ms")), (c.get("ref_runtime_ms"), c.get("ref_runtime_std_ms"))):
        if mean and mean > 0 and std is not None:
            cvs.append(std / mean)
    return cvs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+")
    parser.add_argument("-o", "--output", help="results.md to write (default: the last folder's results.md)")
    parser.add_argument("--workload", default=str(Path(__file__).resolve().parent / "workload" / "workload.json"),
                        help="the workload's manifest (kinds and expected verdicts)")
    args = parser.parse_args()

    configs, machines, gpu_files, cpu_files, sources = {}, [], [], [], {}
    for d in map(Path, args.dirs):
        if (d / "machine.json").is_file():
            machines.append((str(d), json.loads((d / "machine.json").read_text())))
        if (d / "gpu.csv").is_file():
            gpu_files.append(d / "gpu.csv")
        if (d / "cpu.csv").is_file():
            cpu_files.append(d / "cpu.csv")
        for name in CONFIGS:
            if (d / (name + ".jsonl")).is_file():
                configs[name] = load_config(d / (name + ".jsonl"))
                add_retry_errors(configs[name], d / "logs.tar.gz", name)
                sources[name] = str(d)
    output = Path(args.output) if args.output else Path(args.dirs[-1]) / "results.md"
    busy = utilization(gpu_files)
    cpu_busy = utilization(cpu_files)
    summaries = {name: summarize_config(name, configs[name]) for name in CONFIGS if name in configs}
    for name, s in summaries.items():
        s["gpu"] = busy.get(name)
        s["cpu"] = cpu_busy.get(name)
        s["source"] = sources[name]

    by_file = {name: {c["file"]: c for c in configs[name]["candidates"] if c.get("file")} for name in configs}
    workload = {c["file"]: c for c in json.loads(Path(args.workload).read_text())["candidates"]}
    for name in configs:
        for c in configs[name]["candidates"]:
            c.setdefault("kind", workload.get(c.get("file"), {}).get("kind"))
    kb_names = [n for n in ("kb-fresh", "kb-precompile", "kb-verdicts") if n in by_file]
    best = max((summaries[n] for n in KB_THROUGHPUT if n in summaries and summaries[n].get("per_minute")),
               key=lambda s: s["per_minute"], default=None)
    ratio = None
    if best and "kbrl" in summaries and summaries["kbrl"].get("per_minute"):
        ratio = summaries["kbrl"]["per_minute"] / best["per_minute"]
    whole = whole_workload_precompile(configs.get("kb-verdicts"))

    # Verdicts of every candidate that a KernelBench configuration and kbrl-eval both evaluated.
    rows, disagreements, unexpected = [], [], []
    kbrl = by_file.get("kbrl", {})
    compared = sorted({f for n in kb_names for f, c in by_file[n].items() if verdict(c) is not None},
                      key=lambda f: (workload.get(f, {}).get("problem", 0), workload.get(f, {}).get("sample", 0), f))
    for f in compared:
        w = workload.get(f, {})
        exp = expected_verdict(w.get("expect"))
        kb_v = {n: verdict(by_file[n].get(f)) for n in kb_names}
        k_v = verdict(kbrl.get(f))
        seen = [same_as(v) for v in kb_v.values() if v is not None]
        agree = None if k_v is None else all(v == k_v for v in seen)
        if agree is False:
            disagreements.append(f)
        if exp and any(v is not None and same_as(v) != exp for v in list(kb_v.values()) + [k_v]):
            unexpected.append(f)
        rows.append({"file": f, "kind": w.get("kind"), "expected": exp, "kernelbench": kb_v, "kbrl": k_v, "agree": agree})
    both = [r for r in rows if r["agree"] is not None]

    # Speedups where both call the candidate correct.
    speed_rows = []
    for f in compared:
        k = kbrl.get(f)
        if not (k and done(k) and k["correct"] and k.get("speedup")):
            continue
        for n in kb_names:
            c = by_file[n].get(f)
            if not (c and done(c) and c["correct"] and c.get("speedup")):
                continue
            cvs = speed_noise(c) + speed_noise(k)
            band = 2.0 * math.sqrt(sum(v * v for v in cvs)) if len(cvs) == 4 else None
            log_ratio = math.log(k["speedup"] / c["speedup"])
            speed_rows.append({"file": f, "config": n, "kernelbench": c["speedup"], "kbrl": k["speedup"],
                               "ratio": k["speedup"] / c["speedup"], "band": band,
                               "within": None if band is None else abs(log_ratio) <= band,
                               "excessive_speedup_flag": c.get("excessive_speedup", False)})

    result = {"summaries": summaries, "ratio_kbrl_to_best_kernelbench": ratio,
              "kb_precompile_whole_workload": whole,
              "best_kernelbench": best["config"] if best else None, "verdicts": rows,
              "disagreements": disagreements, "unexpected_verdicts": unexpected, "speedups": speed_rows,
              "machines": dict(machines)}

    md = []
    md.append("# Evaluation throughput: kbrl-eval against KernelBench's own evaluation\n")
    hosts = {m.get("boot_id") or m.get("host") for _, m in machines}
    for d, m in machines:
        gpus = "; ".join("{} (driver {}, {})".format(g.get("name"), g.get("driver"), g.get("memory")) for g in m.get("gpus", []))
        md.append("- Machine ({}): {}; {} CPUs ({}); host {}; Python {}, torch {}; kbrl {}; KernelBench {}".format(
            d, gpus or "no GPU seen", m.get("cpus"), m.get("cpu_model"), m.get("host"), m.get("python"), m.get("torch"),
            short_commit(m.get("kbrl_commit")), short_commit(m.get("kernelbench_commit"))))
    if len(machines) > 1:
        md.append("- Same machine (boot) for every folder: {}".format("yes" if len(hosts) == 1 else "NO: compare with care"))
    imports = {json.dumps(c.get("kernelbench_import")) for n in kb_names for c in configs[n]["candidates"] if c.get("kernelbench_import")}
    for imp in sorted(imports):
        md.append("- How KernelBench was loaded: " + "; ".join(json.loads(imp)))
    workload_size = len(workload)
    md.append("")
    md.append("| configuration | candidates evaluated | wall s | candidates / min | compile s, median | compile s, p90 | GPU busy "
              "| CPU busy (mean of all cores) |")
    md.append("|---|---|---|---|---|---|---|---|")
    for name, s in summaries.items():
        evaluated = str(s["evaluated"])
        per_min = fmt(s.get("per_minute"))
        if name == "kb-precompile" and s.get("precompiled") is not None:
            evaluated += " (of {} pre-compiled, {} built)".format(s["precompiled"], s.get("precompile_ok"))
            per_min += " (projected; measured {})".format(fmt(s.get("measured_per_minute")))
        if name == "kb-verdicts":
            per_min = "not compared"
            if s.get("precompiled") is not None:
                evaluated += " (of {} pre-compiled, {} built)".format(s["precompiled"], s.get("precompile_ok"))
        if name == "kb-fresh" and s.get("candidate_wall_s"):
            per_min += " (from {:.0f} s of candidate processes)".format(s["candidate_wall_s"])
        gpu, cpu = s.get("gpu"), s.get("cpu")
        md.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
            s["title"], evaluated, fmt(s.get("wall_s"), "{:.0f}"), per_min, fmt(s.get("compile_s_median"), "{:.1f}"),
            fmt(s.get("compile_s_p90"), "{:.1f}"),
            "{:.0%} of {} samples".format(gpu["busy_fraction"], gpu["samples"]) if gpu else "-",
            "{:.0f}%".format(cpu["mean_utilization"]) if cpu else "-"))
    md.append("")
    if ratio is not None:
        md.append("**kbrl-eval / best KernelBench configuration ({}): {:.2f} / {:.2f} = {:.1f}x candidates per minute.**".format(
            best["title"], summaries["kbrl"]["per_minute"], best["per_minute"], ratio))
    else:
        md.append("kbrl-eval / best KernelBench configuration: not available (a configuration is missing or evaluated nothing).")
    if whole:
        kbrl_rate = summaries.get("kbrl", {}).get("per_minute")
        md.append("\nKernelBench's pre-compile configuration over the whole workload, from kb-verdicts (its batch_compile "
                  "of all {n} in {build:.0f} s, then each candidate's evaluation, {evals:.0f} s in all, one after "
                  "another): {rate:.2f} per minute{vs}.".format(
                      n=whole["candidates"], build=whole["build_s"], evals=whole["evaluations_s"], rate=whole["per_minute"],
                      vs="; kbrl-eval / that: {:.1f}x".format(kbrl_rate / whole["per_minute"]) if kbrl_rate else ""))
    for name, s in summaries.items():
        if s["not_evaluated"]:
            md.append("- {}: not counted: {}".format(name, ", ".join("{} ({})".format(x["file"], x["status"]) for x in s["not_evaluated"])))
        if s.get("stopped"):
            md.append("- {}: {}".format(name, s["stopped"]))
        if s["meta"].get("warmup_candidates"):
            md.append("- {}: its work dir was first warmed up, untimed ({:.0f} s), on {} renamed copies of the problems' "
                      "sample 0 (PCHs built, reference timings known); every workload candidate was built from "
                      "scratch".format(name, float(s["meta"].get("warmup_s", 0)), s["meta"]["warmup_candidates"]))
        if s.get("carried"):
            md.append("- {}: resumed: {} candidates were evaluated by an earlier run that was stopped, the rest by "
                      "this one (build phases of {} runs)".format(name, s["carried"], s.get("precompile_runs", 1)))
        if s.get("retried_alone"):
            md.append("- {}: out of GPU memory beside other evaluations, evaluated again alone (the second result "
                      "counts): {}".format(name, ", ".join(s["retried_alone"])))
        if s.get("over_kernelbench_timeout"):
            md.append("- {}: took more than KernelBench's 180 s evaluation timeout on their own (batch_eval would "
                      "record them as failed): {}".format(name, ", ".join(s["over_kernelbench_timeout"])))
        if s.get("rebuilt_after_timeout"):
            md.append("- {}: batch_compile passed its timeout and built again: {}".format(
                name, ", ".join(s["rebuilt_after_timeout"])))
    md.append("")
    md.append("## Verdicts of the candidates both evaluated\n")
    md.append("{} candidates evaluated by KernelBench and kbrl-eval: {} agree, {} disagree{}.".format(
        len(both), sum(1 for r in both if r["agree"]), len(disagreements),
        ": " + ", ".join(disagreements) if disagreements else ""))
    if unexpected:
        md.append("Verdicts other than the workload's expected one: " + ", ".join(unexpected) + ".")
    retried = sorted({(f, c.get("retry_error") or "") for n in kb_names for f, c in by_file[n].items()
                      if verdict(c) == BUILD_RETRY})
    if retried:
        md.append("")
        md.append("\"{}\": KernelBench's build raised, and eval_kernel_against_ref returned no result, asking for a "
                  "retry, because the error message contains \"lock\" (its test for a concurrent build's lock file): "
                  "counted as not compiling. {}.".format(BUILD_RETRY, "; ".join(
                      "{} ({})".format(f, ", ".join(sorted(set(re.findall(r"[\w<>]*lock\w*", e, re.I)))) or "?")
                      for f, e in retried)))
    md.append("")
    md.append("| candidate | kind | expected | " + " | ".join(TITLES[n] for n in kb_names) + " | kbrl-eval | agree |")
    md.append("|---|---|---|" + "---|" * len(kb_names) + "---|---|")
    for r in rows:
        md.append("| {} | {} | {} | {} | {} | {} |".format(
            r["file"], r["kind"], r["expected"], " | ".join(r["kernelbench"][n] or "-" for n in kb_names),
            r["kbrl"] or "-", {True: "yes", False: "**NO**", None: "-"}[r["agree"]]))
    md.append("")
    md.append("## Speedups of the candidates both call correct\n")
    md.append("Noise band: twice the root sum of squares of the four timings' coefficients of variation "
              "(candidate and reference, each evaluator); |ln(kbrl / KernelBench)| within it counts as agreeing.\n")
    md.append("| candidate | KernelBench configuration | KernelBench speedup | kbrl-eval speedup | ratio | noise band | within |")
    md.append("|---|---|---|---|---|---|---|")
    for r in speed_rows:
        md.append("| {} | {} | {:.2f}{} | {:.2f} | {:.3f} | {} | {} |".format(
            r["file"], r["config"], r["kernelbench"], " (flagged > 10x)" if r["excessive_speedup_flag"] else "",
            r["kbrl"], r["ratio"], fmt(r["band"], "{:.1%}"), {True: "yes", False: "**no**", None: "-"}[r["within"]]))
    if speed_rows:
        within = [r for r in speed_rows if r["within"] is not None]
        md.append("\n{} of {} speedups agree within the band; geometric mean of kbrl / KernelBench: {:.3f}.".format(
            sum(1 for r in within if r["within"]), len(within),
            math.exp(statistics.mean(math.log(r["ratio"]) for r in speed_rows))))
    md.append("")
    md.append("## Per-candidate times\n")
    for name in kb_names:
        md.append("{}:\n".format(TITLES[name]))
        md.append("| # | candidate | kind | verdict | wall s | compile s | speedup | note |")
        md.append("|---|---|---|---|---|---|---|---|")
        for c in sorted(configs[name]["candidates"], key=lambda c: c.get("index", 0)):
            md.append("| {} | {} | {} | {} | {:.1f} | {} | {} | {} |".format(
                c.get("index", ""), c.get("file"), c.get("kind"), verdict(c) or c.get("status"), c.get("wall_s", 0.0),
                fmt(c.get("compile_s"), "{:.1f}"), fmt(c.get("speedup")), (c.get("error") or "")[:120].replace("|", "/")))
        md.append("")
    if "kbrl" in configs:
        ks = [c for c in configs["kbrl"]["candidates"] if done(c)]
        md.append("kbrl-eval: {} results{}; verdicts: {}.\n".format(
            len(ks), " of a workload of {}".format(workload_size) if workload_size else "",
            ", ".join("{} {}".format(sum(1 for c in ks if verdict(c) == v), v) for v in ("correct", "wrong", "no compile"))))
    md.append("## Re-run\n")
    md.append("On the GPU machine, from the repository root, with a KernelBench checkout at $KB "
              "(see docs/performance.md, \"Evaluation throughput against KernelBench\"):\n")
    md.append("    bash benchmarks/eval_throughput/run.sh $KB /tmp/tp-build 0 build")
    md.append("    bash benchmarks/eval_throughput/run.sh $KB /tmp/tp-kbrl 0 kbrl")
    md.append("    bash benchmarks/eval_throughput/run.sh $KB /tmp/tp-kb 180 kb-fresh,kb-precompile")
    md.append("    python3 benchmarks/eval_throughput/summarize.py -o results.md /tmp/tp-kbrl /tmp/tp-kb")
    for name, s in summaries.items():
        m = s["meta"]
        if name != "kbrl" and m:
            md.append("\n{}: budget {} s, grace {} s, seed {}, gpu_arch {}.".format(
                name, m.get("budget_s"), m.get("grace_s"), m.get("seed"), m.get("gpu_arch")))
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text("\n".join(md) + "\n")
    output.with_suffix(".json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print("\n".join(md))
    return 0


if __name__ == "__main__":
    sys.exit(main())
