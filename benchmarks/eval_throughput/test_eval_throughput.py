#!/usr/bin/env python3
"""Tests of the throughput benchmark's Python parts that need no GPU and no KernelBench checkout:
the sampled order, loading KernelBench with missing packages (a fake checkout with the same
import structure), and summarize.py on synthetic results whose numbers are known.

usage: test_eval_throughput.py   (exit status 0 when every test passed)
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import kb_runner  # noqa: E402

FAILED = []


def check(condition, what):
    if not condition:
        FAILED.append(what)
        print("FAIL " + what)


def test_sample_order():
    candidates = json.loads((HERE / "workload" / "workload.json").read_text())["candidates"]
    a = kb_runner.sample_order(candidates, 1)
    b = kb_runner.sample_order(candidates, 1)
    c = kb_runner.sample_order(candidates, 2)
    check([x["file"] for x in a] == [x["file"] for x in b], "the order is the same for the same seed")
    check([x["file"] for x in a] != [x["file"] for x in c], "another seed gives another order")
    check(sorted(x["file"] for x in a) == sorted(x["file"] for x in candidates), "the order holds every candidate once")
    for start in range(0, len(a), 4):
        kinds = {x["kind"] for x in a[start:start + 4]}
        check(len(kinds) == 4, "candidates {}..{} are of four kinds: {}".format(start, start + 3, kinds))


def test_arch_names():
    check(kb_runner.ARCH_BY_CAPABILITY["9"] == "Hopper", "9.0 is Hopper")
    check(kb_runner.ARCH_BY_CAPABILITY["8.9"] == "Ada" and kb_runner.ARCH_BY_CAPABILITY["8.0"] == "Ampere",
          "8.9 is Ada and 8.0 Ampere")


FAKE_UTILS = '''
from dotenv import load_dotenv
load_dotenv()
import os
from kbt_absent_client import Client
import torch_stand_in_absent as also_absent

NVIDIA_ARCHS = ["Hopper"]
CLIENT = None


def set_gpu_arch(arch_list):
    os.environ["TORCH_CUDA_ARCH_LIST"] = ";".join(arch_list)


def query_server(prompt):
    return Client().complete(prompt)
'''

FAKE_EVAL = '''
import json
from pydantic import BaseModel
from . import timing, dataset


class KernelExecResult(BaseModel):
    compiled: bool = False
    correctness: bool = False
    metadata: dict = {}
    runtime: float = -1.0


def eval_kernel_against_ref(original_model_src, custom_model_src, **kwargs):
    from .utils import set_gpu_arch
    set_gpu_arch(["Hopper"])
    return KernelExecResult(compiled=True, correctness=True, runtime=timing.TRIALS)
'''


def fake_checkout(root):
    pkg = root / "src" / "kernelbench"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("from . import utils\n")
    (pkg / "utils.py").write_text(FAKE_UTILS)
    (pkg / "timing.py").write_text("TRIALS = 100\n")
    (pkg / "dataset.py").write_text("import os\n")
    (pkg / "eval.py").write_text(FAKE_EVAL)
    (pkg / "compile.py").write_text("from kernelbench.eval import eval_kernel_against_ref\nfrom kernelbench import utils\n")
    return root


def load_in_subprocess(checkout, pretend_missing):
    code = textwrap.dedent('''
        import json, os, sys
        sys.path.insert(0, {here!r})
        import kb_import
        kb, notes = kb_import.load({checkout!r})
        r = kb.eval.eval_kernel_against_ref("ref", "src")
        a, b = kb.eval.KernelExecResult(), kb.eval.KernelExecResult()
        a.metadata["x"] = 1
        print(json.dumps({{"notes": notes, "compiled": r.compiled, "runtime": r.runtime,
                          "arch": os.environ.get("TORCH_CUDA_ARCH_LIST"), "shared_default": "x" in b.metadata,
                          "base": kb.eval.KernelExecResult.__mro__[1].__name__,
                          "query_server": callable(kb.utils.query_server), "compile": kb.compile.utils is kb.utils}}))
    ''').format(here=str(HERE), checkout=str(checkout))
    env = dict(os.environ, KBT_PRETEND_MISSING=pretend_missing)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        return {"error": res.stderr}
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_kb_import():
    with tempfile.TemporaryDirectory() as tmp:
        checkout = fake_checkout(Path(tmp))
        # pydantic counts as missing whether or not it is installed here: the GPU machine's case.
        got = load_in_subprocess(checkout, "pydantic")
        check("error" not in got, "the fake checkout loads with its client packages missing: {}".format(got.get("error")))
        if "error" in got:
            return
        notes = "\n".join(got["notes"])
        check(got["compiled"] is True and got["runtime"] == 100, "eval_kernel_against_ref runs and sees timing")
        check(got["arch"] == "Hopper", "eval reaches utils.set_gpu_arch through a relative import")
        check(got["base"] == "RecordModel", "KernelExecResult is built on the RecordModel stand-in")
        check(got["shared_default"] is False, "each record gets its own copy of a mutable default")
        check(got["query_server"] and got["compile"], "functions that use left-out names stay defined; compile imports")
        for text in ("left out line 2: from dotenv import load_dotenv", "left out line 3: load_dotenv()",
                     "left out line 5: from kbt_absent_client import Client",
                     "left out line 6: import torch_stand_in_absent as also_absent",
                     "package pydantic is treated as missing", "pydantic.BaseModel replaced by kb_import.RecordModel",
                     "__init__.py not run"):
            check(text in notes, "the notes say: " + text)
        check("import os" not in notes, "imports of installed packages stay")


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def cand(file, kind, wall, compiled, correct, compile_s=70.0, speedup=None, status="done", **extra):
    r = {"type": "candidate", "file": file, "problem": int(file.split("_")[3]), "sample": int(file.split("_")[5]),
         "kind": kind, "status": status, "wall_s": wall, "started": 0.0, "finished": wall, "compile_s": compile_s}
    if status == "done":
        r.update({"compiled": compiled, "correct": correct, "speedup": speedup,
                  "runtime_ms": 1.0 if speedup else -1.0, "ref_runtime_ms": speedup or -1.0,
                  "runtime_std_ms": 0.01 if speedup else None, "ref_runtime_std_ms": 0.01 * (speedup or 0) if speedup else None})
    r.update(extra)
    return r


def kbrl_row(file, compiled, correct, speedup=None, compile_s=80.0):
    return {"problem": int(file.split("_")[3]), "sample": int(file.split("_")[5]), "file": file,
            "result": {"compiled": compiled, "correctness": correct, "speedup": speedup,
                       "runtime": 1.0 if speedup else -1.0, "ref_runtime": speedup or -1.0,
                       "runtime_stats": {"mean": 1.0, "std": 0.01}, "ref_runtime_stats": {"mean": speedup or 1.0, "std": 0.01 * (speedup or 1.0)},
                       "stage_seconds": {"compile": compile_s},
                       "error_category": "none" if correct else ("correctness" if compiled else "compile"),
                       "error_message": "" if correct else "bad"}}


def test_summarize():
    f0, f1, f2, f3 = ("level_1_problem_19_sample_0_kernel.py", "level_1_problem_19_sample_3_kernel.py",
                      "level_1_problem_40_sample_2_kernel.py", "level_1_problem_1_sample_1_kernel.py")
    with tempfile.TemporaryDirectory() as tmp:
        a, b = Path(tmp) / "run a", Path(tmp) / "run b"  # folder names with spaces, as paths may have
        a.mkdir()
        b.mkdir()
        machine = {"host": "h", "boot_id": "boot-1", "cpus": 16, "cpu_model": "cpu", "python": "3.12",
                   "torch": "2.11", "gpus": [{"name": "NVIDIA H100 80GB HBM3", "driver": "580", "memory": "81559 MiB"}]}
        (a / "machine.json").write_text(json.dumps(machine))
        (b / "machine.json").write_text(json.dumps(machine))
        write_jsonl(a / "kb-fresh.jsonl", [
            {"type": "meta", "config": "kb-fresh", "started": 0.0},
            cand(f0, "as_is", 150.0, True, True, compile_s=72.0, speedup=2.0, index=0),
            cand(f1, "compile_error", 90.0, False, False, compile_s=68.0, index=1),
            cand(f2, "wrong", 40.0, None, None, status="cut at the configuration's time limit", index=2),
            {"type": "end", "finished": 290.0, "wall_s": 290.0, "stopped": "time limit reached during a candidate"}])
        # Stopped from outside: no end line, and a torn last line.
        (a / "kb-precompile.jsonl").write_text(
            json.dumps({"type": "meta", "config": "kb-precompile", "started": 0.0}) + "\n"
            + json.dumps({"type": "phase", "name": "compile", "wall_s": 100.0, "candidates": [f0, f1, f2, f3],
                          "compiled": {f0: True, f1: False, f2: True, f3: True},
                          "compile_s": {f0: 80.0, f1: 60.0, f2: 90.0, f3: 100.0}}) + "\n"
            + json.dumps(cand(f0, "as_is", 20.0, True, True, speedup=2.1, index=0)) + "\n"
            + json.dumps(cand(f1, "compile_error", 40.0, False, False, index=1)) + "\n"
            + json.dumps(cand(f2, "wrong", 30.0, True, False, index=2)) + "\n"
            + '{"type": "candidate", "file": "lev')
        write_jsonl(b / "kbrl.jsonl", [
            {"type": "meta", "config": "kbrl", "started": 0.0, "warmup_candidates": 16, "warmup_s": 61.5},
            kbrl_row(f0, True, True, 2.0), kbrl_row(f1, False, False),
            kbrl_row(f2, True, True, 3.0),  # planted disagreement: kbrl calls the wrong kernel correct
            kbrl_row(f3, True, True, 1.0),
            {"type": "end", "finished": 120.0, "wall_s": 120.0, "exit_code": 0}])
        (a / "gpu.csv").write_text("kb-fresh,t, 0\nkb-fresh,t, 0\nkb-fresh,t, 50\nkb-fresh,t, 0\n"
                                   "kb-precompile,t, 10\nkb-precompile,t, [N/A]\n")
        (b / "gpu.csv").write_text("kbrl,t, 90\nkbrl,t, 0\nkbrl,t, 100\nkbrl,t, 100\n")
        (b / "cpu.csv").write_text("kbrl,t, 90.0\nkbrl,t, 70.0\n")
        c_dir = Path(tmp) / "run c"
        c_dir.mkdir()
        (c_dir / "machine.json").write_text(json.dumps(machine))
        # Every candidate; f3 ran out of memory beside others and was evaluated again alone.
        write_jsonl(c_dir / "kb-verdicts.jsonl", [
            {"type": "meta", "config": "kb-verdicts", "started": 0.0},
            {"type": "phase", "name": "compile", "wall_s": 300.0, "candidates": [f0, f1, f2, f3],
             "compiled": {f0: True, f1: False, f2: True, f3: True}, "compile_s": {f0: 80.0, f1: 60.0, f2: 90.0, f3: 100.0}},
            dict(cand(f0, "as_is", 400.0, True, True, speedup=2.0), active_s=120.0),
            dict(cand(f1, "compile_error", 90.0, False, False), active_s=90.0),
            dict(cand(f2, "wrong", 300.0, True, False), active_s=200.0),
            dict(cand(f3, "variant", 50.0, True, False), active_s=50.0),
            dict(cand(f3, "variant", 50.0, True, True, speedup=1.0), active_s=40.0, retry_of="out of memory"),
            {"type": "end", "finished": 900.0, "wall_s": 900.0, "stopped": "all candidates done", "retried_alone": [f3]}])
        out = Path(tmp) / "results.md"
        res = subprocess.run([sys.executable, str(HERE / "summarize.py"), "-o", str(out), str(a), str(b), str(c_dir)],
                             capture_output=True, text=True)
        check(res.returncode == 0, "summarize.py runs: " + res.stderr[-2000:])
        if res.returncode != 0:
            return
        r = json.loads(out.with_suffix(".json").read_text())
        s = r["summaries"]
        close = lambda x, y: x is not None and abs(x - y) < 1e-9  # noqa: E731
        check(s["kb-fresh"]["evaluated"] == 2, "kb-fresh counts the two finished candidates, not the cut one")
        check(close(s["kb-fresh"]["per_minute"], 60.0 * 2 / 240.0), "kb-fresh: 2 candidates in 240 s of processes")
        check(close(s["kb-fresh"]["compile_s_median"], 70.0), "kb-fresh compile median over finished candidates")
        check(close(s["kb-precompile"]["per_minute"], 60.0 * 4 / (100.0 + 4 * 30.0)),
              "kb-precompile: projected for the 4 pre-compiled with the mean evaluation of 30 s")
        check(s["kb-precompile"]["evaluated"] == 3, "kb-precompile keeps what it finished before it was stopped")
        check(close(s["kb-precompile"]["measured_per_minute"], 60.0 * 3 / 190.0), "kb-precompile: measured rate")
        check(close(s["kb-precompile"]["compile_s_p90"], 97.0), "kb-precompile compile p90 over the build phase")
        check("stopped from outside" in s["kb-precompile"]["stopped"], "a file without an end line is reported as stopped")
        check(close(s["kbrl"]["per_minute"], 60.0 * 4 / 120.0), "kbrl: 4 candidates in 120 s")
        check(close(s["kb-fresh"]["gpu"]["busy_fraction"], 0.25), "kb-fresh GPU busy in 1 of 4 samples")
        check(s["kb-precompile"]["gpu"]["samples"] == 1, "unreadable utilization samples are skipped")
        check(close(s["kbrl"]["gpu"]["busy_fraction"], 0.75), "kbrl GPU busy in 3 of 4 samples")
        check(close(s["kbrl"]["cpu"]["mean_utilization"], 80.0) and s["kb-fresh"]["cpu"] is None,
              "kbrl's CPU busy: the mean of its samples; none for a configuration without them")
        best = 60.0 * 4 / 220.0
        check(r["best_kernelbench"] == "kb-precompile", "the better KernelBench configuration is chosen")
        check(close(r["ratio_kbrl_to_best_kernelbench"], 2.0 / best), "kbrl over the best KernelBench configuration")
        check(r["disagreements"] == [f2] and r["unexpected_verdicts"] == [f2], "the planted disagreement is flagged")
        agree = [v["file"] for v in r["verdicts"] if v["agree"]]
        check(sorted(agree) == sorted([f0, f1, f3]), "the other verdicts agree: {}".format(agree))
        check(len(r["verdicts"]) == 4, "verdicts of the four candidates KernelBench evaluated (kb-verdicts has all)")
        v3 = next(v for v in r["verdicts"] if v["file"] == f3)
        check(v3["kernelbench"]["kb-verdicts"] == "correct" and v3["agree"], "the alone re-run's verdict counts")
        check(s["kb-verdicts"]["per_minute"] is None, "kb-verdicts has no throughput")
        check(s["kb-verdicts"]["over_kernelbench_timeout"] == [f2], "kb-verdicts: over 180 s on its own")
        check(s["kb-verdicts"]["retried_alone"] == [f3], "kb-verdicts: retried alone")
        whole = r["kb_precompile_whole_workload"]
        check(whole is not None and close(whole["per_minute"], 60.0 * 4 / (300.0 + 120.0 + 90.0 + 200.0 + 40.0)),
              "pre-compile over the whole workload: the build, then every evaluation (the alone re-run's): {}".format(whole))
        speeds = {(x["file"], x["config"]): x for x in r["speedups"]}
        check(set(speeds) == {(f0, "kb-fresh"), (f0, "kb-precompile"), (f0, "kb-verdicts"), (f3, "kb-verdicts")},
              "speedups of candidates correct in both: {}".format(sorted(speeds)))
        band = 2 * math.sqrt(4 * 0.01 ** 2)
        check(close(speeds[(f0, "kb-fresh")]["band"], band) and speeds[(f0, "kb-fresh")]["within"] is True,
              "equal speedups are within the band")
        check(speeds[(f0, "kb-precompile")]["within"] is False, "2.0 against 2.1 is outside a 4% band")
        md = out.read_text()
        check("**NO**" in md and "kbrl-eval / best KernelBench configuration" in md, "results.md shows both")
        check("Same machine (boot) for every folder: yes" in md, "one boot id over both folders")
        check("warmed up, untimed (62 s), on 16 renamed copies" in md, "kbrl's warm-up is stated")


def test_resumed_verdicts():
    """kb-verdicts resumed after a stop: what the stopped run finished is carried over (a candidate
    whose evaluation ran out of GPU memory and was not yet retried alone is not), and summarize.py
    counts both runs' candidates and build phases as one."""
    f0, f1, f2, f3 = ("level_1_problem_19_sample_0_kernel.py", "level_1_problem_19_sample_3_kernel.py",
                      "level_1_problem_40_sample_2_kernel.py", "level_1_problem_1_sample_1_kernel.py")
    phase1 = {"type": "phase", "name": "compile", "wall_s": 300.0, "candidates": [f0, f1, f2, f3],
              "compiled": {f0: True, f1: False, f2: True, f3: True}, "compile_s": {f0: 80.0, f1: 60.0, f2: 90.0, f3: 100.0}}
    with tempfile.TemporaryDirectory() as tmp:
        earlier = Path(tmp) / "earlier.jsonl"
        earlier.write_text("".join(json.dumps(r) + "\n" for r in [
            {"type": "meta", "config": "kb-verdicts", "started": 0.0}, phase1,
            dict(cand(f0, "as_is", 400.0, True, True, speedup=2.0), active_s=120.0),
            dict(cand(f1, "compile_error", 90.0, False, False), active_s=90.0),
            dict(cand(f3, "variant", 50.0, True, False), active_s=50.0, error="CUDA out of memory. Tried to allocate"),
            cand(f2, "wrong", 10.0, None, None, status="killed")]) + '{"type": "candidate", "fi')
        carried = kb_runner.earlier_verdicts(str(earlier))
        files = [r.get("file") for r in carried if r["type"] == "candidate"]
        check(files == [f0, f1], "carried: the two finished, not the one out of memory nor the killed one: {}".format(files))
        check([r["type"] for r in carried].count("phase") == 1, "the build phase is carried")
        d = Path(tmp) / "run"
        d.mkdir()
        write_jsonl(d / "kb-verdicts.jsonl", [{"type": "meta", "config": "kb-verdicts", "started": 1000.0}]
                    + [dict(r, carried_from=str(earlier)) for r in carried] + [
            {"type": "phase", "name": "compile", "wall_s": 100.0, "candidates": [f2, f3],
             "compiled": {f2: True, f3: True}, "compile_s": {f2: 70.0, f3: 50.0}},
            dict(cand(f2, "wrong", 60.0, True, False), active_s=60.0),
            dict(cand(f3, "variant", 50.0, True, True, speedup=1.0), active_s=40.0),
            {"type": "end", "finished": 1300.0, "wall_s": 300.0, "stopped": "all candidates done", "retried_alone": []}])
        out = Path(tmp) / "results.md"
        res = subprocess.run([sys.executable, str(HERE / "summarize.py"), "-o", str(out), str(d)],
                             capture_output=True, text=True)
        check(res.returncode == 0, "summarize.py runs: " + res.stderr[-2000:])
        if res.returncode != 0:
            return
        s = json.loads(out.with_suffix(".json").read_text())["summaries"]["kb-verdicts"]
        check(s["evaluated"] == 4 and s.get("carried") == 2, "four evaluated, two of them carried: {}".format(s))
        check(s["precompile_runs"] == 2 and s["precompile_wall_s"] == 400.0, "both build phases counted")
        check(s["compile_s_median"] == 65.0, "per candidate the last build's seconds: {}".format(s["compile_s_median"]))
        check("resumed: 2 candidates" in out.read_text(), "results.md says the run was resumed")


