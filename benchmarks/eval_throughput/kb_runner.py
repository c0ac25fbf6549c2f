#!/usr/bin/env python3
"""KernelBench's own evaluation of the throughput workload, run the two ways people run it.

  fresh       one new python3 process per candidate (this file's `one` command), which builds
              and evaluates it with KernelBench's eval_kernel_against_ref in a fresh build
              directory of its own; one candidate after another (a local evaluator that starts
              a process per kernel, as kernelbench-tinker's does)
  precompile  KernelBench's parallel CPU build, kernelbench.compile.batch_compile (what
              scripts/eval_from_generations.py runs with build_cache=True), then the GPU
              evaluation one candidate after another, each in a fresh spawned process as
              eval_from_generations' batch_eval does (a pool of one process per candidate,
              KernelBench's 180 s timeout)
  verdicts    not one of KernelBench's configurations but its verdict and speedup on every
              candidate, in a time one GPU machine can give: KernelBench's parallel CPU build of
              the whole workload, then evaluation processes run several at a time, taking turns
              on the GPU (see GpuTurns), each with KernelBench's eval_kernel_against_ref
  one         (used by fresh and verdicts) evaluates one candidate and writes its result as JSON
  order       prints the sampled order of the workload
  machine     writes the machine description as JSON

Both configurations use eval_from_generations' settings: 5 correctness trials, 100 timed runs,
cuda_event timing, fp32, backend cuda, KernelBench's default seed, and the exception handling of
its evaluate_single_sample. They walk the same seeded order of the workload and start candidates
while less than --budget seconds have passed (precompile: since its parallel build ended); the
one in flight may run on until --budget + --grace, where it is cut and left out of the counts.
Each candidate is appended to --out as one JSON line as soon as it is done, so a configuration
stopped from outside keeps what it finished.

Build times: every call of torch.utils.cpp_extension.load_inline (and load) is timed by a thin
wrapper that records its duration and passes arguments, results and exceptions through unchanged.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

# eval_from_generations.py's EvalConfig defaults.
NUM_CORRECT_TRIALS = 5
NUM_PERF_TRIALS = 100
TIMING_METHOD = "cuda_event"
PRECISION = "fp32"
BACKEND = "cuda"
KB_TIMEOUT_S = 180  # EvalConfig.timeout: batch_compile's per-build limit and batch_eval's per-candidate one

# torch.cuda compute capability (major) -> KernelBench's gpu_arch names (utils.NVIDIA_ARCHS).
ARCH_BY_CAPABILITY = {"6": "Pascal", "7.0": "Volta", "7.2": "Volta", "7.5": "Turing", "8.0": "Ampere",
                      "8.6": "Ampere", "8.7": "Ampere", "8.9": "Ada", "9": "Hopper", "10": "Blackwell",
                      "12": "Blackwell"}

KB = None  # the KernelBench modules, once loaded
KB_NOTES = []


def setup_kernelbench():
    """Loads KernelBench from $KBT_CHECKOUT (kb_import) and installs the build-time probe."""
    global KB, KB_NOTES
    if KB is None:
        import kb_import
        KB, KB_NOTES = kb_import.load(os.environ["KBT_CHECKOUT"])
        install_build_probe()
    return KB


def install_build_probe():
    path = os.environ.get("KBT_COMPILE_LOG")
    if not path:
        return
    import functools
    import torch.utils.cpp_extension as cpp_extension

    def timed(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            start = time.time()
            ok = False
            try:
                result = fn(*args, **kwargs)
                ok = True
                return result
            finally:
                record = {"pid": os.getpid(), "phase": os.environ.get("KBT_PHASE", ""), "name": kwargs.get("name", args[0] if args else ""),
                          "extensions_dir": os.environ.get("TORCH_EXTENSIONS_DIR", ""), "start": start,
                          "seconds": time.time() - start, "ok": ok}
                with open(path, "a") as f:
                    f.write(json.dumps(record) + "\n")
        return wrapper

    cpp_extension.load_inline = timed(cpp_extension.load_inline)
    cpp_extension.load = timed(cpp_extension.load)


class GpuTurns:
    """Lets several KernelBench evaluations share one GPU without touching each other's numbers.

    A process holds an exclusive lock on a file (flock) whenever it may use the GPU, and lets it
    go only while it does CPU work that needs no GPU: the problem's get_inputs / get_init_inputs
    (which make KernelBench's inputs on the host, most of its evaluation time on multi-gigabyte
    problems) and load_custom_model (the build, or loading the pre-built extension). So while
    one process runs its trials or times its kernel, no other process runs anything on the GPU,
    and the others make their next inputs meanwhile. The wrappers only pass the calls through:
    arguments, results, exceptions and the random state are KernelBench's own. Before letting
    go, the process waits for its GPU work and returns its cached free blocks to the driver, so
    the processes waiting share the memory."""

    def __init__(self, path):
        self.file = open(path, "a+")
        self.wait_s = 0.0
        self.turns = 0

    def acquire(self):
        import fcntl

        start = time.time()
        fcntl.flock(self.file.fileno(), fcntl.LOCK_EX)
        self.wait_s += time.time() - start
        self.turns += 1

    def release(self):
        import fcntl
        import torch

        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        fcntl.flock(self.file.fileno(), fcntl.LOCK_UN)

    def off_gpu(self, fn):
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            self.release()
            try:
                return fn(*args, **kwargs)
            finally:
                self.acquire()
        return wrapper

    def install(self, kb):
        """Wraps the CPU-only calls of kb.eval that eval_kernel_against_ref makes."""
        load_ref = kb.eval.load_original_model_and_inputs

        def load_original_model_and_inputs(*args, **kwargs):
            model, get_init_inputs, get_inputs = load_ref(*args, **kwargs)
            return model, self.off_gpu(get_init_inputs), self.off_gpu(get_inputs)

        kb.eval.load_original_model_and_inputs = load_original_model_and_inputs
        kb.eval.load_custom_model = self.off_gpu(kb.eval.load_custom_model)


# Spawned children (KernelBench's process pools) run this file as __mp_main__: they need the same
# KernelBench modules and the probe before the pool unpickles KernelBench's functions.
if __name__ == "__mp_main__" and os.environ.get("KBT_CHECKOUT"):
    setup_kernelbench()


# ---- the workload and its order ------------------------------------------------------------------

def load_workload(workload_dir):
    data = json.loads((Path(workload_dir) / "workload.json").read_text())
    return data["candidates"]


def sample_order(candidates, seed):
    """A seeded random order in which every run of four holds one candidate of each kind, so that
    any prefix has about the workload's mix of outcomes (half correct, a quarter wrong, a quarter
    not compiling)."""
    rng = random.Random(seed)
    by_kind = {}
    for c in sorted(candidates, key=lambda c: c["file"]):
        by_kind.setdefault(c["kind"], []).append(c)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    for group in by_kind.values():
        rng.shuffle(group)
    order = []
    while any(by_kind.values()):
        for kind in kinds:
            if by_kind[kind]:
                order.append(by_kind[kind].pop(0))
    return order


# ---- one evaluation, as eval_from_generations.evaluate_single_sample does it ---------------------

def evaluate_candidate(ref_src, kernel_src, build_dir):
    """KernelBench's evaluation of one candidate on cuda:0, returned as a plain dict."""
    kb = setup_kernelbench()
    import torch

    device = torch.device("cuda:0")
    try:
        result = kb.eval.eval_kernel_against_ref(
            original_model_src=ref_src,
            custom_model_src=kernel_src,
            measure_performance=True,
            timing_method=TIMING_METHOD,
            verbose=False,
            num_correct_trials=NUM_CORRECT_TRIALS,
            num_perf_trials=NUM_PERF_TRIALS,
            build_dir=build_dir,
            device=device,
            backend=BACKEND,
            precision=kb.eval.get_torch_dtype_from_string(PRECISION),
        )
    except Exception as e:
        # eval_from_generations.evaluate_single_sample's last-level catch: a CUDA error counts as
        # not compiled ("not runnable code"), and so does any other exception.
        name = kb.eval.get_error_name(e)
        if "CUDA error" in str(e):
            metadata = {"cuda_error": "CUDA Error: {}".format(e), "cuda_error_name": name}
        else:
            metadata = {"other_error": "error: {}".format(e), "other_error_name": name}
        result = kb.eval.KernelExecResult(compiled=False, correctness=False, metadata=metadata)
    if result is None:  # KernelBench's answer to a lock-file error during the build: retry
        return None
    return {
        "compiled": bool(result.compiled),
        "correctness": bool(result.correctness),
        "runtime": result.runtime,
        "ref_runtime": result.ref_runtime,
        "runtime_stats": result.runtime_stats,
        "ref_runtime_stats": result.ref_runtime_stats,
        "metadata": kb.eval.check_metadata_serializable_all_types(result.metadata),
    }


