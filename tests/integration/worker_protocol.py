#!/usr/bin/env python3
"""The worker's side of the protocol against the golden jobs and replies in
tests/data/worker_protocol/ (tests/unit/eval_worker_protocol_test.cpp checks the C++ side against
the same files). The worker's job reader accepts the golden jobs and refuses each with any one
field removed, of another type or added, naming the field; and a real worker process, given the
golden jobs pointed at a small problem, greets and answers with exactly the golden replies' keys
and types: a compile, a correct run, a run whose child dies, and a job it refuses.

usage: worker_protocol.py [WORK_DIR]   (exit status 0 when every check passed)
"""
import copy
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
GOLDEN = os.path.join(ROOT, "tests", "data", "worker_protocol")
WORKER = os.path.join(ROOT, "libkbrl", "worker", "kbrl_worker.py")
sys.path.insert(0, os.path.dirname(WORKER))

import kbrl_worker  # noqa: E402

failures = []


def check(ok, what):
    print("{}: {}".format("ok  " if ok else "FAIL", what))
    if not ok:
        failures.append(what)


def golden(name):
    with open(os.path.join(GOLDEN, name)) as f:
        return json.load(f)


# Objects whose keys are free (any stage, any metadata entry); their values have one kind.
MAPS = {"stage_seconds": "number", "metadata": "str"}