def test_retry_verdict():
    """KernelBench asks for a retry (and gives no result) when a build error's message contains
    "lock", as a candidate's block_sum does: summarize.py counts that as not compiling, from the
    record's retry_error or, for older records, from the candidate's log in logs.tar.gz."""
    f1, f2 = "level_1_problem_94_sample_3_kernel.py", "level_1_problem_1_sample_3_kernel.py"
    message = "Error building extension 'x': k.cu(51): error: too many arguments in function call\n  block_sum(s, 1);"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        retry = dict(cand(f1, "compile_error", 20.0, None, None, status="kernelbench asked for a retry"),
                     retry_error=message)
        old = cand(f2, "compile_error", 20.0, None, None, status="kernelbench asked for a retry")
        write_jsonl(d / "kb-verdicts.jsonl", [{"type": "meta", "config": "kb-verdicts", "started": 0.0}, retry, old])
        write_jsonl(d / "kbrl.jsonl", [{"type": "meta", "config": "kbrl", "started": 0.0},
                                       kbrl_row(f1, False, False), kbrl_row(f2, False, False)])
        logs = d / "logs" / "kb-verdicts"
        logs.mkdir(parents=True)
        (logs / (Path(f2).stem + ".log")).write_text(
            "[Eval] Lock file error during compilation, Please retry. Error: Error building extension 'y': "
            "k.cu(40): error: identifier \"kBlockK\" is undefined\n")
        subprocess.run(["tar", "-czf", str(d / "logs.tar.gz"), "-C", str(d), "logs"], check=True)
        res = subprocess.run([sys.executable, str(HERE / "summarize.py"), "-o", str(d / "results.md"), str(d)],
                             capture_output=True, text=True)
        check(res.returncode == 0, "summarize.py runs: " + res.stderr[-2000:])
        if res.returncode != 0:
            return
        r = json.loads((d / "results.json").read_text())
        got = {v["file"]: (v["kernelbench"]["kb-verdicts"], v["agree"]) for v in r["verdicts"]}
        check(got == {f1: ("no compile (retry)", True), f2: ("no compile (retry)", True)},
              "both retries count as not compiling and agree with kbrl: {}".format(got))
        md = (d / "results.md").read_text()
        check("(block_sum)" in md and "(kBlockK)" in md, "results.md names the words that contain 'lock'")