def error_summary(metadata):
    for key in ("compilation_error", "runtime_error", "correctness_issue", "cuda_error", "other_error", "error"):
        if metadata and metadata.get(key):
            text = str(metadata[key]).strip().splitlines()
            return "{}: {}".format(key, text[0][:300] if text else "")
    return ""


def build_records(log_path, phase=None):
    records = []
    try:
        with open(log_path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if phase is None or r.get("phase") == phase:
                    records.append(r)
    except OSError:
        pass
    return records


def candidate_record(c, started, finished, result, status, compile_s, extra=None):
    rec = {"type": "candidate", "file": c["file"], "problem": c["problem"], "sample": c["sample"],
           "kind": c["kind"], "expect": c["expect"], "started": started, "finished": finished,
           "wall_s": finished - started, "status": status, "compile_s": compile_s}
    if result is not None:
        runtime, ref = result.get("runtime", -1.0), result.get("ref_runtime", -1.0)
        rec.update({
            "compiled": result["compiled"], "correct": result["correctness"],
            "runtime_ms": runtime, "ref_runtime_ms": ref,
            "runtime_std_ms": (result.get("runtime_stats") or {}).get("std"),
            "ref_runtime_std_ms": (result.get("ref_runtime_stats") or {}).get("std"),
            "speedup": ref / runtime if result["correctness"] and runtime and runtime > 0 and ref and ref > 0 else None,
            "excessive_speedup": bool((result.get("metadata") or {}).get("excessive_speedup")),
            "error": error_summary(result.get("metadata")),
        })
    rec.update(extra or {})
    return rec


class Output:
    def __init__(self, path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record):
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")


def reference_source(checkout, c):
    return (Path(checkout) / "KernelBench" / c["problem_file"]).read_text()


# ---- configurations ---------------------------------------------------------------------------

CHILD_GROUPS = set()  # process groups of the candidate processes running now


def own_session_dying_with_parent():
    """In the candidate's process before exec: a session of its own (so that a timeout can kill its
    builds with it) that is killed if this runner dies, so that no evaluation outlives the run."""
    os.setsid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def on_term(signum, frame):
    for pgid in list(CHILD_GROUPS):
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    sys.exit(128 + signum)


class OneProcess:
    """One candidate evaluated by this file's `one` command in a new python3 process."""

    def __init__(self, args, c, build_dir, results_dir, logs, phase, fresh_build, gpu_lock=""):
        self.c = c
        stem = Path(c["file"]).stem
        self.result_path = Path(results_dir) / (stem + ".json")
        self.probe = Path(results_dir) / (stem + ".builds.jsonl")
        self.result_path.parent.mkdir(parents=True, exist_ok=True)
        if fresh_build:
            shutil.rmtree(build_dir, ignore_errors=True)  # a fresh build, as in a new RL step
        for p in (self.result_path, self.probe):
            if p.exists():
                p.unlink()
        env = dict(os.environ, KBT_CHECKOUT=str(Path(args.checkout).resolve()), KBT_COMPILE_LOG=str(self.probe),
                   KBT_PHASE=phase, PYTHONUNBUFFERED="1")
        cmd = [sys.executable, str(Path(__file__).resolve()), "one", "--checkout", args.checkout,
               "--problem-file", c["problem_file"], "--candidate", str(Path(args.workload) / c["file"]),
               "--build-dir", str(build_dir), "--result", str(self.result_path), "--gpu-arch", args.gpu_arch]
        if gpu_lock:
            cmd += ["--gpu-lock", str(gpu_lock)]
        Path(logs).mkdir(parents=True, exist_ok=True)
        self.log = open(Path(logs) / (stem + ".log"), "w")
        self.started = time.time()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     preexec_fn=own_session_dying_with_parent)
        CHILD_GROUPS.add(self.proc.pid)

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()

    def finish(self, rc):
        """(result or None, status, payload, build seconds) once the process ended (rc None: killed)."""
        self.finished = time.time()
        self.log.close()
        CHILD_GROUPS.discard(self.proc.pid)
        builds = build_records(self.probe)
        compile_s = sum(r["seconds"] for r in builds) if builds else None
        if rc is None:
            return None, "timeout", {}, compile_s
        try:
            payload = json.loads(self.result_path.read_text())
        except (OSError, ValueError):
            payload = {"result": None, "error": "the process exited with {} and wrote no result".format(rc)}
        result = payload.get("result")
        if result is None and payload.get("retry"):
            payload["retry_error"] = retry_error(Path(self.log.name).read_text(errors="replace"))
        if result is None:
            status = RETRY if payload.get("retry") else "no result: " + str(payload.get("error", ""))[:300]
        else:
            status = "done"
        return result, status, payload, compile_s


