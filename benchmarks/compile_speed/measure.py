#!/usr/bin/env python3
"""Compile time of a trivial candidate with each compile acceleration on and off.

Drives kbrl_worker.py's compile stage directly, as LocalEvaluator does (one long-lived worker,
one forked child per build, a fresh build directory per build, MAX_JOBS=2 like its compile
lanes unless --max-jobs says otherwise), for a trivial elementwise CUDA candidate and a trivial
CPU `cpp` candidate, under six settings: plain, pch, light (light_headers), both (pch and
light), all (both and parallel_passes: nvcc's host and device passes side by side), all-late (all
with the binding file compiled after nvcc's front ends, as a busy evaluator does). Each setting
starts from an empty cache directory, as a new work directory would: with pch, the first build
of a flag set is plain ("deferred") and the second builds the precompiled header ("built"), so
"steady" is the median of the builds after those, the state of an evaluator that has seen the
flag set before. --parallel N then starts N builds at once per setting (steady state), as N
compile lanes of a busy evaluator do.

usage: measure.py [--reps 4] [--languages cuda,cpp] [--settings plain,all,all-late,both,pch,light]
                  [--parallel N] [--max-jobs 2] [--arch 9.0] [--work DIR] [--out FILE] [--steps FILE]
                  [--failing] [CANDIDATE.py...]
Prints markdown tables, rewritten after every row to --out and to $OUT/compile_speed.md when
OUT is set, so a run cut short keeps what it measured.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "..", "..", "libkbrl", "worker", "kbrl_worker.py")

CUDA_CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAGuard.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void add_one_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] + 1.0f;
}

torch::Tensor add_one(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "add_one: float32 CUDA tensor expected");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  const int threads = 256;
  const int blocks = static_cast<int>((n + threads - 1) / threads);
  if (n > 0)
    add_one_kernel<<<blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

ext = load_inline(name="add_one", cpp_sources="torch::Tensor add_one(torch::Tensor x);",
                  cuda_sources=cuda_source, functions=["add_one"], extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.add_one(x)
'''

CPP_CANDIDATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

torch::Tensor add_one(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "add_one: float32 expected");
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  at::parallel_for(0, xc.numel(), 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) yp[i] = xp[i] + 1.0f;
  });
  return y;
}
"""