TURNS_CHILD = r"""
import json, sys, time, types
sys.path.insert(0, sys.argv[1])
import kb_runner

log = open(sys.argv[2], "a")
name = sys.argv[3]

def mark(what, start):
    log.write(json.dumps({"who": name, "what": what, "start": start, "end": time.time()}) + "\n")
    log.flush()

def get_inputs(scale):
    start = time.time()
    time.sleep(0.4)  # the host-side input generation
    mark("cpu", start)
    return [scale]

def get_init_inputs():
    raise ValueError("no init inputs " + name)

def load_original_model_and_inputs(src, context):
    return "Model", get_init_inputs, get_inputs

kb = types.SimpleNamespace(eval=types.SimpleNamespace(load_original_model_and_inputs=load_original_model_and_inputs,
                                                      load_custom_model=lambda src, ctx, d: "ModelNew"))
turns = kb_runner.GpuTurns(sys.argv[4])
turns.install(kb)
model, init, inputs = kb.eval.load_original_model_and_inputs("src", {})
turns.acquire()
try:
    init()
except ValueError as e:
    assert str(e) == "no init inputs " + name, e
for trial in range(3):
    start = time.time()
    time.sleep(0.3)  # a trial on the GPU
    mark("gpu", start)
    assert inputs(trial) == [trial]
assert kb.eval.load_custom_model("s", {}, "d") == "ModelNew"
turns.release()
print(json.dumps({"wait_s": turns.wait_s, "turns": turns.turns}))
"""