def meta_record(args, config, order, extra):
    rec = {"type": "meta", "config": config, "started": time.time(), "host": socket.gethostname(),
           "budget_s": args.budget, "grace_s": args.grace, "seed": args.seed, "gpu_arch": args.gpu_arch,
           "order": [c["file"] for c in order],
           "settings": {"num_correct_trials": NUM_CORRECT_TRIALS, "num_perf_trials": NUM_PERF_TRIALS,
                        "timing_method": TIMING_METHOD, "precision": PRECISION, "backend": BACKEND},
           "checkout": str(Path(args.checkout).resolve())}
    rec.update(extra)
    return rec


def run_fresh(args):
    order = sample_order(load_workload(args.workload), args.seed)
    out = Output(args.out)
    out.write(meta_record(args, "kb-fresh", order, {"candidate_cap_s": args.candidate_cap}))
    logs = Path(args.logs)
    logs.mkdir(parents=True, exist_ok=True)
    scratch = Path(args.scratch)
    t0 = time.time()
    hard = t0 + args.budget + args.grace
    stopped = "all candidates done"
    for i, c in enumerate(order):
        now = time.time()
        if now - t0 >= args.budget:
            stopped = "budget reached"
            break
        limit = min(args.candidate_cap, hard - now)
        one = OneProcess(args, c, scratch / "kb_fresh_build" / Path(c["file"]).stem, scratch / "kb_fresh_results",
                         logs, "fresh", fresh_build=True)
        try:
            rc = one.proc.wait(timeout=max(1.0, limit))
        except subprocess.TimeoutExpired:
            one.kill()
            rc = None
        result, status, payload, compile_s = one.finish(rc)
        if rc is None:
            cut = limit < args.candidate_cap
            status = "cut at the configuration's time limit" if cut else "timeout"
            out.write(candidate_record(c, one.started, one.finished, None, status, compile_s, {"index": i}))
            if cut:
                stopped = "time limit reached during a candidate"
                break
            continue
        out.write(candidate_record(c, one.started, one.finished, result, status, compile_s,
                                   {"index": i, "exit_code": rc, "kernelbench_import": payload.get("kernelbench_import"),
                                    "retry_error": payload.get("retry_error")}))
    out.write({"type": "end", "finished": time.time(), "wall_s": time.time() - t0, "stopped": stopped})
    return 0