ext = load_inline(name="add_one", cpp_sources=source, functions=["add_one"], extra_cflags=["-O3"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.add_one(x)
'''

# A compile job's fast_build settings (every field: the worker has no defaults), less "dir".
SETTINGS = {
    "plain": {"pch": False, "light_headers": False, "parallel_passes": False, "binding_early": True},
    "pch": {"pch": True, "light_headers": False, "parallel_passes": False, "binding_early": True},
    "light": {"pch": False, "light_headers": True, "parallel_passes": False, "binding_early": True},
    "both": {"pch": True, "light_headers": True, "parallel_passes": False, "binding_early": True},
    "all": {"pch": True, "light_headers": True, "parallel_passes": True, "binding_early": True},
    # all, with the binding file compiled after nvcc's front ends, as a busy evaluator does
    "all-late": {"pch": True, "light_headers": True, "parallel_passes": True, "binding_early": False},
}
# No limits and the evaluator's own niceness: the build alone is measured.
NO_LIMITS = {"file_size_bytes": 0, "address_space_bytes": 0, "processes": 0, "nice": 0}


STEPS_SITECUSTOMIZE = '''
import os, subprocess, time
_path = os.environ.get("KBRL_COMPILE_STEPS")
if _path:
    _init, _wait = subprocess.Popen.__init__, subprocess.Popen.wait

    def _traced_init(self, args, *rest, **kwargs):
        self._kbrl_started = time.time()
        _init(self, args, *rest, **kwargs)
        argv = [str(a) for a in args] if isinstance(args, (list, tuple)) else [str(args)]
        self._kbrl_name = " ".join([os.path.basename(argv[0])] + argv[1:4])[:160]

    def _traced_wait(self, *rest, **kwargs):
        code = _wait(self, *rest, **kwargs)
        if not getattr(self, "_kbrl_logged", False):
            self._kbrl_logged = True
            with open(_path, "a") as f:
                f.write("%.3f %.3f %d %s\\n" % (self._kbrl_started, time.time(), os.getpid(), self._kbrl_name))
        return code

    subprocess.Popen.__init__, subprocess.Popen.wait = _traced_init, _traced_wait
'''




class Worker:
    def __init__(self, platform_name, env):
        self.proc = subprocess.Popen([sys.executable, "-u", WORKER, "--platform", platform_name],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the worker did not start: can {} import torch? (KBRL_PYTHON picks the interpreter)".format(
                sys.executable))
        ready = json.loads(line)
        if ready.get("event") != "ready":
            raise RuntimeError("worker did not start: {}".format(ready))
        self.torch = ready.get("torch")
        self.protocol = ready.get("protocol")  # the jobs speak the worker's version

    def children_cpu_s(self):
        """CPU seconds of the worker's finished children (its forked builds and their compilers):
        on a busy machine a steadier measure than wall time."""
        with open("/proc/{}/stat".format(self.proc.pid)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")

    def call(self, job):
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("worker died")
        return json.loads(line)

    def close(self):
        with_suppress(lambda: self.call_nowait({"protocol": self.protocol, "op": "shutdown"}))
        self.proc.wait(timeout=60)

    def call_nowait(self, job):
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()


def with_suppress(f):
    try:
        f()
    except Exception:
        pass


def detect_arch():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.split()
        if out:
            return out[0]
    except (OSError, subprocess.SubprocessError):
        pass
    return "9.0"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4, help="builds per setting, one after the other")
    parser.add_argument("--languages", default="cuda,cpp")
    parser.add_argument("--settings", default="plain,all,both,pch,light")
    parser.add_argument("--parallel", type=int, default=0, help="then N builds at once per setting (0: none)")
    parser.add_argument("--max-jobs", default="2", help="MAX_JOBS for ninja (default 2, as the evaluator's compile lanes)")
    parser.add_argument("--arch", default="", help="TORCH_CUDA_ARCH_LIST (default: the GPU's, else 9.0)")
    parser.add_argument("--work", default="", help="scratch directory (default: a new temporary one, removed after)")
    parser.add_argument("--cache", default="", help="one cache directory per setting for all candidates (default: "
                                                    "a fresh one per candidate and setting)")
    parser.add_argument("--out", default="")
    parser.add_argument("--failing", action="store_true", help="the candidates do not compile: time their failure")
    parser.add_argument("--steps", default="", help="append every compiler process of the builds to this file "
                        "(start, end, pid, command), one line each")
    parser.add_argument("candidates", nargs="*",
                        help="candidate programs to measure instead of the two trivial ones (a program with "
                             "cuda_sources is built as cuda, any other as cpp)")
    args = parser.parse_args()
    languages = [l for l in args.languages.split(",") if l]
    settings = [s for s in args.settings.split(",") if s]
    for s in settings:
        if s not in SETTINGS:
            parser.error("unknown setting {} (plain, pch, light, both, all, all-late)".format(s))
    work = args.work or tempfile.mkdtemp(prefix="kbrl-compile-speed-")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ)
    env["TORCH_CUDA_ARCH_LIST"] = args.arch or env.get("TORCH_CUDA_ARCH_LIST") or detect_arch()
    if args.max_jobs:
        env["MAX_JOBS"] = args.max_jobs
    if args.steps:
        # Every process the worker's build children start, with its start and end, through a
        # sitecustomize module that only the worker imports.
        site = os.path.join(work, "steps-site")
        os.makedirs(site, exist_ok=True)
        with open(os.path.join(site, "sitecustomize.py"), "w") as f:
            f.write(STEPS_SITECUSTOMIZE)
        env["PYTHONPATH"] = site + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["KBRL_COMPILE_STEPS"] = os.path.abspath(args.steps)
    if args.candidates:
        cases = []
        for path in args.candidates:
            with open(path) as f:
                text = f.read()
            cases.append((os.path.basename(path), "cuda" if "cuda_sources" in text else "cpp", text))
    else:
        cases = [("trivial " + l, l, CUDA_CANDIDATE if l == "cuda" else CPP_CANDIDATE) for l in languages]
    report = Report(env, args)
    workers = {}
    try:
        for n, (label, language, text) in enumerate(cases):
            if language not in workers:
                workers[language] = Worker("cuda" if language == "cuda" else "cpu", env)
            report.torch = workers[language].torch
            for setting in settings:
                cache = os.path.join(args.cache, setting) if args.cache else os.path.join(work, "case{}".format(n), setting, "cache")
                builds = []
                for rep in range(args.reps):
                    build_dir = os.path.join(work, "case{}".format(n), setting, "build{}".format(rep))
                    builds.append(compile_once(workers[language], text, language, setting, build_dir, cache,
                                               args.failing))
                    print("{} {} build {}: {}".format(label, setting, rep, builds[-1]), file=sys.stderr, flush=True)
                report.add_sequential(label, setting, builds)
                if args.parallel > 0:
                    builds = compile_parallel(args.parallel, env, text, language, setting,
                                              os.path.join(work, "case{}".format(n), setting, "parallel"), cache,
                                              args.failing)
                    print("{} {} {} at once: {}".format(label, setting, args.parallel, [str(b) for b in builds]),
                          file=sys.stderr, flush=True)
                    report.add_parallel(label, setting, builds)
        for worker in workers.values():
            worker.close()
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(report.render())


class Build:
    def __init__(self, reply, cpu_s):
        self.seconds = reply["compile_s"]
        self.cpu_s = cpu_s
        self.metadata = reply.get("metadata", {})

    def __str__(self):
        notes = ",".join("{}={}".format(k, v) for k, v in sorted(self.metadata.items()))
        return "{:.1f} s, {:.1f} cpu-s {}".format(self.seconds, self.cpu_s, notes).strip()


def compile_once(worker, text, language, setting, build_dir, cache, failing=False):
    """One build; failing (--failing): the candidate must not compile, and how long that takes
    is what is measured."""
    os.makedirs(build_dir)
    candidate = os.path.join(build_dir, "candidate.py")
    with open(candidate, "w") as f:
        f.write(text)
    job = {"protocol": worker.protocol, "op": "compile", "job_id": os.path.basename(build_dir),
           "candidate_path": candidate, "build_dir": build_dir, "language": language,
           "log_path": os.path.join(build_dir, "compile.log"), "timeout_s": 1800, "limits": NO_LIMITS,
           "fast_build": dict(SETTINGS[setting], dir=cache)}
    cpu0 = worker.children_cpu_s()
    reply = worker.call(job)
    cpu = worker.children_cpu_s() - cpu0
    if (reply.get("status") == "ok") == failing or "compile_s" not in reply:
        raise RuntimeError("{} {}: build {}: {}".format(language, setting, "did not fail" if failing else "failed",
                                                        reply.get("error_message")))
    return Build(reply, cpu)


def compile_parallel(n, env, text, language, setting, base, cache, failing=False):
    """n workers, one build each, started together (after the workers have imported torch)."""
    workers = [Worker("cuda" if language == "cuda" else "cpu", env) for _ in range(n)]
    builds = [None] * n
    errors = []
    barrier = threading.Barrier(n)

    def one(i):
        try:
            barrier.wait()
            builds[i] = compile_once(workers[i], text, language, setting, os.path.join(base, str(i)), cache, failing)
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for w in workers:
        w.close()
    if errors:
        raise errors[0]
    return builds


def steady(setting, builds, failing=False):
    """The builds that show the steady state: with pch, those that used a ready PCH (with
    parallel passes, the .cu's host-pass PCH too, where it applies); of failing builds
    (--failing), those after the first two (each tier's PCH is made by then)."""
    if failing:
        return builds[2:] or builds[-1:]
    if SETTINGS[setting]["pch"]:
        return [b for b in builds if b.metadata.get("pch") == "used"
                and b.metadata.get("cuda_pch", "used").split(",")[-1] in ("used", "unsupported")]
    return builds


class Report:
    def __init__(self, env, args):
        self.env = env
        self.args = args
        self.torch = None
        self.sequential = []
        self.parallel = []

    def add_sequential(self, case, setting, builds):
        self.sequential.append((case, setting, builds))
        self.write()

    def add_parallel(self, case, setting, builds):
        self.parallel.append((case, setting, builds))
        self.write()

    def write(self):
        text = self.render()
        targets = [self.args.out] if self.args.out else []
        if os.environ.get("OUT"):
            targets.append(os.path.join(os.environ["OUT"], "compile_speed.md"))
        for path in targets:
            with open(path, "w") as f:
                f.write(text)

    def render(self):
        lines = [
            "Compile stage of kbrl_worker.py (one build: import of the candidate, load_inline, ninja), "
            "wall seconds and CPU seconds of the build's processes.",
            "",
            "machine: {} cores ({}); torch {}; TORCH_CUDA_ARCH_LIST={}; MAX_JOBS={}".format(
                os.cpu_count(), platform.machine(), self.torch, self.env.get("TORCH_CUDA_ARCH_LIST"),
                self.env.get("MAX_JOBS", "ninja's default")),
            "",
            "One build at a time; steady = median of the builds after the cache was ready; x = plain's steady / this one's.",
            "",
            "| candidate | setting | steady s | x | steady cpu-s | x cpu | every build, s (what the accelerations did) |",
            "|---|---|---|---|---|---|---|",
        ]
        plain = {}
        for case, setting, builds in self.sequential:
            ready = steady(setting, builds, self.args.failing)
            wall = statistics.median(b.seconds for b in ready) if ready else float("nan")
            cpu = statistics.median(b.cpu_s for b in ready) if ready else float("nan")
            if setting == "plain":
                plain[case] = (wall, cpu)
            base = plain.get(case)
            lines.append("| {} | {} | {:.1f} | {} | {:.1f} | {} | {} |".format(
                case, setting, wall, "{:.2f}".format(base[0] / wall) if base and ready else "",
                cpu, "{:.2f}".format(base[1] / cpu) if base and ready else "",
                "; ".join("{:.1f}{}".format(b.seconds, " ({})".format(",".join(
                    "{}={}".format(k, v) for k, v in sorted(b.metadata.items()))) if b.metadata else "") for b in builds)))
        if self.parallel:
            lines += [
                "",
                "{} builds at once, each in its own worker (as {} compile lanes), after the sequential builds of the "
                "same setting (so a PCH is ready).".format(self.args.parallel, self.args.parallel),
                "",
                "| candidate | setting | median s | max s | median cpu-s | what the accelerations did |",
                "|---|---|---|---|---|---|",
            ]
            for case, setting, builds in self.parallel:
                lines.append("| {} | {} | {:.1f} | {:.1f} | {:.1f} | {} |".format(
                    case, setting, statistics.median(b.seconds for b in builds), max(b.seconds for b in builds),
                    statistics.median(b.cpu_s for b in builds),
                    ", ".join(sorted(set(",".join("{}={}".format(k, v) for k, v in sorted(b.metadata.items()))
                                         for b in builds)))))
        return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