def test_precompile_wall():
    """A configuration's wall time runs from its meta line's start to its end line, the build phase
    included, whatever the end line's own wall_s says (kb-precompile runs up to 2026-11-25 wrote
    the last candidate's there)."""
    f0 = "level_1_problem_19_sample_0_kernel.py"
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_jsonl(d / "kb-precompile.jsonl", [
            {"type": "meta", "config": "kb-precompile", "started": 10.0},
            {"type": "phase", "name": "compile", "wall_s": 100.0, "candidates": [f0], "compiled": {f0: True},
             "compile_s": {f0: 90.0}},
            cand(f0, "as_is", 84.7, True, True, speedup=1.5, index=0),
            {"type": "end", "finished": 410.0, "wall_s": 84.7, "stopped": "budget reached"}])
        out = d / "results.md"
        res = subprocess.run([sys.executable, str(HERE / "summarize.py"), "-o", str(out), str(d)],
                             capture_output=True, text=True)
        check(res.returncode == 0, "summarize.py runs: " + res.stderr[-2000:])
        if res.returncode == 0:
            wall = json.loads(out.with_suffix(".json").read_text())["summaries"]["kb-precompile"]["wall_s"]
            check(abs(wall - 400.0) < 1e-9, "kb-precompile's wall: build and evaluation, 400 s: {}".format(wall))