RETRY = "kernelbench asked for a retry"  # a candidate's status when KernelBench gave no result


def retry_error(log_text):
    """What KernelBench printed when it asked for a retry: eval_kernel_against_ref does so when
    the candidate's build raised an error whose message contains "lock" or "No such file or
    directory" (its test for a concurrent build's lock file), and returns no result."""
    m = re.search(r"Please retry\. Error: ", log_text)
    return log_text[m.end():m.end() + 4000] if m else None


def run_one(args):
    """One candidate in this fresh process: KernelBench's evaluation, its result as JSON."""
    payload = {"result": None}
    try:
        kb = setup_kernelbench()
        payload["kernelbench_import"] = KB_NOTES
        kb.utils.set_gpu_arch([args.gpu_arch])
        ref_src = (Path(args.checkout) / "KernelBench" / args.problem_file).read_text()
        kernel_src = Path(args.candidate).read_text()
        turns = None
        if args.gpu_lock:
            turns = GpuTurns(args.gpu_lock)
            turns.install(kb)
            turns.acquire()
        try:
            result = evaluate_candidate(ref_src, kernel_src, args.build_dir)
        finally:
            if turns:
                turns.release()
                payload["gpu_wait_s"] = turns.wait_s
                payload["gpu_turns"] = turns.turns
        payload["result"] = result
        payload["retry"] = result is None
    except BaseException as e:  # the runner's own failure, not the candidate's: reported as such
        payload["error"] = "{}: {}\n{}".format(type(e).__name__, e, traceback.format_exc()[-2000:])
    Path(args.result).write_text(json.dumps(payload))
    return 0


def evaluate_in_pool(ref_src, kernel_src, build_dir):
    """Runs in KernelBench's one-process pool (a spawned child of this file)."""
    os.environ["KBT_PHASE"] = "eval"
    return evaluate_candidate(ref_src, kernel_src, build_dir)