def kind(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return {str: "str", list: "list", dict: "object"}[type(v)]


def same_kind(got, want):
    """A float in the golden file is a number: an integer that the worker happens to write there
    reads the same on the C++ side."""
    return kind(got) == kind(want) or (kind(want) == "float" and kind(got) == "int")


def shape_errors(got, want, where="reply"):
    """How `got` differs from the golden `want` in keys and kinds of values (not in values)."""
    errors = []
    if not isinstance(got, dict):
        return ["{} is {}, not an object".format(where, kind(got))]
    if set(got) != set(want):
        errors.append("{}: keys {} missing, {} not in the golden file".format(
            where, sorted(set(want) - set(got)), sorted(set(got) - set(want))))
    for key in set(got) & set(want):
        path = "{}.{}".format(where, key)
        g, w = got[key], want[key]
        if key in MAPS:
            if not isinstance(g, dict):
                errors.append("{} is {}, not an object".format(path, kind(g)))
                continue
            for k, v in g.items():
                if not (kind(v) in ("int", "float") if MAPS[key] == "number" else kind(v) == MAPS[key]):
                    errors.append("{}.{} is {}, not {}".format(path, k, kind(v), MAPS[key]))
        elif not same_kind(g, w):
            errors.append("{} is {}, the golden file's {}".format(path, kind(g), kind(w)))
        elif isinstance(w, dict):
            errors.extend(shape_errors(g, w, path))
        elif isinstance(w, list):
            # The protocol's lists are lists of names.
            errors.extend("{}[{}] is {}, not str".format(path, i, kind(x)) for i, x in enumerate(g) if kind(x) != "str")
    return errors


def field_paths(obj, prefix=()):
    """Every field of a job, nested ones as ("limits", "nice")."""
    for key, value in obj.items():
        yield prefix + (key,)
        if isinstance(value, dict):
            yield from field_paths(value, prefix + (key,))


def without(obj, path):
    out = copy.deepcopy(obj)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    del parent[path[-1]]
    return out


def replaced(obj, path, value):
    out = copy.deepcopy(obj)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return out


def other_kind(value):
    return 17 if isinstance(value, str) else "seventeen"


def refusal(job):
    try:
        kbrl_worker.read_job(job)
    except kbrl_worker.JobError as exc:
        return str(exc)
    return None


def check_job_reader():
    for name in ("compile_job.json", "run_job.json", "shutdown_job.json"):
        job = golden(name)
        check(refusal(job) is None, "{} is accepted".format(name))
        for path in field_paths(job):
            dotted = ".".join(path)
            why = refusal(without(job, path))
            check(why is not None and "'{}' is missing".format(dotted) in why,
                  "{} without {} is refused naming it ({})".format(name, dotted, why))
            if path[-1] == "op":
                continue  # another op is another job: its own fields are then missing
            why = refusal(replaced(job, path, other_kind(job_value(job, path))))
            check(why is not None and "'{}'".format(dotted) in why,
                  "{} with {} of another type is refused naming it ({})".format(name, dotted, why))
        why = refusal(dict(job, retries=1))
        check(why is not None and "'retries'" in why, "{} with an unknown field is refused ({})".format(name, why))
        why = refusal(dict(job, protocol=kbrl_worker.PROTOCOL_VERSION - 1))
        check(why is not None and "protocol" in why, "{} of another protocol version is refused ({})".format(name, why))
    check(refusal(golden("run_job.json") | {"seed": True}) is not None, "a boolean is not an integer")
    check(refusal(golden("run_job.json") | {"precision": "fp8"}) is not None, "a precision outside the protocol is refused")


def job_value(job, path):
    for key in path:
        job = job[key]
    return job


PROBLEM = """import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(16, 64)]

def get_init_inputs():
    return []
"""

CANDIDATE = """import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x.clamp_min(0.0)
"""

# Its child dies without reporting: the reply's fields the child would have given are null.
DYING_CANDIDATE = """import os
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(3)
"""


class Worker:
    def __init__(self, work):
        self.stderr = open(os.path.join(work, "worker.stderr.log"), "w")
        self.proc = subprocess.Popen([sys.executable, "-u", WORKER, "--platform", "cpu"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)

    def line(self):
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the worker exited; see {}".format(self.stderr.name))
        return json.loads(line)

    def call(self, job):
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        return self.line()


def check_real_worker(work):
    import torch

    problem = os.path.join(work, "problem.py")
    build = os.path.join(work, "builds", "b1")
    os.makedirs(build)
    with open(problem, "w") as f:
        f.write(PROBLEM)
    candidate = os.path.join(build, "candidate.py")
    with open(candidate, "w") as f:
        f.write(CANDIDATE)
    dying_build = os.path.join(work, "builds", "b2")
    os.makedirs(dying_build)
    with open(os.path.join(dying_build, "candidate.py"), "w") as f:
        f.write(DYING_CANDIDATE)

    worker = Worker(work)
    try:
        ready = worker.line()
        want = golden("ready.json")
        # The golden greeting is a CPU torch's; a CUDA or ROCm torch names its version.
        for key, version in (("cuda", torch.version.cuda), ("hip", getattr(torch.version, "hip", None))):
            if version is not None:
                want[key] = "a version"
        check(shape_errors(ready, want, "ready") == [],
              "the greeting has the golden greeting's keys and types {}".format(shape_errors(ready, want, "ready")))
        check(ready.get("protocol") == kbrl_worker.PROTOCOL_VERSION == want["protocol"],
              "the greeting, the worker and the golden files speak the same protocol version")

        job = golden("compile_job.json")
        job.update(candidate_path=candidate, build_dir=build, log_path=os.path.join(build, "compile.log"))
        job["fast_build"]["dir"] = os.path.join(work, "compile_cache")
        reply = worker.call(job)
        check(reply.get("status") == "ok" and reply.get("job_id") == job["job_id"],
              "the compile job is answered ok, with its id: {}".format(reply))
        errors = shape_errors(reply, golden("compile_reply.json"))
        check(errors == [], "the compile reply has the golden reply's keys and types {}".format(errors))

        job = golden("run_job.json")
        job.update(problem_path=problem, candidate_path=candidate, build_dir=build,
                   log_path=os.path.join(work, "run.log"), timing_trials=20)
        reply = worker.call(job)
        check(reply.get("status") == "ok" and reply.get("correct") is True and reply.get("job_id") == job["job_id"],
              "the run job is answered ok and correct: {}".format({k: reply.get(k) for k in (
                  "status", "error_category", "error_message", "job_id")}))
        errors = shape_errors(reply, golden("run_reply.json"))
        check(errors == [], "the run reply has the golden reply's keys and types {}".format(errors))

        dying = dict(job, candidate_path=os.path.join(dying_build, "candidate.py"), build_dir=dying_build,
                     log_path=os.path.join(work, "dying.log"))
        reply = worker.call(dying)
        check(reply.get("error_category") == "crash", "a child that dies is a crash: {}".format(reply))
        errors = shape_errors(reply, golden("run_reply_crash.json"))
        check(errors == [], "the crash reply has the golden crash reply's keys and types {}".format(errors))

        reply = worker.call(without(job, ("seed",)))
        check(reply.get("error_category") == "internal" and "'seed' is missing" in reply.get("error_message", ""),
              "a run job without its seed is refused naming it: {}".format(reply.get("error_message")))
        check(reply.get("job_id") == job["job_id"], "the refusal answers that job")
        errors = shape_errors(reply, golden("run_reply_crash.json"))
        check(errors == [], "the refusal has the run reply's keys and types {}".format(errors))

        reply = worker.call(dict(job, protocol=kbrl_worker.PROTOCOL_VERSION + 1))
        check(reply.get("error_category") == "internal" and "protocol" in reply.get("error_message", ""),
              "a job of another protocol version is refused: {}".format(reply.get("error_message")))

        worker.proc.stdin.write(json.dumps(golden("shutdown_job.json")) + "\n")
        worker.proc.stdin.flush()
        check(worker.proc.wait(timeout=60) == 0, "the golden shutdown job ends the worker")
    finally:
        if worker.proc.poll() is None:
            worker.proc.kill()
            worker.proc.wait()
        worker.stderr.close()


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="kbrl-worker-protocol-")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check_job_reader()
    check_real_worker(work)
    print("{} failure(s)".format(len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