def test_cpu_sampler():
    """kb_runner.py cpu-sampler prints the share of all cores busy, a percentage, until killed."""
    proc = subprocess.Popen([sys.executable, str(HERE / "kb_runner.py"), "cpu-sampler", "--interval", "0.2"],
                            stdout=subprocess.PIPE, text=True)
    lines = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    # Keep one core busy until three samples are out (its start-up alone can take a second on a
    # loaded machine), or 30 s have passed.
    give_up = time.time() + 30.0
    while time.time() < give_up and sum("," in line for line in lines) < 3:
        pass
    proc.terminate()
    proc.wait(timeout=10)
    reader.join(timeout=10)
    values = [float(line.split(",")[1]) for line in lines if "," in line]
    check(len(values) >= 3 and all(0.0 <= v <= 100.0 for v in values) and max(values) > 0.0,
          "cpu-sampler prints percentages, some of them above zero: {}".format(values))


def test_gpu_turns():
    """Two processes taking turns: their GPU phases never overlap, their CPU phases run meanwhile,
    and the wrapped calls pass results and exceptions through."""
    with tempfile.TemporaryDirectory() as tmp:
        log, lock = Path(tmp) / "phases.jsonl", Path(tmp) / "gpu.lock"
        lock.touch()
        procs = [subprocess.Popen([sys.executable, "-c", TURNS_CHILD, str(HERE), str(log), who, str(lock)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for who in ("a", "b")]
        outs = [p.communicate(timeout=60) for p in procs]
        for p, (o, e) in zip(procs, outs):
            check(p.returncode == 0, "a GpuTurns child ran: " + e[-2000:])
        if any(p.returncode for p in procs):
            return
        phases = [json.loads(line) for line in log.read_text().splitlines()]
        gpu = sorted((x for x in phases if x["what"] == "gpu"), key=lambda x: x["start"])
        check(len(gpu) == 6, "six GPU phases")
        check(all(x["end"] <= y["start"] + 1e-3 for x, y in zip(gpu, gpu[1:])), "no two GPU phases overlap")
        cpu = [x for x in phases if x["what"] == "cpu"]
        overlapping = [c for c in cpu for g in gpu if g["who"] != c["who"] and c["start"] < g["end"] and g["start"] < c["end"]]
        check(len(overlapping) >= 2, "input generation runs while the other process has the GPU")
        stats = [json.loads(o) for o, _ in outs]
        check(all(x["turns"] == 6 for x in stats), "a turn at the start and after each of five CPU calls: {}".format(stats))
        check(max(x["wait_s"] for x in stats) > 0.1, "one of the processes waited for its turn")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Takes no arguments; the exit status is 0 when every test passed.")
    parser.parse_args()
    tests = (test_sample_order, test_arch_names, test_kb_import, test_cpu_sampler, test_gpu_turns, test_summarize, test_resumed_verdicts, test_retry_verdict,
             test_precompile_wall)
    failed_tests = 0
    for test in tests:
        before = len(FAILED)
        test()
        failed_tests += len(FAILED) != before
        print("{} {}".format("ok  " if len(FAILED) == before else "FAIL", test.__name__))
    print("{} passed, {} failed".format(len(tests) - failed_tests, failed_tests))
    return 1 if failed_tests else 0


if __name__ == "__main__":
    sys.exit(main())