def batch_compile_phase(args, chosen, out):
    """KernelBench's batch_compile of `chosen` (as eval_from_generations runs it with
    build_cache=True) in a clean scratch folder; writes the phase record and returns
    (build folder of a candidate, build seconds per build folder, start time, probe path)."""
    import multiprocessing as mp

    scratch = Path(args.scratch)
    runs_dir = scratch / "kb_runs"
    run_name = "eval_throughput"
    run_dir = runs_dir / run_name
    for stale in (runs_dir, scratch / "kb_cache"):  # no build of an earlier run may be found
        shutil.rmtree(stale, ignore_errors=True)
    run_dir.mkdir(parents=True, exist_ok=True)
    for c in chosen:
        (run_dir / c["file"]).write_text((Path(args.workload) / c["file"]).read_text())
    probe = scratch / "kb_precompile_builds.jsonl"
    if probe.exists():
        probe.unlink()
    os.environ.update(KBT_CHECKOUT=str(Path(args.checkout).resolve()), KBT_COMPILE_LOG=str(probe),
                      KBT_PHASE="precompile")
    if mp.get_start_method(allow_none=True) is None:
        mp.set_start_method("spawn")  # as eval_from_generations.main does
    kb = setup_kernelbench()
    kb.utils.set_gpu_arch([args.gpu_arch])  # main() sets it before batch_compile and batch_eval
    config = {
        "runs_dir": str(runs_dir), "run_name": run_name, "level": 1,
        "kernel_eval_build_dir": str(scratch / "kb_cache"), "gpu_arch": [args.gpu_arch],
        "num_cpu_workers": args.workers, "timeout": args.kb_timeout, "verbose": False,
    }
    t0 = time.time()
    work = [(c["problem"], c["sample"]) for c in chosen]
    compiled = kb.compile.batch_compile(work, config)
    t1 = time.time()
    per_dir = {}
    for r in build_records(probe, "precompile"):
        per_dir.setdefault(r["extensions_dir"], []).append(r["seconds"])

    def build_dir_of(c):
        return os.path.join(config["kernel_eval_build_dir"], run_name, str(c["problem"]), str(c["sample"]))

    out.write({"type": "phase", "name": "compile", "started": t0, "finished": t1, "wall_s": t1 - t0,
               "workers": args.workers, "candidates": [c["file"] for c in chosen],
               "compiled": {c["file"]: ok for c, ok in zip(chosen, compiled)},
               "compile_s": {c["file"]: (sum(per_dir[build_dir_of(c)]) if build_dir_of(c) in per_dir else None)
                             for c in chosen},
               # more than one: batch_compile passed its timeout and built the candidate again
               "builds": {c["file"]: len(per_dir.get(build_dir_of(c), [])) for c in chosen}})
    return build_dir_of, per_dir, t0, probe


def run_precompile(args):
    import multiprocessing as mp

    order = sample_order(load_workload(args.workload), args.seed)
    count = min(len(order), args.precompile_count or args.workers)
    chosen = order[:count]
    out = Output(args.out)
    out.write(meta_record(args, "kb-precompile", order, {"workers": args.workers, "kb_timeout_s": args.kb_timeout,
                                                          "precompiled": [c["file"] for c in chosen]}))
    build_dir_of, per_dir, started, probe = batch_compile_phase(args, chosen, out)
    # The budget is the evaluation phase's: a slow parallel build must not leave it none.
    t0 = time.time()
    hard = t0 + args.budget + args.grace
    stopped = "all precompiled candidates done"
    for i, c in enumerate(chosen):
        now = time.time()
        if now - t0 >= args.budget:
            stopped = "budget reached"
            break
        ref_src = reference_source(args.checkout, c)
        kernel_src = (Path(args.workload) / c["file"]).read_text()
        limit = min(args.kb_timeout, hard - now)
        cand_started = time.time()
        result, status = None, "done"
        before = len(build_records(probe, "eval"))
        with mp.Pool(1) as pool:
            pending = pool.apply_async(evaluate_in_pool, (ref_src, kernel_src, build_dir_of(c)))
            try:
                result = pending.get(timeout=max(1.0, limit))
                if result is None:
                    status = RETRY
            except mp.TimeoutError:
                if limit < args.kb_timeout:
                    status = "cut at the configuration's time limit"
                else:  # batch_eval records KernelBench's own timeout as a failed evaluation
                    result = {"compiled": False, "correctness": False, "runtime": -1.0, "ref_runtime": -1.0,
                              "runtime_stats": {}, "ref_runtime_stats": {},
                              "metadata": {"error": "Evaluation timed out"}}
            except Exception as e:  # batch_eval's outer catch: a failed evaluation
                result = {"compiled": False, "correctness": False, "runtime": -1.0, "ref_runtime": -1.0,
                          "runtime_stats": {}, "ref_runtime_stats": {}, "metadata": {"error": str(e)}}
        finished = time.time()
        loads = build_records(probe, "eval")[before:]
        out.write(candidate_record(c, cand_started, finished, result, status, per_dir.get(build_dir_of(c)) and sum(per_dir[build_dir_of(c)]),
                                   {"index": i, "eval_build_s": sum(r["seconds"] for r in loads) if loads else None,
                                    "kernelbench_import": KB_NOTES}))
        if status.startswith("cut"):
            stopped = "time limit reached during a candidate"
            break
    out.write({"type": "end", "finished": time.time(), "wall_s": time.time() - started, "stopped": stopped})
    return 0


def input_bytes(checkout, problem_file):
    """Bytes of a problem's get_inputs(), from the shapes it makes on torch's meta device (nothing
    is allocated); None when that fails."""
    import torch

    path = Path(checkout) / "KernelBench" / problem_file
    namespace = {"__name__": "kbt_problem"}
    try:
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        with torch.device("meta"):
            inputs = namespace["get_inputs"]()
        return sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor))
    except Exception:
        return None


def gpu_memory_bytes():
    try:
        mib = subprocess.run(["nvidia-smi", "-i", "0", "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=30).stdout.split()[0]
        return float(mib) * 2**20
    except (OSError, IndexError, ValueError, subprocess.SubprocessError):
        return None


def out_of_memory(result, log_path):
    text = json.dumps(result or {}).lower()
    try:
        text += Path(log_path).read_text(errors="replace")[-20000:].lower()
    except OSError:
        pass
    return "out of memory" in text


def run_verdicts(args):
    """KernelBench's verdict and speedup for every candidate of the workload. Not a configuration
    people run (its throughput is not compared): KernelBench's parallel build of all candidates,
    then up to --concurrency evaluation processes at once, each KernelBench's
    eval_kernel_against_ref in a new process on the pre-built candidate, taking turns on the GPU
    (GpuTurns), so that each one's trials and timings run alone on the GPU while the others make
    their inputs on the CPU. A process starts only while the planned GPU memory of those running
    (3x the problem's inputs + 1 GiB each: inputs and two outputs kept between trials), plus the
    largest inputs again for the one on the GPU, fits in --gpu-memory-gib. A candidate whose
    evaluation ran out of GPU memory is evaluated again alone at the end, and both results kept."""
    candidates = sorted(load_workload(args.workload), key=lambda c: (c["problem"], c["sample"]))
    carried = earlier_verdicts(args.resume) if args.resume else []
    carried_files = {r["file"] for r in carried if r.get("type") == "candidate"}
    candidates = [c for c in candidates if c["file"] not in carried_files]
    out = Output(args.out)
    budget = args.gpu_memory_gib * 2**30 if args.gpu_memory_gib > 0 else 0.85 * (gpu_memory_bytes() or 0)
    if budget <= 0:
        raise SystemExit("cannot tell the GPU's memory from nvidia-smi: pass --gpu-memory-gib")
    sizes = {}
    for c in candidates:
        if c["problem_file"] not in sizes:
            sizes[c["problem_file"]] = input_bytes(args.checkout, c["problem_file"])
    largest = max([v for v in sizes.values() if v] or [0])

    def planned(c):
        size = sizes.get(c["problem_file"])
        return 3 * size + 2**30 if size is not None else budget / 2

    out.write(meta_record(args, "kb-verdicts", candidates, {
        "workers": args.workers, "kb_timeout_s": args.kb_timeout, "concurrency": args.concurrency,
        "gpu_memory_budget_gib": budget / 2**30, "input_gib": {k: v and v / 2**30 for k, v in sizes.items()},
        "candidate_cap_s": args.candidate_cap, "resumed_from": args.resume or None,
        "carried": sorted(carried_files)}))
    for r in carried:
        out.write(dict(r, carried_from=args.resume))
    if not candidates:
        out.write({"type": "end", "finished": time.time(), "wall_s": 0.0, "stopped": "all candidates done",
                   "retried_alone": []})
        return 0
    build_dir_of, per_dir, t0, _ = batch_compile_phase(args, candidates, out)
    print("[verdicts] built {} candidates in {:.0f} s".format(len(candidates), time.time() - t0), flush=True)

    scratch, logs = Path(args.scratch), Path(args.logs)
    lock = scratch / "gpu-turns.lock"
    lock.touch()
    queue, alone, running, finished = list(candidates), [], [], 0

    def precompile_s(c):
        return sum(per_dir[build_dir_of(c)]) if build_dir_of(c) in per_dir else None

    def record(one, rc, retry_of=None):
        result, status, payload, eval_build_s = one.finish(rc)
        wait = payload.get("gpu_wait_s")
        extra = {"eval_build_s": eval_build_s, "gpu_wait_s": wait, "gpu_turns": payload.get("gpu_turns"),
                 "retry_error": payload.get("retry_error"),
                 "active_s": one.finished - one.started - (wait or 0.0), "concurrent": len(running) + 1,
                 "kernelbench_import": payload.get("kernelbench_import")}
        if retry_of:
            extra["retry_of"] = retry_of
        out.write(candidate_record(one.c, one.started, one.finished, result, status, precompile_s(one.c), extra))
        return result, status

    while queue or running:
        # Start what fits, in the workload's order; alone-runs only when nothing else runs.
        while queue and len(running) < args.concurrency:
            c = queue[0]
            need = sum(planned(r.c) for r in running) + planned(c) + largest
            if running and need > budget:
                break
            queue.pop(0)
            running.append(OneProcess(args, c, build_dir_of(c), scratch / "kb_verdict_results", logs, "eval",
                                      fresh_build=False, gpu_lock=lock))
        time.sleep(0.5)
        for one in list(running):
            rc = one.proc.poll()
            if rc is None and time.time() - one.started > args.candidate_cap:
                one.kill()
            elif rc is None:
                continue
            running.remove(one)
            result, status = record(one, rc)
            finished += 1
            if status == "done" and out_of_memory(result, logs / (Path(one.c["file"]).stem + ".log")):
                alone.append(one.c)
            print("[verdicts] {}/{} {} {} ({:.0f} s)".format(finished, len(candidates), one.c["file"], status,
                                                            one.finished - one.started), flush=True)
    for c in alone:  # out of memory beside others: again with the GPU to itself
        one = OneProcess(args, c, build_dir_of(c), scratch / "kb_verdict_results_alone", logs / "alone", "eval",
                         fresh_build=False, gpu_lock=lock)
        try:
            rc = one.proc.wait(timeout=args.candidate_cap)
        except subprocess.TimeoutExpired:
            one.kill()
            rc = None
        record(one, rc, retry_of="out of memory beside other evaluations")
        print("[verdicts] again alone: {}".format(c["file"]), flush=True)
    out.write({"type": "end", "finished": time.time(), "wall_s": time.time() - t0,
               "stopped": "all candidates done", "retried_alone": [c["file"] for c in alone]})
    return 0


def earlier_verdicts(path):
    """What an earlier, stopped kb-verdicts run (its JSON lines) finished: the build phase records
    and every record of each candidate whose evaluation finished, in their order. A candidate it
    did not finish (or whose last evaluation ran out of GPU memory, not yet retried alone) is built
    and evaluated again."""
    rows = []
    with open(path) as f:
        for line in f:
            try:
                rows.append(json.loads(line))
            except ValueError:  # a torn last line
                pass
    last = {r["file"]: r for r in rows if r.get("type") == "candidate" and r.get("status") == "done"}
    finished = {f for f, r in last.items() if r.get("retry_of") or "out of memory" not in json.dumps(r).lower()}
    return [r for r in rows if r.get("type") == "phase"
            or (r.get("type") == "candidate" and r.get("file") in finished)]


def gpu_arch_from_nvidia_smi():
    try:
        cap = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.split()[0]
    except (OSError, IndexError, subprocess.SubprocessError):
        return None
    return ARCH_BY_CAPABILITY.get(cap) or ARCH_BY_CAPABILITY.get(cap.split(".")[0])


def dirty(sh):
    changed = [l for l in sh(["git", "-C", str(HERE / ".." / ".."), "status", "--porcelain", "--untracked-files=no"]).splitlines() if l.strip()]
    return " + {} changed files".format(len(changed)) if changed else ""


def run_machine(args):
    def sh(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    cpu_model = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    boot_id = ""
    try:
        boot_id = open("/proc/sys/kernel/random/boot_id").read().strip()
    except OSError:
        pass
    gpus = [dict(zip(("name", "driver", "memory", "uuid", "compute_cap"), [v.strip() for v in line.split(",")]))
            for line in sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,uuid,compute_cap",
                            "--format=csv,noheader"]).splitlines() if line.strip()]
    info = {"host": socket.gethostname(), "boot_id": boot_id, "cpus": os.cpu_count(), "cpu_model": cpu_model,
            "gpus": gpus, "python": sys.version.split()[0], "time": time.time(),
            "torch": sh([sys.executable, "-c", "import torch; print(torch.__version__)"]),
            # With files changed since the commit (a copied working tree), it says how many.
            "kbrl_commit": sh(["git", "-C", str(HERE), "rev-parse", "HEAD"]) + dirty(sh),
            # An exported checkout (no .git of its own) would report the enclosing repository's.
            "kernelbench_commit": sh(["git", "-C", args.checkout, "rev-parse", "HEAD"])
            if args.checkout and (Path(args.checkout) / ".git").exists() else ""}
    Path(args.out).write_text(json.dumps(info, indent=1) + "\n")
    return 0


def cpu_times():
    """(busy, total) jiffies of all cores together, from /proc/stat (iowait counts as idle)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])  # guest time is already inside user time
    return total - idle, total


def sample_cpu(interval):
    busy0, total0 = cpu_times()
    while True:
        time.sleep(interval)
        busy1, total1 = cpu_times()
        if total1 > total0:
            print("{:.3f}, {:.1f}".format(time.time(), 100.0 * (busy1 - busy0) / (total1 - total0)), flush=True)
        busy0, total0 = busy1, total1


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--checkout", required=True, help="KernelBench checkout")
        p.add_argument("--workload", default=str(HERE / "workload"))
        p.add_argument("--seed", type=int, default=1, help="seed of the sampled order")
        p.add_argument("--budget", type=float, default=150, help="start no candidate after this many seconds")
        p.add_argument("--grace", type=float, default=60, help="seconds past the budget a candidate may finish in")
        p.add_argument("--gpu-arch", default=None, help="KernelBench gpu_arch name (default: from nvidia-smi)")
        p.add_argument("--scratch", required=True, help="build directories and results")
        p.add_argument("--out", required=True, help="JSON lines written here")
        p.add_argument("--logs", required=True, help="per-candidate logs")

    p = sub.add_parser("fresh")
    common(p)
    p.add_argument("--candidate-cap", type=float, default=300, help="seconds one candidate's process may take")
    p = sub.add_parser("precompile")
    common(p)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--precompile-count", type=int, default=0, help="candidates to build (default: --workers)")
    p.add_argument("--kb-timeout", type=float, default=KB_TIMEOUT_S,
                   help="KernelBench's timeout: per build in batch_compile (which deletes and retries a build "
                        "that takes longer) and per GPU evaluation (default 180, eval_from_generations' own)")
    p = sub.add_parser("one")
    p.add_argument("--checkout", required=True)
    p.add_argument("--problem-file", required=True)
    p.add_argument("--candidate", required=True)
    p.add_argument("--build-dir", required=True)
    p.add_argument("--result", required=True)
    p.add_argument("--gpu-arch", required=True)
    p.add_argument("--gpu-lock", default="", help="take turns on the GPU with other processes through this lock file")
    p = sub.add_parser("verdicts")
    common(p)
    p.add_argument("--workers", type=int, default=os.cpu_count(), help="batch_compile's CPU workers")
    p.add_argument("--kb-timeout", type=float, default=1200,
                   help="batch_compile's per-build timeout (default 1200: not compared on throughput, and "
                        "KernelBench's own 180 s deletes folders that slow builds are still using)")
    p.add_argument("--concurrency", type=int, default=max(1, min(12, (os.cpu_count() or 2) - 2)),
                   help="evaluation processes at most at once")
    p.add_argument("--gpu-memory-gib", type=float, default=0.0,
                   help="GPU memory the processes may plan on (default: 85%% of nvidia-smi's total)")
    p.add_argument("--candidate-cap", type=float, default=1800, help="seconds one candidate's process may take")
    p.add_argument("--resume", default="",
                   help="the JSON lines of an earlier, stopped run: its finished candidates are carried over "
                        "into --out and not evaluated again")
    p = sub.add_parser("order")
    p.add_argument("--workload", default=str(HERE / "workload"))
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("machine")
    p.add_argument("--checkout", default="")
    p.add_argument("--out", required=True)
    p = sub.add_parser("cpu-sampler", help="print 'time, percent of all cores busy' every --interval s until killed")
    p.add_argument("--interval", type=float, default=0.5)
    args = parser.parse_args()

    if args.command == "cpu-sampler":
        return sample_cpu(args.interval)

    if args.command == "order":
        for c in sample_order(load_workload(args.workload), args.seed):
            print(c["file"], c["kind"])
        return 0
    if args.command == "machine":
        return run_machine(args)
    if args.command == "one":
        os.environ["KBT_CHECKOUT"] = str(Path(args.checkout).resolve())
        return run_one(args)
    signal.signal(signal.SIGTERM, on_term)
    if not (Path(args.checkout) / "KernelBench" / "level1").is_dir():
        raise SystemExit("{}: no KernelBench/level1 folder: not a KernelBench checkout".format(args.checkout))
    args.gpu_arch = args.gpu_arch or gpu_arch_from_nvidia_smi()
    if not args.gpu_arch:
        raise SystemExit("cannot tell the GPU's architecture from nvidia-smi: pass --gpu-arch (e.g. Hopper)")
    return {"fresh": run_fresh, "precompile": run_precompile, "verdicts": run_verdicts}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
