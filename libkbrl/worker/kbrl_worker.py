#!/usr/bin/env python3
"""kbrl evaluation worker.

A long-lived process that imports torch once and never touches a GPU itself. For every job it
forks one child, so each candidate runs in a fresh process whose crash, hang, leak or poisoned
device context dies with it. The C++ side (kbrl::eval::LocalEvaluator) owns scheduling and
bookkeeping and has its own deadline on every job; this worker enforces the per-stage timeout
on the child and classifies how the child ended.

Protocol: one JSON object per line. The worker writes {"event": "ready", ...} on start, then
reads a job per line from stdin ("compile", "run" or "shutdown") and answers each compile or run
job with exactly one reply line on its protocol channel. Every field is listed in
docs/evaluator.md ("Worker protocol") and below (JOB_FIELDS, reply_for); the golden jobs and
replies in tests/data/worker_protocol/ are checked against this file by
tests/integration/worker_protocol.py and against the C++ side (kbrl/eval/worker_protocol.hpp)
by its unit test. The worker has no defaults of its own: a job missing a field is answered with
an internal failure that names it. Everything the candidate prints goes to the job's log_path,
never to the protocol channel.
"""

import argparse
import contextlib
import ctypes
import json
import math
import os
import re
import select
import signal
import struct
import sys
import tempfile
import time
import traceback

try:  # next to this script; a worker copied without it builds plainly (and says so)
    import kbrl_fast_build
except ImportError:
    kbrl_fast_build = None

# The wire version (kWorkerProtocolVersion on the C++ side): in the greeting, every job and every
# reply; a job of another version is refused.
PROTOCOL_VERSION = 5
# How CUDA runs are timed (Runner.time_model); the evaluator keys cached reference timings by it.
TIMING_METHOD = "cuda events on the current stream, device-wide guard, new inputs every call"
# A run is charged for work outside the current stream only beyond this much (ms) more than an
# empty synchronize: the host's wake-up after a synchronize varies by a few microseconds.
GUARD_SLACK_MS = 0.010
MAX_MESSAGE = 1 << 20


# --------------------------------------------------------------------------------------------
# Messages and error cleaning


def clean_message(text, limit=1500):
    """Short, path-free text fit for logs and for feedback to the policy."""
    if not text:
        return ""
    lines = []
    for line in str(text).splitlines():
        line = line.rstrip()
        if not line:
            continue
        for marker in ("/kbrl_build/", "/torch_extensions/", "/builds/"):
            pos = line.find(marker)
            while pos >= 0:
                start = line.rfind(" ", 0, pos) + 1
                end = line.find("/", pos + len(marker))
                end = line.find("/", end + 1) if end >= 0 else -1
                line = line[:start] + "<build>/" + (line[end + 1:] if end >= 0 else "")
                pos = line.find(marker)
        lines.append(line)
    text = "\n".join(lines)
    if len(text) > limit:
        text = text[: limit // 2] + "\n...\n" + text[-limit // 2:]
    return text


def compiler_errors(log_text):
    """The lines of a build log that say what went wrong, first errors first."""
    picked = []
    for line in log_text.splitlines():
        low = line.lower()
        if "error" in low and "warning" not in low and "ninja: build stopped" not in low:
            if line.startswith("Error building extension"):
                line = line.split(": [", 1)[0]  # what follows is ninja's echo of the compile command
            picked.append(line.strip())
        if len(picked) >= 12:
            break
    if all(line.startswith("Error building extension") for line in picked):
        # No diagnostic from a compiler (it could not start, create a file, or was killed): the
        # last lines the build printed, less the echoed commands, say why.
        said = [line.strip() for line in log_text.splitlines()
                if line.strip() and not line.startswith(("[", "FAILED:", "ninja: build stopped"))
                and " -o " not in line and "Error building extension" not in line
                and not re.match(r"[WI]\d{4} ", line)]  # torch's own log lines
        picked += said[-8:]
    return "\n".join(picked) if picked else log_text[-1500:]


def exception_message(exc):
    name = type(exc).__name__
    msg = str(exc).strip()
    if "Error building extension" in msg or name in ("CalledProcessError",):
        return name, msg
    last = msg.splitlines()[-1] if msg else ""
    return name, "{}: {}".format(name, last) if last else name


def is_oom(exc):
    name = type(exc).__name__
    text = str(exc)
    return (
        isinstance(exc, MemoryError)
        or name == "OutOfMemoryError"
        or "out of memory" in text.lower()
        or "can't allocate memory" in text
        or "DefaultCPUAllocator: not enough memory" in text
    )


def failure(category, message, **extra):
    out = dict(extra)
    out.update(status="failed", error_category=category, error_message=clean_message(message))
    return out


# --------------------------------------------------------------------------------------------
# The protocol: jobs read strictly, replies complete


class Integer:
    """A JSON integer (bool, a subclass of int in Python, is not one)."""

    @staticmethod
    def accepts(v):
        return isinstance(v, int) and not isinstance(v, bool)

    name = "an integer"


class Number:
    @staticmethod
    def accepts(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

    name = "a finite number"


class Bool:
    @staticmethod
    def accepts(v):
        return isinstance(v, bool)

    name = "true or false"


class Str:
    @staticmethod
    def accepts(v):
        return isinstance(v, str)

    name = "a string"


# Field -> kind: a kind above, a tuple of the strings allowed, or a dict for a nested object.
LIMITS_FIELDS = {"file_size_bytes": Integer, "address_space_bytes": Integer, "processes": Integer,
                 "open_files": Integer, "cpu_seconds": Integer, "nice": Integer}
FAST_BUILD_FIELDS = {"pch": Bool, "light_headers": Bool, "parallel_passes": Bool, "binding_early": Bool, "dir": Str}
JOB_FIELDS = {
    "compile": {
        "protocol": Integer, "op": Str, "job_id": Str, "candidate_path": Str, "build_dir": Str, "log_path": Str,
        "language": ("cuda", "triton", "hip", "cpp"), "timeout_s": Number, "limits": LIMITS_FIELDS,
        "fast_build": FAST_BUILD_FIELDS,
    },
    "run": {
        "protocol": Integer, "op": Str, "job_id": Str, "problem_path": Str, "candidate_path": Str, "build_dir": Str,
        "log_path": Str, "device": Str, "precision": ("fp32", "fp16", "bf16"), "seed": Integer,
        "correctness_trials": Integer, "timing_trials": Integer, "warmup_runs": Integer,
        "measure_performance": Bool, "time_reference": Bool, "input_families": Bool, "kernelbench_inputs": Bool,
        "atol": Number, "rtol": Number, "timeout_s": Number, "limits": LIMITS_FIELDS,
    },
    "shutdown": {"protocol": Integer, "op": Str},
}


class JobError(ValueError):
    """A job that does not follow the protocol; the message names the field."""


def check_fields(obj, fields, where):
    """Raises JobError for the first field of `obj` (the job, or its object at `where`) that is
    missing, of another kind than `fields` says, or not in `fields`."""
    for name, kind in fields.items():
        path = "{}.{}".format(where, name) if where else name
        if name not in obj:
            raise JobError("job field '{}' is missing".format(path))
        value = obj[name]
        if isinstance(kind, dict):
            if not isinstance(value, dict):
                raise JobError("job field '{}' must be an object, got {}".format(path, json.dumps(value)[:80]))
            check_fields(value, kind, path)
        elif isinstance(kind, tuple):
            if value not in kind:
                raise JobError("job field '{}' must be one of {}, got {}".format(
                    path, ", ".join(kind), json.dumps(value)))
        elif not kind.accepts(value):
            raise JobError("job field '{}' must be {}, got {}".format(path, kind.name, json.dumps(value)[:80]))
    for name in obj:
        if name not in fields:
            raise JobError("job field '{}' is not part of the protocol".format("{}.{}".format(where, name) if where else name))


def read_job(job):
    """The job, checked: its op's every field present with its type (JOB_FIELDS), nothing else,
    and this worker's protocol version. Raises JobError naming the first field that is not."""
    if not isinstance(job, dict):
        raise JobError("a job must be a JSON object")
    if "op" not in job:
        raise JobError("job field 'op' is missing")
    op = job["op"]
    if not isinstance(op, str) or op not in JOB_FIELDS:
        raise JobError("job field 'op' must be one of {}, got {}".format(", ".join(JOB_FIELDS), json.dumps(op)))
    if "protocol" in job and Integer.accepts(job["protocol"]) and job["protocol"] != PROTOCOL_VERSION:
        raise JobError("the job speaks protocol {}, this worker {} (a worker script from another kbrl version?)".format(
            job["protocol"], PROTOCOL_VERSION))
    check_fields(job, JOB_FIELDS[op], "")
    return job


def reply_for(op, job_id, result, elapsed):
    """The reply line to a compile or run job: every field of its op's reply (docs/evaluator.md),
    those the child did not report (it crashed, timed out or never ran) at their empty values:
    null where there is no value yet. A result with a field outside the protocol is a bug here,
    and raises."""
    reply = {"protocol": PROTOCOL_VERSION, "op": op, "job_id": job_id, "status": "failed",
             "error_category": "internal", "error_message": "", "wall_s": elapsed, "metadata": {}}
    if op == "compile":
        reply["compile_s"] = elapsed
    elif op == "run":
        reply.update(compiled=None, correct=False, correct_on_problem_inputs=False, input_families=None,
                     trials_passed=0, trials_total=0, max_abs_error=None, max_rel_error=None, device=None,
                     runtime=None, ref_runtime=None, stage_seconds={})
    unknown = sorted(set(result) - set(reply))
    if unknown:
        raise ValueError("reply fields outside the protocol: {}".format(", ".join(unknown)))
    reply.update(result)
    if reply["status"] == "ok":
        reply["error_category"] = "none"
        reply["error_message"] = ""
    return reply


# --------------------------------------------------------------------------------------------
# The child: runs one stage with the candidate loaded


class RewardHack(Exception):
    """A runtime defense found tampering."""


class TimedCallMismatch(Exception):
    """A checked timed call whose outputs differ from the reference's on its inputs."""

    def __init__(self, call, reason):
        super().__init__("timed call {}: {}".format(call + 1, reason))
        self.call = call
        self.reason = reason


def load_module(path, name):
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Harness:
    """Functions captured before any candidate code runs, so that patching the torch, time or
    builtins namespaces cannot change how outputs are compared or kernels are timed, and a
    snapshot of those namespaces that is checked after the candidate has been loaded and after
    every call: replacing any of their functions is tampering."""

    def __init__(self, torch):
        import builtins
        import math as math_module
        import random
        import time as time_module

        self.torch = torch
        self.perf_counter = time_module.perf_counter
        self.isfinite = torch.isfinite
        self.abs = torch.abs
        self.sub = torch.sub
        self.amax = torch.amax
        self.amin = torch.amin
        self.aminmax = torch.aminmax
        self.dot = torch.dot
        self.stack = torch.stack
        self.all = torch.all
        self.isnan = torch.isnan
        self.nan_to_num = torch.nan_to_num
        self.norm = torch.linalg.vector_norm
        self.clone = torch.Tensor.clone
        self.copy = torch.Tensor.copy_
        self.equal = torch.equal
        self.is_tensor = torch.is_tensor
        self.cuda_synchronize = torch.cuda.synchronize
        self.cuda_event = torch.cuda.Event
        self.random_seed = random.seed
        self.namespaces = {
            "torch": torch, "torch.nn.functional": torch.nn.functional, "torch.Tensor": torch.Tensor,
            "torch.cuda": torch.cuda, "torch.cuda.Event": torch.cuda.Event, "torch.testing": torch.testing,
            "torch.linalg": torch.linalg, "torch.nn.Module": torch.nn.Module, "time": time_module,
            "builtins": builtins, "math": math_module, "random": random,
        }
        try:
            import numpy

            self.namespaces["numpy"] = numpy
            self.numpy_seed = numpy.random.seed
        except ImportError:
            self.numpy_seed = None
        self.snapshot = {label: self.callables(ns) for label, ns in self.namespaces.items()}

    @staticmethod
    def callables(namespace):
        items = vars(namespace).items() if isinstance(namespace, type) else namespace.__dict__.items()
        return {name: value for name, value in items if callable(value)}

    def check_untouched(self):
        for label, namespace in self.namespaces.items():
            current = namespace.__dict__
            for name, original in self.snapshot[label].items():
                if current.get(name, original) is not original:
                    raise RewardHack("candidate replaced {}.{}".format(label, name))


def apply_limits(limits):
    import resource

    def set_limit(kind, value, grace=0):
        # grace: the hard limit's distance from the soft one, for limits whose soft end sends a
        # signal that says what happened (SIGXCPU) before the hard end's SIGKILL.
        if value <= 0:  # 0: no limit
            return
        try:
            soft, hard = resource.getrlimit(kind)
            if hard != resource.RLIM_INFINITY:
                value = min(value, hard)
            resource.setrlimit(kind, (value, value + grace if hard == resource.RLIM_INFINITY else hard))
        except (ValueError, OSError):
            pass

    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    # Python ignores SIGXFSZ (a write past the limit raises an OSError the candidate could catch
    # and write on); the child and the compilers it starts die of it, and the result says so.
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    if limits["nice"]:
        try:
            os.nice(limits["nice"])  # the compilers it starts inherit it
        except (OSError, ValueError):
            pass
    set_limit(resource.RLIMIT_FSIZE, limits["file_size_bytes"])
    set_limit(resource.RLIMIT_AS, limits["address_space_bytes"])
    set_limit(resource.RLIMIT_NPROC, limits["processes"])
    set_limit(resource.RLIMIT_NOFILE, limits["open_files"])
    set_limit(resource.RLIMIT_CPU, limits["cpu_seconds"], grace=5)


def die_with_parent():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        PR_SET_PDEATHSIG = 1
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:
        pass


def install_fast_build(job, torch):
    """The compile accelerations the job asks for (kbrl_fast_build.py), in place before the
    candidate is imported; returns a function giving the result's metadata."""
    settings = job["fast_build"]
    if not (settings["pch"] or settings["light_headers"]):
        return dict
    if kbrl_fast_build is None:
        return lambda: {"fast_build": "unavailable: kbrl_fast_build.py is not next to the worker"}
    try:
        fast = kbrl_fast_build.FastBuild(torch, settings, job["build_dir"])
        fast.install()
    except Exception as exc:  # never a reason to fail the candidate: it builds plainly
        message = "unavailable: {}: {}".format(type(exc).__name__, exc)
        return lambda: {"fast_build": message}
    return fast.metadata


def child_compile(job, torch):
    start = time.monotonic()
    fast_build = install_fast_build(job, torch)

    def done(result):
        metadata = fast_build()
        if metadata:
            result["metadata"] = metadata
        result["compile_s"] = time.monotonic() - start
        return result

    try:
        load_module(job["candidate_path"], "kbrl_candidate")
    except BaseException as exc:  # the candidate's build or import failed
        name, msg = exception_message(exc)
        if "Error building extension" in str(exc) or name == "CalledProcessError":
            detail = compiler_errors(read_tail(job["log_path"], 200000) + "\n" + str(exc))
            return done(failure("compile", detail))
        if is_oom(exc):
            return done(failure("out_of_memory", msg))
        return done(failure("compile", msg + "\n" + last_frames(exc)))
    module = sys.modules["kbrl_candidate"]
    if not isinstance(getattr(module, "ModelNew", None), type):
        return done(failure("format", "the program defines no class ModelNew"))
    return done({"status": "ok"})


def held_tensors(torch, device_type="cuda", limit=6):
    """What live tensors hold on devices of `device_type`, largest first, in one line: put in an
    out-of-memory message, it tells a problem too big for the device from memory the harness
    kept. Storages shared by views count once."""
    import gc

    seen = set()
    groups = {}
    tensor = torch.Tensor
    for obj in gc.get_objects():
        try:  # by type: isinstance reads __class__, which some objects warn about
            if not issubclass(type(obj), tensor) or obj.device.type != device_type:
                continue
            storage = obj.untyped_storage()
            if storage.data_ptr() in seen:
                continue
            seen.add(storage.data_ptr())
            key = "{} {}".format(tuple(obj.shape), str(obj.dtype).replace("torch.", ""))
            n, size = groups.get(key, (0, 0))
            groups[key] = (n + 1, size + storage.nbytes())
        except Exception:  # a tensor subclass or a freed storage: not counted
            continue
    total = sum(size for _, size in groups.values())
    top = sorted(groups.items(), key=lambda kv: -kv[1][1])[:limit]
    return "live {} tensors: {} storages, {:.2f} GiB ({})".format(
        device_type, len(seen), total / 2**30,
        "; ".join("{} x {}: {:.2f} GiB".format(n, key, size / 2**30) for key, (n, size) in top) or "none")


def last_frames(exc, limit=3):
    frames = traceback.extract_tb(exc.__traceback__)[-limit:]
    return "".join(traceback.format_list(frames))


def read_tail(path, limit):
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - limit))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def flatten_outputs(out, torch):
    if torch.is_tensor(out):
        return [out]
    if isinstance(out, (tuple, list)):
        flat = []
        for item in out:
            flat.extend(flatten_outputs(item, torch))
        return flat
    raise TypeError("forward returned {}, expected a tensor or a tuple of tensors".format(type(out).__name__))


# Relative L2 error allowed on top of the elementwise tolerance: it is what stops an all-zero or
# constant output from passing when the reference's values are small next to atol.
NORM_TOLERANCE = {"fp32": 1e-3, "fp16": 2e-2, "bf16": 3e-2}


COMPARE_CHUNK = 1 << 24  # elements compared at a time, in float64, on the output's device


# How many times the reference's own sensitivity (see perturb_inputs) an input-family output may
# deviate: transformed inputs can make a problem ill-conditioned (softmax over huge logits), and
# honest kernels that only round differently must still pass.
SENSITIVITY_FACTOR = 4.0
PERTURBATION = 1e-5


def perturb_inputs(torch, values, seed):
    """The inputs with every float multiplied by (1 + u * PERTURBATION), u uniform in [-1, 1]:
    about the rounding differences an honest kernel introduces by computing in another order.
    The peak is about twice an input's size (the factor, then the product in place)."""
    out = []
    for v in values:
        if not torch.is_tensor(v) or not v.is_floating_point() or v.numel() == 0:
            out.append(v)
            continue
        generator = torch.Generator(device=v.device).manual_seed(seed + len(out))
        factor = torch.empty(v.shape, dtype=torch.float32, device=v.device)
        factor.uniform_(-1.0, 1.0, generator=generator).mul_(PERTURBATION).add_(1.0)
        p = v.to(torch.float32, copy=True).mul_(factor)
        del factor
        out.append(p.to(v.dtype))
    return out


def change_stats(h, a, b):
    """(largest |a - b|, L2 norm of a - b), in float64 chunk by chunk: no full-size float64 copy."""
    torch = h.torch
    a = a.detach().reshape(-1)
    b = b.detach().reshape(-1)
    largest = 0.0
    squares = 0.0
    for start in range(0, a.numel(), COMPARE_CHUNK):
        d = h.abs(h.sub(a[start:start + COMPARE_CHUNK].double(), b[start:start + COMPARE_CHUNK].double()))
        largest = max(largest, float(h.amax(d).item()))
        squares += float((d * d).sum().item())
    return largest, math.sqrt(squares)


def kind_mismatch(h, out, shape, dtype):
    """Why `out` is not a plain tensor of this shape and dtype, or None."""
    torch = h.torch
    if not h.is_tensor(out) or type(out) is not torch.Tensor and not isinstance(out, torch.nn.Parameter):
        return "output is {}, not a plain torch.Tensor".format(type(out).__name__)
    if tuple(out.shape) != shape:
        return "output shape {} != expected {}".format(tuple(out.shape), shape)
    if out.dtype != dtype:
        return "output dtype {} != expected {}".format(out.dtype, dtype)
    return None


# An input family's reference output larger than this (elements) is kept, and checked, at
# FAMILY_SAMPLE random positions instead of whole: nine full-size multi-gigabyte outputs do not
# fit next to the candidate on one GPU, and a kernel that is wrong for a kind of input is wrong
# at far more positions than a sample of 16M can miss. The problem's own trials compare in full.
FAMILY_FULL_LIMIT = 1 << 28
FAMILY_SAMPLE = 1 << 24


def sample_positions(torch, t, seed):
    if t.numel() <= FAMILY_FULL_LIMIT:
        return None
    generator = torch.Generator(device=t.device).manual_seed(seed)
    return torch.randint(0, t.numel(), (FAMILY_SAMPLE,), generator=generator, device=t.device)


def at_positions(t, positions):
    return t if positions is None else t.detach().reshape(-1)[positions]


def compare(h, out, ref, precision, atol, rtol, noise=None):
    """(None, max_abs, max_rel) when `out` matches `ref`, else (reason, max_abs, max_rel).
    Works through the tensors in chunks on the output's device, so multi-gigabyte outputs
    need neither a host copy nor a float64 copy of the whole tensor. `noise`, when given, is
    the reference's sensitivity as (largest change, L2 norm of the change); SENSITIVITY_FACTOR
    times it is allowed on top of atol and rtol. A whole-tensor bound, not an elementwise one:
    which elements an honest kernel's rounding moves is not where a perturbation moved them."""
    reason = kind_mismatch(h, out, tuple(ref.shape), ref.dtype)
    if reason is not None:
        return reason, None, None
    o_flat = out.detach().reshape(-1)
    r_flat = ref.detach().reshape(-1)
    if not (r_flat.is_floating_point() or r_flat.is_complex()):
        for start in range(0, o_flat.numel(), COMPARE_CHUNK):
            if not h.equal(o_flat[start:start + COMPARE_CHUNK], r_flat[start:start + COMPARE_CHUNK].to(o_flat.device)):
                return "integer/boolean output differs from the reference", None, None
        return None, 0.0, 0.0
    if o_flat.device == r_flat.device and h.equal(o_flat, r_flat):
        return None, 0.0, 0.0  # the same values (NaN never compares equal, so none are there)
    noise_max, noise_norm = noise if noise is not None else (0.0, 0.0)
    slack = atol + SENSITIVITY_FACTOR * noise_max
    found = None if r_flat.is_complex() else finite_stats(h, o_flat, r_flat, slack, rtol)
    if found is None:  # non-finite values somewhere: compared position by position
        found = careful_stats(h, o_flat, r_flat, slack, rtol)
        if isinstance(found, str):
            return found, None, None
    within, max_abs, max_rel, err_sq, ref_sq, o_lo, o_hi, r_lo, r_hi, finite_count = found
    if finite_count == 0:
        return None, 0.0, 0.0
    if not within:
        return "values differ: max abs error {:.3g}, max rel error {:.3g} (atol {:g}, rtol {:g})".format(
            max_abs, max_rel, atol, rtol), max_abs, max_rel
    if ref_sq > 0:
        rel_norm = math.sqrt(err_sq / ref_sq)
        limit = max(NORM_TOLERANCE.get(precision, 1e-3), SENSITIVITY_FACTOR * noise_norm / math.sqrt(ref_sq))
        if rel_norm > limit:
            return ("output is off by {:.3g} in relative L2 norm (values small next to atol: a constant "
                    "or zero output does not pass)").format(rel_norm), max_abs, max_rel
    if finite_count > 1 and r_hi != r_lo and o_hi == o_lo:
        return "output is constant while the reference varies", max_abs, max_rel
    return None, max_abs, max_rel


def finite_stats(h, o_flat, r_flat, slack, rtol):
    """compare's statistics, (within, max_abs, max_rel, err_sq, ref_sq, o_lo, o_hi, r_lo, r_hi,
    count), for outputs and references that are finite everywhere, else None. Each chunk's
    statistics stay on the device until one read at the end: no synchronization per chunk."""
    device = o_flat.device
    rows = []
    for start in range(0, o_flat.numel(), COMPARE_CHUNK):
        o = o_flat[start:start + COMPARE_CHUNK]
        r = r_flat[start:start + COMPARE_CHUNK].to(device)
        o_lo, o_hi = h.aminmax(o)
        r_lo, r_hi = h.aminmax(r)
        # Float64 copies (double() of a float64 tensor is the tensor itself), then in place.
        err = o.to(h.torch.float64, copy=True).sub_(r.double()).abs_()  # |o - r|
        mag = r.to(h.torch.float64, copy=True).abs_()
        allowed = mag.mul(rtol).add_(slack)
        within = h.all(err <= allowed)
        del allowed
        largest, err_sq, ref_sq = h.amax(err), h.dot(err, err), h.dot(mag, mag)
        largest_rel = h.amax(err.div_(mag.clamp_min_(1e-12)))  # err and mag are not needed after this
        row = [largest, largest_rel, err_sq, ref_sq, within, o_lo, o_hi, r_lo, r_hi]
        rows.append(h.stack([v.double() for v in row]))
        del err, mag
    if not rows:
        return True, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0
    table = h.stack(rows)
    # NaN and infinity propagate into the largest error and the sums: a single read tells.
    summary = h.stack([h.amax(table[:, 0]), h.amax(table[:, 1]), table[:, 2].sum(), table[:, 3].sum(),
                       h.amin(table[:, 4]), h.amin(table[:, 5]), h.amax(table[:, 6]), h.amin(table[:, 7]),
                       h.amax(table[:, 8])]).tolist()
    if not all(math.isfinite(v) for v in summary):
        return None
    max_abs, max_rel, err_sq, ref_sq, within, o_lo, o_hi, r_lo, r_hi = summary
    return within == 1.0, max_abs, max_rel, err_sq, ref_sq, o_lo, o_hi, r_lo, r_hi, o_flat.numel()


def careful_stats(h, o_flat, r_flat, slack, rtol):
    """finite_stats for outputs with NaN or infinity: those must sit where the reference has the
    same ones (a reason string if not), and only finite positions count."""
    device = o_flat.device
    within = True
    max_abs = max_rel = err_sq = ref_sq = 0.0
    o_lo = r_lo = math.inf
    o_hi = r_hi = -math.inf
    finite_count = 0
    for start in range(0, o_flat.numel(), COMPARE_CHUNK):
        o = o_flat[start:start + COMPARE_CHUNK].double()
        r = r_flat[start:start + COMPARE_CHUNK].to(device).double()
        o_fin = h.isfinite(o)
        r_fin = h.isfinite(r)
        if not h.equal(o_fin, r_fin):
            return "output has NaN/Inf where the reference has finite values (or the reverse)"
        if not bool(h.all(r_fin)):
            same_special = (o == r) | (h.isnan(o) & h.isnan(r))
            if not bool(h.all(same_special | r_fin)):
                return "non-finite values differ from the reference"
            o = o[r_fin]
            r = r[r_fin]
        if o.numel() == 0:
            continue
        finite_count += o.numel()
        err = h.abs(h.sub(o, r))
        max_abs = max(max_abs, float(h.amax(err).item()))
        max_rel = max(max_rel, float(h.amax(err / h.abs(r).clamp_min(1e-12)).item()))
        within = within and bool(h.all(err <= slack + rtol * h.abs(r)))
        err_sq += float((err * err).sum().item())
        ref_sq += float((r * r).sum().item())
        o_lo = min(o_lo, float(h.amin(o).item()))
        o_hi = max(o_hi, float(h.amax(o).item()))
        r_lo = min(r_lo, float(h.amin(r).item()))
        r_hi = max(r_hi, float(h.amax(r).item()))
    return within, max_abs, max_rel, err_sq, ref_sq, o_lo, o_hi, r_lo, r_hi, finite_count


class Runner:
    def __init__(self, torch, h, device, precision, kernelbench_inputs):
        self.torch = torch
        self.h = h
        self.device = torch.device(device)
        self.is_cuda = self.device.type == "cuda"
        self.precision = precision
        self.kernelbench_inputs = kernelbench_inputs
        self.dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[self.precision]
        self.timing_checks_s = 0.0  # time_model's input making and checks, outside its clock

    def seed_all(self, seed):
        """Seeds every generator a problem's get_inputs may draw from, so the same seed gives the
        same inputs again (inputs are regenerated instead of kept for every trial)."""
        self.torch.manual_seed(seed)
        self.h.random_seed(seed)
        if self.h.numpy_seed is not None:
            self.h.numpy_seed(seed % (2 ** 32))

    def to_device(self, values):
        torch = self.torch
        out = []
        for v in values:
            if torch.is_tensor(v):
                v = v.to(self.device)
                if v.is_floating_point() and v.dtype != self.dtype:
                    v = v.to(self.dtype)
            out.append(v)
        return out

    def clone(self, values):
        return [self.h.clone(v) if self.torch.is_tensor(v) else v for v in values]

    def sync(self):
        if self.is_cuda:
            self.h.cuda_synchronize()

    def on_device(self):
        """Where factory functions allocate while the problem's code runs: the evaluation device
        (fast: no host-side generation and copy), or the host in KernelBench-identical mode."""
        if self.kernelbench_inputs or not self.is_cuda:
            return contextlib.nullcontext()
        return self.device

    def make_inputs(self, module, seed, on_device=False):
        """The problem's inputs from `seed`; `on_device` makes them on the evaluation device even
        in KernelBench-identical mode (the timed calls' inputs: one set per call, so host-made
        ones would take minutes for large problems, and a timing does not depend on which
        generator drew the values)."""
        self.seed_all(seed)
        with (self.device if on_device and self.is_cuda else self.on_device()):
            values = list(module.get_inputs())
        return self.to_device(values)

    def build_model(self, cls, init_inputs, seed):
        self.seed_all(seed)
        with self.on_device():
            model = cls(*init_inputs)
        if hasattr(model, "to"):
            model = model.to(self.device)
            if self.precision != "fp32":
                model = model.to(self.dtype)
        return model

    def release(self):
        """Returns cached device memory between phases: big problems need it back."""
        if self.is_cuda:
            self.torch.cuda.empty_cache()

    def free_bytes(self):
        self.release()  # what the caching allocator holds but does not use counts as free
        return self.torch.cuda.mem_get_info(self.device)[0]

    def to_host(self, tensors):
        """Host copies in pinned memory: the copy there and back again runs at full bus speed."""
        torch = self.torch
        out = []
        for t in tensors:
            if torch.is_tensor(t) and t.device.type != "cpu":
                host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
                host.copy_(t)
                t = host
            out.append(t)
        return out

    def keep(self, tensors, reserve):
        """Reference outputs stay on the device while `reserve` bytes remain free for what is to
        come (the candidate's inputs, outputs and working memory); beyond that they wait on the host.
        Each is kept compact (compact_tensors): a kept output holds what it shows, no more."""
        tensors = compact_tensors(tensors, self.torch)
        if not self.is_cuda or self.free_bytes() >= reserve:
            return tensors
        return self.to_host(tensors)

    def scribble(self, nbytes):
        """Overwrite freed allocator memory so a kernel cannot return a reference result that was
        left behind in a reused buffer."""
        torch = self.torch
        if self.is_cuda:
            torch.cuda.empty_cache()
        cap = (1 << 28) if self.is_cuda else (1 << 26)
        n = max(1, min(int(nbytes) // 4 + 1, cap))
        junk = torch.full((n,), float("nan"), device=self.device)
        del junk

    def time_model(self, model, inputs_for_call, warmup, trials, check=None, runs=None):
        """Statistics in ms over `trials` calls after `warmup` ones, the L2 cache flushed before
        every call.

        Every call gets inputs never seen before: `inputs_for_call(k)` makes call k's (k < warmup:
        the warm-ups, then the timed calls), and their values are copied into the same tensors
        every time (refill). So neither the inputs' content nor their identity (the tensor
        objects, their data_ptr) tells a call from the one before: a kernel that remembers
        outputs by content never finds one, and one that remembers them by identity returns a
        stale one, which `check(i, outputs)` sees: it is called after timed call i, outside the
        clock, and raises for a call whose outputs are wrong (it chooses which calls it checks).
        What making inputs and checking costs is added to `self.timing_checks_s`.

        On CUDA the clock is KernelBench's: a start event, the call and an end event, all on the
        current stream, right behind the flush, which keeps the GPU busy while the host enters
        the call. Work the call leaves on another stream would end after the end event, so the
        whole device is then synchronized and a third event recorded; an empty synchronize right
        after gives what that costs by itself. A run whose device-wide time exceeds its stream
        time by more than that, plus GUARD_SLACK_MS, is charged the excess, and the statistics
        count it in `outside_stream_runs` (`outside_stream_ms`: the charges' sum). Synchronizes
        spin meanwhile (spinning_synchronize).
        `runs`, a list, receives each run's (stream, device, empty) times in ms."""
        torch = self.torch
        h = self.h
        times = []
        charged, charged_ms = 0, 0.0
        buffers = []

        def args_for(k):
            t0 = time.monotonic()
            args = refill(h, buffers, inputs_for_call(k))
            self.sync()  # what the device spends making them counts here too, not in the timing
            self.timing_checks_s += time.monotonic() - t0
            return args

        with torch.no_grad(), (spinning_synchronize() if self.is_cuda else contextlib.nullcontext()):
            for k in range(warmup):
                args = args_for(k)
                model(*args)
            self.sync()
            if self.is_cuda:
                flush = torch.empty(self.flush_bytes() // 4, dtype=torch.int32, device=self.device)
                start, end, after, empty0, empty1 = (h.cuda_event(enable_timing=True) for _ in range(5))
            for i in range(trials):
                args = args_for(warmup + i)
                if self.is_cuda:
                    h.cuda_synchronize()  # the inputs and anything a previous run left anywhere
                    flush.zero_()
                    start.record()
                    out = model(*args)
                    end.record()
                    h.cuda_synchronize()
                    after.record()
                    after.synchronize()
                    empty0.record()
                    h.cuda_synchronize()
                    empty1.record()
                    empty1.synchronize()
                    on_stream = start.elapsed_time(end)
                    device_wide = start.elapsed_time(after)
                    empty = empty0.elapsed_time(empty1)
                    excess = device_wide - on_stream - empty - GUARD_SLACK_MS
                    if excess > 0:
                        charged += 1
                        charged_ms += excess
                    times.append(on_stream + max(excess, 0.0))
                    if runs is not None:
                        runs.append((on_stream, device_wide, empty))
                else:
                    t0 = h.perf_counter()
                    out = model(*args)
                    times.append((h.perf_counter() - t0) * 1000.0)
                if check is not None:
                    t0 = time.monotonic()
                    check(i, out)
                    self.timing_checks_s += time.monotonic() - t0
                del out, args
        out = stats(times)
        if self.is_cuda and out is not None:
            out["outside_stream_runs"] = charged
            out["outside_stream_ms"] = charged_ms
        return out

    def flush_bytes(self):
        """What the write before each timed run covers: twice the L2 cache, at least 256 MiB
        (KernelBench's flush; it also keeps the GPU busy while the host enters the call)."""
        return max(int(self.l2_bytes() * 2), 256 << 20)

    def l2_bytes(self):
        try:
            return max(self.torch.cuda.get_device_properties(self.device).L2_cache_size, 1 << 20)
        except Exception:
            return 64 << 20


def refill(h, buffers, fresh):
    """A call's arguments: the `fresh` inputs' values copied into `buffers`, the tensors the
    previous call got, wherever shape, stride, dtype, layout and device agree (elsewhere the fresh
    value takes the place). Every call then sees the same tensor objects at the same addresses
    holding values never seen before."""
    is_tensor = h.is_tensor
    for j, v in enumerate(fresh):
        if j == len(buffers):
            buffers.append(v)
            continue
        b = buffers[j]
        if (is_tensor(v) and is_tensor(b) and b.layout == v.layout == h.torch.strided and b.shape == v.shape
                and b.stride() == v.stride() and b.dtype == v.dtype and b.device == v.device):
            h.copy(b, v)
        else:
            buffers[j] = v
    del buffers[len(fresh):]
    return list(buffers)


@contextlib.contextmanager
def spinning_synchronize():
    """While timing, a synchronize spins instead of letting the thread sleep: after a wait of more
    than a few microseconds the driver's default puts it to sleep, and waking it up then takes tens
    of microseconds, which the device-wide guard would read as work left on another stream. Sets
    the CUDA context's scheduling flags through the driver (cuCtxSetFlags, CUDA 12.1 and later) and
    restores them after; with an older driver, nothing changes."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
        get_flags, set_flags = lib.cuCtxGetFlags, lib.cuCtxSetFlags
    except (OSError, AttributeError):
        lib = None
    flags = ctypes.c_uint(0)
    if lib is None or get_flags(ctypes.byref(flags)) != 0:
        yield
        return
    sched_mask, sched_spin = 0x07, 0x01  # CU_CTX_SCHED_MASK, CU_CTX_SCHED_SPIN
    changed = set_flags(ctypes.c_uint((flags.value & ~sched_mask) | sched_spin)) == 0
    try:
        yield
    finally:
        if changed:
            set_flags(flags)


def note_outside_stream(result, key, name):
    """Moves the count of runs charged for work outside the current stream, and what they were
    charged on average, into the result's metadata (the evaluator reports it), where there were
    any: "92 of 100, 0.0213 ms each". Tens of microseconds on a busy host are the synchronizing
    thread waking up late; a side stream's hidden kernel shows as its own duration."""
    timing = result.get(key) or {}
    n = timing.pop("outside_stream_runs", 0)
    total_ms = timing.pop("outside_stream_ms", 0.0)
    if n:
        result.setdefault("metadata", {})[name] = "{} of {}, {:.4f} ms each".format(
            n, timing["num_trials"], total_ms / n)


def stats(times):
    n = len(times)
    if n == 0:
        return None
    mean = sum(times) / n
    ordered = sorted(times)
    median = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    std = math.sqrt(sum((t - mean) ** 2 for t in times) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "median": median, "std": std, "min": ordered[0], "max": ordered[-1], "num_trials": n}


# Extra correctness trials on transformed floating-point inputs of the same shapes and dtypes.
# Problems often draw inputs from [0, 1) only; a kernel that is wrong for negative, large, tiny
# or special values would otherwise pass. Integer and boolean inputs are never transformed.
INPUT_FAMILIES = ("sign_symmetric", "scaled_up", "scaled_down", "special_values")


def transform_inputs(torch, values, family, seed):
    """The family's version of `values`. Works in place on one scratch tensor, so the peak is
    about twice an input's size: problems with multi-gigabyte inputs must still fit."""
    out = []
    for v in values:
        if not torch.is_tensor(v) or not v.is_floating_point() or v.numel() == 0:
            out.append(v)
            continue
        # Random draws on the tensor's own device: billions of host-side draws take minutes.
        generator = torch.Generator(device=v.device).manual_seed(seed + len(out))
        draw = torch.empty(v.shape, dtype=torch.float32, device=v.device)
        draw.uniform_(generator=generator)
        draw.lt_(0.5).mul_(-2.0).add_(1.0)  # -1 with probability 1/2, else +1
        t = v.clone()
        t.mul_(draw)
        if family == "scaled_up":
            t.mul_(64.0)
        elif family == "scaled_down":
            t.div_(1024.0)
        elif family == "special_values":  # zeros, negative zeros and large magnitudes mixed in
            draw.uniform_(generator=generator)
            big = 1000.0 if v.dtype in (torch.float16, torch.bfloat16) else 1.0e4
            t.masked_fill_(draw < 0.10, 0.0)
            t.masked_fill_((draw >= 0.10) & (draw < 0.15), -0.0)
            t.masked_fill_((draw >= 0.15) & (draw < 0.18), big)
            t.masked_fill_((draw >= 0.18) & (draw < 0.21), -big)
        del draw
        out.append(t)
    return out


def all_finite(torch, outputs):
    return all(bool(torch.isfinite(o).all()) if o.is_floating_point() else True for o in outputs)


def max_magnitude(torch, outputs):
    m = 0.0
    for o in outputs:
        if o.is_floating_point() and o.numel() > 0:
            lo, hi = torch.aminmax(o.detach())  # no full-size copy of the absolute values
            m = max(m, abs(float(lo.float().item())), abs(float(hi.float().item())))
    return m


def trial_seed(seed, trial):
    return (seed * 1000003 + trial * 7919 + 17) % (2 ** 63 - 1)


# Timed calls are checked calls. Each call of a timing (warm-ups included) gets inputs of its own,
# made from the seed trial_seed(seed, TIMED_SEED_BASE + k), past every seed the trials, input
# families and sensitivity runs use; the reference and the candidate get the same ones. Of the
# timed calls, TIMED_CHECKS have their outputs compared with the reference's on those inputs
# (all of them when there are no more): the last one, and one drawn from each equal slice of the
# others, so that early, middle and late calls are all covered, drawn from the evaluation's
# seed. A remembered output, a state kept across calls or work skipped after some calls is wrong
# on every call after it starts, so a few checked calls catch it; each costs one reference run
# before the candidate loads, and one comparison after its call's clock has stopped. Outputs over
# FAMILY_FULL_LIMIT elements are compared at FAMILY_SAMPLE positions, as the input families' are.
TIMED_SEED_BASE = 1 << 20
TIMED_CHECKS = 6


def checked_calls(trials, seed):
    """Which timed calls (0-based) have their outputs compared with the reference's."""
    if trials <= TIMED_CHECKS:
        return list(range(trials))
    import random

    draw = random.Random(trial_seed(seed, TIMED_SEED_BASE - 1))
    rest, slices = trials - 1, TIMED_CHECKS - 1
    return [draw.randrange(rest * j // slices, rest * (j + 1) // slices) for j in range(slices)] + [trials - 1]


def same_tensor(h, a, b):
    if a.device != b.device:
        b = b.to(a.device)
    if h.equal(a, b):
        return True
    if not a.is_floating_point() or a.shape != b.shape or a.dtype != b.dtype:
        return False
    return h.equal(h.isnan(a), h.isnan(b)) and h.equal(h.nan_to_num(a), h.nan_to_num(b))


def mutated(h, before, after):
    return any(h.is_tensor(a) and not same_tensor(h, a, b) for a, b in zip(before, after))


def compact_tensors(values, torch):
    """`values` with every tensor whose storage is larger than its elements need replaced by a
    copy of its own: a view of a large output, or a 0-d loss from PyTorch's mse_loss or
    smooth_l1_loss, which keeps its input-sized buffer (4 GiB for KernelBench's 96_HuberLoss).
    Kept as is, a few such outputs fill a GPU."""
    out = []
    for v in values:
        if torch.is_tensor(v) and v.untyped_storage().nbytes() > v.numel() * v.element_size():
            v = v.clone(memory_format=torch.contiguous_format)
        out.append(v)
    return out


def tensor_bytes(values, torch):
    return sum(v.numel() * v.element_size() for v in values if torch.is_tensor(v))


def child_run(job, torch, h):
    t_start = time.monotonic()
    # Seconds per step; a failure reports those that finished. start: from the fork to here;
    # setup: the device (the GPU's runtime starts here).
    timings = {"start": t_start - job["forked_at"]}
    result = {"compiled": False, "correct": False, "trials_passed": 0, "trials_total": 0, "stage_seconds": timings}
    r = Runner(torch, h, job["device"], job["precision"], job["kernelbench_inputs"])
    # Every setting comes from the C++ side (core::EvalOptions, and for the tolerances
    # core::default_tolerance, the numbers the prompt states): one owner, not a copy here.
    seed = job["seed"]
    n_trials = max(1, job["correctness_trials"])
    warmup = job["warmup_runs"]
    timing_trials = job["timing_trials"]
    atol, rtol = float(job["atol"]), float(job["rtol"])
    if r.is_cuda:
        torch.cuda.set_device(r.device)
        result["device"] = torch.cuda.get_device_name(r.device)
    else:
        result["device"] = "cpu"
    if r.precision == "fp32":
        # An fp32 problem is judged against an IEEE fp32 reference. torch lets cuDNN convolutions
        # run in TF32 by default (about 1e-3 relative error, ten times atol = rtol = 1e-4), which
        # would fail exact fp32 kernels, and TF32 in a candidate is a precision_downgrade error.
        # Set before the reference is loaded, so a problem that wants TF32 can still ask for it.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    # Inputs are kept only where making them again is slow (generated on the host, as KernelBench
    # does); made on the device they take milliseconds, so every use makes them again from their
    # seed and device memory goes to the reference outputs instead.
    timings["setup"] = time.monotonic() - t_start
    regenerate = r.is_cuda and not job["kernelbench_inputs"]
    kept_inputs = {}

    def inputs_for(t):
        if t in kept_inputs:
            return kept_inputs[t]
        values = r.make_inputs(ref_mod, trial_seed(seed, t))
        if not regenerate and len(kept_inputs) < 3:
            kept_inputs[t] = values
        return values

    def timed_inputs(k):
        """Call k's inputs in a timing (TIMED_SEED_BASE): the same for the reference and the candidate."""
        return r.make_inputs(ref_mod, trial_seed(seed, TIMED_SEED_BASE + k), on_device=True)

    # The reference's outputs on the checked timed calls (checked_calls): call -> (outputs, kept
    # whole or at sampled positions, those positions, the outputs' shapes and dtypes).
    timed_refs = {}
    checks_in_reference = 0.0  # seconds of the timed calls' checks spent in the reference's step

    def timed_check(i, out):
        """Raises TimedCallMismatch when timed call i is checked and its outputs are not the
        reference's (time_model calls it after the call's clock has stopped)."""
        if i not in timed_refs:
            return
        refs, positions, kinds = timed_refs[i]
        try:
            out = flatten_outputs(out, torch)
        except TypeError as exc:
            raise TimedCallMismatch(i, str(exc))
        if len(out) != len(refs):
            raise TimedCallMismatch(i, "forward returned {} outputs, expected {}".format(len(out), len(refs)))
        for k, (o, ref, pos, (shape, dtype)) in enumerate(zip(out, refs, positions, kinds)):
            reason = kind_mismatch(h, o, shape, dtype)
            if reason is None:
                reason = compare(h, at_positions(o, pos), ref, r.precision, atol, rtol)[0]
            if reason is not None:
                raise TimedCallMismatch(i, reason + (" (output {})".format(k) if len(out) > 1 else ""))

    # 1. The reference, entirely before any candidate code is loaded: its outputs for every trial
    #    and input family, and its timing.
    try:
        # Loaded under a one-off name and dropped from sys.modules again, so candidate code
        # cannot look the reference up to rebind its globals.
        ref_name = "kbrl_reference_" + os.urandom(6).hex()
        ref_mod = load_module(job["problem_path"], ref_name)
        del sys.modules[ref_name]
        r.seed_all(seed)
        init_inputs = list(ref_mod.get_init_inputs())
        ref_model = r.build_model(ref_mod.Model, r.to_device(r.clone(init_inputs)), seed)
        ref_outputs = []
        ref_mutates = []
        ref_bytes = 0
        in_bytes = 0
        reserve = 0

        def reference_families():
            """The input families (see INPUT_FAMILIES) the reference can be judged on, and the
            skipped ones. Called after trial 0, whose outputs set the families' scale."""
            # Families are derived from trial 0's inputs; one counts only where the reference
            # itself runs and gives finite outputs (so domains like log or sqrt are respected).
            families = []
            skipped = []
            base_scale = max(max_magnitude(torch, ref_outputs[0]), 1e-30)
            if job["input_families"]:
                for k, family in enumerate(INPUT_FAMILIES):
                    try:
                        f_inputs = transform_inputs(torch, inputs_for(0), family, trial_seed(seed, 1000 + k))
                        f_in = r.clone(f_inputs)
                        f_out = [o.detach() for o in flatten_outputs(ref_model(*f_in), torch)]
                        r.sync()
                    except Exception:
                        skipped.append(family)
                        continue
                    if not all_finite(torch, f_out):
                        skipped.append(family)
                        continue
                    ref_mut = mutated(h, f_inputs, f_in)
                    del f_in
                    # The reference's own sensitivity on these inputs.
                    try:
                        p_out = [o.detach() for o in flatten_outputs(
                            ref_model(*perturb_inputs(torch, f_inputs, trial_seed(seed, 2000 + k))), torch)]
                        r.sync()
                    except Exception:
                        skipped.append(family)
                        continue
                    del f_inputs
                    kinds = [(tuple(o.shape), o.dtype) for o in f_out]
                    positions = [sample_positions(torch, o, trial_seed(seed, 3000 + 16 * k + j))
                                 for j, o in enumerate(f_out)]
                    noise = []
                    ill_conditioned = len(p_out) != len(f_out) or not all_finite(torch, p_out)
                    for o, p, pos in zip(f_out, p_out, positions):
                        if ill_conditioned:
                            break
                        if o.is_floating_point():
                            o, p = at_positions(o, pos), at_positions(p, pos)
                            noise.append(change_stats(h, o, p) if o.numel() else (0.0, 0.0))
                        else:
                            ill_conditioned = not h.equal(o, p)  # e.g. argmax flips under the perturbation
                            noise.append(None)
                    del p_out
                    if ill_conditioned:
                        skipped.append(family)
                        continue
                    scale = max(1.0, max_magnitude(torch, f_out) / base_scale)
                    kept = r.keep([at_positions(o, pos) for o, pos in zip(f_out, positions)], reserve)
                    del f_out
                    # The family's inputs are made again from trial 0's when the candidate's turn comes.
                    families.append((family, trial_seed(seed, 1000 + k), kept, ref_mut, scale, noise, positions, kinds))
            return families, skipped

        with torch.no_grad():
            for t in range(n_trials):
                inputs = inputs_for(t)
                in_bytes = max(in_bytes, tensor_bytes(inputs, torch))
                ref_in = r.clone(inputs)
                out = [o.detach() for o in flatten_outputs(ref_model(*ref_in), torch)]
                r.sync()
                ref_mutates.append(mutated(h, inputs, ref_in))
                del ref_in, inputs
                ref_bytes = max(ref_bytes, tensor_bytes(out, torch))
                # Room for what is still to come: after trial 0, the input families (an input set,
                # its clone and the outputs of the reference's family and sensitivity runs), then
                # the candidate's trials (an input set, its clone and an output); and 2 GiB more.
                # The families come right after trial 0, so that the later trials' outputs need
                # room only for the candidate's: they then stay on the device more often.
                reserve = (3 if t == 0 else 2) * (in_bytes + ref_bytes) + (2 << 30)
                ref_outputs.append(r.keep(out, reserve))
                del out
                if t == 0:
                    families, skipped = reference_families()
            if job["measure_performance"]:
                # The reference's outputs on the checked timed calls' own inputs, before any
                # candidate code runs, like every other reference output.
                t0 = time.monotonic()
                for i in checked_calls(timing_trials, seed):
                    out = [o.detach() for o in flatten_outputs(ref_model(*timed_inputs(warmup + i)), torch)]
                    r.sync()
                    kinds = [(tuple(o.shape), o.dtype) for o in out]
                    positions = [sample_positions(torch, o, trial_seed(seed, 2 * TIMED_SEED_BASE + 16 * i + j))
                                 for j, o in enumerate(out)]
                    timed_refs[i] = (r.keep([at_positions(o, p) for o, p in zip(out, positions)], reserve),
                                     positions, kinds)
                    del out
                checks_in_reference += time.monotonic() - t0
        r.release()
        if job["measure_performance"] and job["time_reference"]:
            # Timed exactly as the candidate will be, checks included: the reference's checked
            # calls must give what it gave untimed (a reference whose outputs change from call to
            # call cannot judge a candidate's).
            before = r.timing_checks_s
            try:
                result["ref_runtime"] = r.time_model(ref_model, timed_inputs, warmup, timing_trials, timed_check)
            except TimedCallMismatch as exc:
                raise RuntimeError("its output on timed call {} differs from its untimed run on the same inputs "
                                   "(a reference that changes from call to call?): {}".format(exc.call + 1, exc.reason))
            finally:
                checks_in_reference += r.timing_checks_s - before
            note_outside_stream(result, "ref_runtime", "reference_outside_stream_runs")
        del ref_model
        r.release()
    except BaseException as exc:
        name, msg = exception_message(exc)
        if r.is_cuda and is_oom(exc):
            # Where the memory went (the failed frames still hold their tensors) and which step
            # of the harness asked: the problem's own size or memory the harness kept.
            msg += "\n" + held_tensors(torch)
        return failure("internal", "reference failed: " + msg + "\n" + last_frames(exc, 6), **result)
    timings["reference"] = time.monotonic() - t_start - timings["setup"] - checks_in_reference
    if job["measure_performance"]:
        timings["timing_checks"] = checks_in_reference

    # 2. The candidate, as its own module: it cannot rebind the reference's globals.
    t0 = time.monotonic()
    try:
        cand_mod = load_module(job["candidate_path"], "kbrl_candidate")
        model_cls = getattr(cand_mod, "ModelNew", None)
        if not isinstance(model_cls, type):
            return failure("format", "the program defines no class ModelNew", **result)
        cand_model = r.build_model(model_cls, r.to_device(r.clone(init_inputs)), seed)
        result["compiled"] = True  # it built and loaded, whatever the check below finds
        h.check_untouched()
    except RewardHack as exc:
        return failure("reward_hack", str(exc), **result)
    except BaseException as exc:
        name, msg = exception_message(exc)
        if is_oom(exc):
            return failure("out_of_memory", msg, **result)
        if "Error building extension" in str(exc):
            return failure("compile", compiler_errors(read_tail(job["log_path"], 200000) + str(exc)), **result)
        return failure("compile", msg + "\n" + last_frames(exc), **result)
    result["compiled"] = True
    timings["load"] = time.monotonic() - t0

    def call_candidate(args):
        """One forward. Out of device memory with reference outputs still there, they move to the
        host and the call is made once more: the candidate gets the whole device before an
        out-of-memory verdict."""
        try:
            with torch.no_grad():
                out = cand_model(*args)
            r.sync()
            return out
        except BaseException as exc:
            on_device = [o for outs in ref_outputs + [f[2] for f in families] for o in outs if o.device.type != "cpu"]
            if not (r.is_cuda and is_oom(exc) and on_device):
                raise
        for outs in ref_outputs:
            outs[:] = r.to_host(outs)
        for f in families:
            f[2][:] = r.to_host(f[2])
        r.release()
        with torch.no_grad():
            out = cand_model(*args)
        r.sync()
        return out

    # 3. Correctness: every trial its own inputs, each model its own clone, freed memory
    #    overwritten first.
    t0 = time.monotonic()
    max_abs = 0.0
    max_rel = 0.0
    for t in range(n_trials):
        result["trials_total"] = t + 1
        try:
            inputs = inputs_for(t)
            r.scribble(ref_bytes)
            cand_in = r.clone(inputs)
            out = call_candidate(cand_in)
            h.check_untouched()
            out = flatten_outputs(out, torch)
        except RewardHack as exc:
            return failure("reward_hack", str(exc), **result)
        except BaseException as exc:
            name, msg = exception_message(exc)
            category = "out_of_memory" if is_oom(exc) else "runtime"
            return failure(category, "trial {}: {}\n{}".format(t + 1, msg, last_frames(exc)), **result)
        ref_out = ref_outputs[t]
        if len(out) != len(ref_out):
            return failure("correctness", "trial {}: forward returned {} outputs, expected {}".format(
                t + 1, len(out), len(ref_out)), **result)
        for k, (o, ref) in enumerate(zip(out, ref_out)):
            reason, a, rel = compare(h, o, ref, r.precision, atol, rtol)
            if a is not None:
                max_abs = max(max_abs, a)
                max_rel = max(max_rel, rel)
            if reason is not None:
                result["max_abs_error"] = max_abs
                result["max_rel_error"] = max_rel
                where = " (output {})".format(k) if len(out) > 1 else ""
                return failure("correctness", "trial {}{}: {}".format(t + 1, where, reason), **result)
        if not ref_mutates[t] and mutated(h, inputs, cand_in):
            return failure("reward_hack", "the candidate wrote into its input tensors", **result)
        result["trials_passed"] = t + 1
    out = cand_in = inputs = None
    ref_outputs.clear()  # judged: their device memory goes to the input families' runs
    r.release()
    result["correct_on_problem_inputs"] = True
    result["max_abs_error"] = max_abs
    result["max_rel_error"] = max_rel

    # 3b. The input families. All are tried, so the result says which failed.
    failed = []
    first_failure = None
    for family, family_seed, f_ref, ref_mut, scale, noise, positions, kinds in families:
        try:
            r.scribble(ref_bytes)
            f_inputs = transform_inputs(torch, inputs_for(0), family, family_seed)
            cand_in = r.clone(f_inputs)
            out = call_candidate(cand_in)
            h.check_untouched()
            out = flatten_outputs(out, torch)
        except RewardHack as exc:
            return failure("reward_hack", str(exc), **result)
        except BaseException as exc:
            name, msg = exception_message(exc)
            if is_oom(exc):
                return failure("out_of_memory", "input family {}: {}".format(family, msg), **result)
            failed.append(family)
            first_failure = first_failure or "input family {}: {}".format(family, msg)
            continue
        reason = None
        if len(out) != len(f_ref):
            reason = "forward returned {} outputs, expected {}".format(len(out), len(f_ref))
        for o, ref, z, pos, (shape, dtype) in zip(out, f_ref, noise, positions, kinds):
            if reason is None:
                reason = kind_mismatch(h, o, shape, dtype)
            if reason is None:
                # The elementwise atol scales with the outputs' magnitude (a 64x input makes
                # honest rounding errors 64x larger too); rtol and the L2 check are relative.
                reason = compare(h, at_positions(o, pos), ref, r.precision, atol * scale, rtol, z)[0]
        if reason is None and not ref_mut and mutated(h, f_inputs, cand_in):
            return failure("reward_hack", "the candidate wrote into its input tensors", **result)
        if reason is not None:
            failed.append(family)
            first_failure = first_failure or "input family {}: {}".format(family, reason)
        del out, cand_in, f_inputs
        r.release()
    result["input_families"] = {"tried": [f[0] for f in families], "failed": failed, "skipped": skipped}
    calls_before_timing = n_trials + len(families)
    families = ref_outputs = None  # timing needs the memory
    r.release()
    # A kernel that fails only the families is still timed, so a reward that is configured to
    # accept it (correct_on_problem_inputs) has its speedup.
    result["correct"] = not failed
    timings["correctness"] = time.monotonic() - t0

    # 4. Timing, the same way as the reference's, on the same inputs: new ones every call, and
    #    the checked calls' outputs compared with the reference's after their clocks stop.
    if job["measure_performance"]:
        t0 = time.monotonic()
        before = r.timing_checks_s
        # The reference's timing ran on these same inputs: what its outputs left in freed memory is
        # overwritten, so an output buffer that no kernel writes cannot find them.
        r.scribble(ref_bytes)
        r.timing_checks_s += time.monotonic() - t0

        def timing_done():
            checks = r.timing_checks_s - before
            timings["timing_checks"] = timings.get("timing_checks", 0.0) + checks
            timings["timing"] = time.monotonic() - t0 - checks

        try:
            result["runtime"] = r.time_model(cand_model, timed_inputs, warmup, timing_trials, timed_check)
            note_outside_stream(result, "runtime", "outside_stream_runs")
            h.check_untouched()
        except TimedCallMismatch as exc:
            # What a kernel returns on the calls that are timed must be as right as on the trials:
            # a wrong timed call is a wrong output on the problem's own inputs.
            timing_done()
            result["correct"] = result["correct_on_problem_inputs"] = False
            return failure("correctness", (
                "timed call {} of {} (the candidate's call {}, on inputs new to it): {}; its outputs on the "
                "correctness trials were right, so they change from call to call: a state kept across calls, "
                "outputs remembered from earlier calls (by the inputs' identity or content), work skipped "
                "after the first calls, or a race").format(
                    exc.call + 1, timing_trials, calls_before_timing + warmup + exc.call + 1, exc.reason), **result)
        except RewardHack as exc:
            return failure("reward_hack", str(exc), **result)
        except BaseException as exc:
            name, msg = exception_message(exc)
            return failure("out_of_memory" if is_oom(exc) else "runtime", "timing: " + msg, **result)
        timing_done()
    if failed:
        return failure("correctness", first_failure + " (the problem's own inputs all passed)", **result)
    result["status"] = "ok"
    return result


# --------------------------------------------------------------------------------------------
# Build isolation: a job's child may use its own build directory and nothing else of the work
# directory (not another candidate's source, library or compile record, not the reference-timing
# cache, not the problem files except for reading). Landlock (Linux 5.13+, no privileges) allows
# access by hierarchy only, so the child is given everything outside the work directory, entry
# by entry along the path down to it, and inside it only what its job needs. Directories can
# still be listed everywhere; files in the rest of the work directory cannot be opened,
# executed, written, created, removed, truncated or linked.

LANDLOCK_FILE = (1 << 0) | (1 << 1) | (1 << 2)  # execute, write, read (files)
LANDLOCK_READ = (1 << 0) | (1 << 2) | (1 << 3)  # execute, read files, read directories
LANDLOCK_ABI1 = (1 << 13) - 1                   # every file-system right of ABI 1
LANDLOCK_REFER = 1 << 13                        # ABI 2: link or rename across directories
LANDLOCK_TRUNCATE = 1 << 14                     # ABI 3


def landlock_abi():
    """The kernel's Landlock ABI version, or a string saying why there is none."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        abi = libc.syscall(444, None, ctypes.c_size_t(0), ctypes.c_uint32(1))  # landlock_create_ruleset, VERSION
        if abi < 0:
            return "unavailable: landlock: {}".format(os.strerror(ctypes.get_errno()))
        return abi
    except (OSError, AttributeError) as exc:
        return "unavailable: {}".format(exc)


def isolation_description():
    abi = landlock_abi()
    files = "landlock ABI {}".format(abi) if isinstance(abi, int) else abi
    import platform

    signals = "seccomp" if platform.machine() in SECCOMP_SYSCALLS else "no seccomp table for " + platform.machine()
    return "{}; {}".format(files, signals)


def isolate_build(build_dir, read_write=(), read_only=()):
    """Restricts this process (a job's child; single-threaded, just forked) and all it starts:
    in the work directory (the parent of the build directories' folder), only `build_dir` and
    `read_write` may be written and only those and `read_only` read. Does nothing where the
    kernel has no Landlock (the greeting's `isolation` says so)."""
    abi = landlock_abi()
    if not isinstance(abi, int):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    handled = LANDLOCK_ABI1 | (LANDLOCK_REFER if abi >= 2 else 0) | (LANDLOCK_TRUNCATE if abi >= 3 else 0)
    file_rights = LANDLOCK_FILE | (LANDLOCK_TRUNCATE if abi >= 3 else 0)

    class RulesetAttr(ctypes.Structure):
        _fields_ = [("handled_access_fs", ctypes.c_uint64)]

    class PathBeneath(ctypes.Structure):
        _pack_ = 1
        _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]

    attr = RulesetAttr(handled)
    ruleset = libc.syscall(444, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset: " + os.strerror(ctypes.get_errno()))

    def allow(path, rights):
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:  # gone, or a dangling link: nothing to allow
            return
        try:
            if not os.path.isdir(path):
                rights &= file_rights
            rule = PathBeneath(rights & handled, fd)
            if libc.syscall(445, ruleset, ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
                raise OSError(ctypes.get_errno(), "landlock_add_rule {}: {}".format(path, os.strerror(ctypes.get_errno())))
        finally:
            os.close(fd)

    try:
        build_dir = os.path.realpath(build_dir)
        work_dir = os.path.dirname(build_dir)
        if os.path.basename(work_dir) == "builds":
            work_dir = os.path.dirname(work_dir)
        allow("/", 1 << 3)  # listing directories, everywhere
        # Everything beside the path from / down to the work directory.
        path = work_dir
        while path != "/":
            parent = os.path.dirname(path)
            for name in os.listdir(parent):
                sibling = os.path.join(parent, name)
                if sibling != path:
                    allow(sibling, handled)
            path = parent
        for p in (build_dir,) + tuple(read_write):
            allow(p, handled)
        for p in read_only:
            allow(p, LANDLOCK_READ)
        PR_SET_NO_NEW_PRIVS = 38
        if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS: " + os.strerror(ctypes.get_errno()))
        if libc.syscall(446, ruleset, ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self: " + os.strerror(ctypes.get_errno()))
    finally:
        os.close(ruleset)


# Signals and tracing: a job's child may signal itself, its own process group and the processes
# it started (pids from its own upward), never its worker, the evaluator or older processes (a
# candidate that kills its worker would turn its failure into an evaluator error, retried and
# then not counted against it); and it may not trace or read or write another process's memory.
# A seccomp filter on the syscalls that take a target pid, where the architecture is known.

SECCOMP_SYSCALLS = {
    # arch: (AUDIT_ARCH, {name: number})
    "x86_64": (0xC000003E, {"kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
                            "pidfd_open": 434, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311}),
    "aarch64": (0xC00000B7, {"kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
                             "pidfd_open": 434, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271}),
}


def seccomp_filter(arch, audit_arch, numbers, self_pid):
    """The BPF program (a list of (code, jt, jf, k)) for this process: see above."""
    LD, JEQ, JGE, JGT, RET = 0x20, 0x15, 0x35, 0x25, 0x06
    ALLOW, DENY = 0x7FFF0000, 0x00050000 | 1  # SECCOMP_RET_ERRNO | EPERM
    targeted = [numbers[n] for n in ("kill", "tkill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open")]
    forbidden = [numbers[n] for n in ("ptrace", "process_vm_readv", "process_vm_writev")]
    prog = [(LD, 0, 0, 4), (JEQ, 1, 0, audit_arch), (RET, 0, 0, DENY), (LD, 0, 0, 0)]
    if arch == "x86_64":  # the x32 ABI's numbers have bit 30 set: none of those for a candidate
        prog.append((JGE, 0, 1, 0x40000000))
        prog.append((RET, 0, 0, DENY))
    # Jump offsets count the instructions after this one: the checks below come in a fixed order.
    for nr in forbidden:
        prog.append((JEQ, 0, 1, nr))
        prog.append((RET, 0, 0, DENY))
    for i, nr in enumerate(targeted):
        prog.append((JEQ, len(targeted) - i, 0, nr))  # to the target check after the final ALLOW
    prog.append((RET, 0, 0, ALLOW))
    negative_self = (-self_pid) & 0xFFFFFFFF
    prog += [
        (LD, 0, 0, 16),                # the first argument's low 32 bits: a pid_t
        (JEQ, 4, 0, 0),                # 0: its own process group: allowed
        (JGE, 2, 0, 0x80000000),       # negative: a process group, checked below
        (JGE, 2, 0, self_pid),         # a pid from its own on (itself, or one it started): allowed
        (RET, 0, 0, DENY),
        (JGT, 1, 0, negative_self),    # -1 (every process) or an older process's group: denied
        (RET, 0, 0, ALLOW),
        (RET, 0, 0, DENY),
    ]
    return prog


def restrict_signals():
    """Installs seccomp_filter for this process and all it starts; returns False where the
    architecture has no table here or the kernel refuses (the greeting says which)."""
    import ctypes
    import platform

    arch = platform.machine()
    if arch not in SECCOMP_SYSCALLS:
        return False
    audit_arch, numbers = SECCOMP_SYSCALLS[arch]

    class SockFilter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(SockFilter))]

    prog = seccomp_filter(arch, audit_arch, numbers, os.getpid())
    filters = (SockFilter * len(prog))(*[SockFilter(*ins) for ins in prog])
    fprog = SockFprog(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS: " + os.strerror(ctypes.get_errno()))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp: " + os.strerror(ctypes.get_errno()))
    return True


# The worker's own channels to the evaluator (the protocol stream's descriptor; stdin is the job
# stream): a job's child closes them first, so that a candidate can neither read the jobs meant
# for later children nor write replies in the worker's name. Its result pipe is all it keeps.
WORKER_CHANNELS = []


def close_worker_channels():
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd in WORKER_CHANNELS:
        with contextlib.suppress(OSError):
            os.close(fd)


def child_main(job, write_fd, torch, h):
    """Runs in the forked child; never returns."""
    code = 0
    try:
        close_worker_channels()
        os.setpgid(0, 0)
        die_with_parent()
        log_fd = os.open(job["log_path"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(log_fd)
        sys.stdout = os.fdopen(1, "w", buffering=1)
        sys.stderr = os.fdopen(2, "w", buffering=1)
        os.environ["TORCH_EXTENSIONS_DIR"] = job["build_dir"]
        # Triton's kernel cache too: one candidate's compiled kernels are never another's, and
        # nothing is created in the home folder (read-only in the sandbox).
        os.environ["TRITON_CACHE_DIR"] = os.path.join(job["build_dir"], "triton_cache")
        # Temporary files (the compilers', Python's tempfile) in the build directory as well: the
        # build isolation lets the child create files nowhere else in the work directory's parents
        # (a work directory in /tmp leaves no other writable place), and nothing is left behind
        # elsewhere.
        tmp = os.path.join(job["build_dir"], "tmp")
        os.makedirs(tmp, exist_ok=True)
        for name in ("TMPDIR", "TMP", "TEMP"):
            os.environ[name] = tmp
        tempfile.tempdir = tmp
        os.chdir(job["build_dir"])
        apply_limits(job["limits"])
        if job["op"] == "compile":  # the compile cache: precompiled headers are built there
            isolate_build(job["build_dir"], read_write=[job["fast_build"]["dir"]] if job["fast_build"]["dir"] else [])
        else:
            isolate_build(job["build_dir"], read_only=[job["problem_path"]])
        restrict_signals()
        if job["op"] == "compile":
            result = child_compile(job, torch)
        elif os.environ.get("KBRL_WORKER_PROFILE"):  # a folder: one cProfile file per run job
            import cProfile
            prof = cProfile.Profile()
            result = prof.runcall(child_run, job, torch, h)
            with contextlib.suppress(OSError):
                prof.dump_stats(os.path.join(os.environ["KBRL_WORKER_PROFILE"], job["job_id"] + ".prof"))
        else:
            result = child_run(job, torch, h)
    except BaseException as exc:  # the harness itself failed
        result = failure("internal", "worker child: " + "".join(traceback.format_exception_only(type(exc), exc)))
        code = 3
    payload = json.dumps(result, allow_nan=False, default=str).encode()
    try:
        os.write(write_fd, struct.pack("<Q", len(payload)) + payload)
    except OSError:
        code = 4
    os._exit(code)


# --------------------------------------------------------------------------------------------
# The worker: forks, watches, classifies


def describe_exit(status):
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        if sig == signal.SIGKILL:
            return "crash", "the process was killed ({}); out of memory or a resource limit".format(name)
        if sig == signal.SIGXFSZ:
            return "crash", "the process wrote more than the file size limit ({}; evaluator setting max_file_size_bytes)".format(name)
        if sig == signal.SIGXCPU:
            return "timeout", "the process used up its CPU-time limit ({}; evaluator setting max_cpu_seconds)".format(name)
        return "crash", "the process died with signal {}".format(name)
    if os.WIFEXITED(status):
        return "crash", "the process exited with code {} before reporting a result".format(os.WEXITSTATUS(status))
    return "crash", "the process ended abnormally"


def read_result(fd, deadline):
    """Reads the child's length-prefixed result, or returns (None, reason) on timeout / EOF."""
    buf = b""
    need = 8
    header = None
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, "timeout"
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            return None, "timeout"
        chunk = os.read(fd, 65536)
        if not chunk:
            return None, "eof"
        buf += chunk
        if header is None and len(buf) >= 8:
            header = struct.unpack("<Q", buf[:8])[0]
            if header > MAX_MESSAGE:
                return None, "eof"
            need = 8 + header
        if header is not None and len(buf) >= need:
            return buf[8:need], "ok"


def kill_group(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def become_subreaper():
    """Processes that a job's child leaves behind outside its process group (a daemon started
    with setsid) are re-parented to the worker rather than to init when the child ends, so that
    collect_leftovers finds them. Linux only; elsewhere nothing changes."""
    try:
        import ctypes

        PR_SET_CHILD_SUBREAPER = 36
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def collect_leftovers(group):
    """After a job's child has ended and its process group was killed: reaps what remains of the
    group and kills and reaps every other child of the worker, which only a job can have left
    (become_subreaper). Returns the latter as "pid (command line)" strings. A killed process's
    own children come to the worker next, so this repeats until none is left."""
    me = str(os.getpid())
    left = []
    for _ in range(20):
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open("/proc/{}/stat".format(entry)) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 3 and fields[1] == me:
                found.append((int(entry), fields[0], int(fields[2])))  # (pid, state, process group)
        if not found:
            break
        for pid, state, pgid in found:
            if pgid != group and state != "Z":  # a zombie has ended already: only reaped
                try:
                    with open("/proc/{}/cmdline".format(pid), "rb") as f:
                        command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
                except OSError:
                    command = "?"
                left.append("{} ({})".format(pid, command[:120] or "?"))
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        for pid, _, _ in found:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
    return left


def run_job(job, torch, h):
    """Runs a checked job (read_job) in a forked child; returns its reply (reply_for)."""
    os.makedirs(job["build_dir"], exist_ok=True)
    read_fd, write_fd = os.pipe()
    started = time.monotonic()
    job["forked_at"] = started
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        child_main(job, write_fd, torch, h)
    os.close(write_fd)
    try:
        os.setpgid(pid, pid)  # also done by the child; whichever runs first wins
    except OSError:
        pass
    deadline = started + job["timeout_s"]
    payload, how = read_result(read_fd, deadline)
    os.close(read_fd)
    if how == "timeout":
        kill_group(pid)
        os.waitpid(pid, 0)
        result = failure("timeout", "{} stage ran past its {:.0f} s limit".format(job["op"], job["timeout_s"]))
    else:
        reported = time.monotonic()
        _, status = os.waitpid(pid, 0)
        kill_group(pid)  # whatever the candidate left running dies with it
        if payload is not None:
            try:
                result = json.loads(payload)
            except ValueError:
                result = failure("internal", "unreadable result from the child")
            if "stage_seconds" in result:
                # The child's exit after its result (a GPU process gives its memory back then).
                result["stage_seconds"]["exit"] = time.monotonic() - reported
        else:
            category, message = describe_exit(status)
            tail = clean_message(read_tail(job["log_path"], 4000), 600)
            if "out of memory" in tail.lower() or "MemoryError" in tail:
                category = "out_of_memory"
            result = failure(category, message + ("\n" + tail if tail else ""))
    left = collect_leftovers(pid)
    if left:
        # Nothing honest leaves its process group to outlive its stage: a process left running
        # could write into builds, load the machine while others are timed, or wait for later jobs.
        result = failure("reward_hack", "the candidate left {} process(es) running after its {} stage, outside its "
                         "process group (killed): {}".format(len(left), job["op"], "; ".join(left[:5])),
                         **{k: v for k, v in result.items() if k == "stage_seconds"})
    return reply_for(job["op"], job["job_id"], result, time.monotonic() - started)


def rejection(job, message):
    """The reply to a job that could not be read or run: an internal failure, shaped as its op's
    reply where the op is known (so the evaluator reads the message), with what the job said of
    its op and id."""
    job = job if isinstance(job, dict) else {}
    op = job.get("op") if job.get("op") in ("compile", "run") else None
    job_id = job.get("job_id") if isinstance(job.get("job_id"), str) else None
    return reply_for(op, job_id, failure("internal", message), 0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--platform", choices=["cpu", "cuda", "hip"], default="cpu")
    args = parser.parse_args()

    # The protocol channel is a private copy of stdout; fd 1 then points at stderr, so nothing
    # that torch or a library prints can corrupt the protocol.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    WORKER_CHANNELS.append(proto.fileno())
    os.dup2(2, 1)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)

    def send(obj):
        proto.write(json.dumps(obj, allow_nan=False, default=str) + "\n")
        proto.flush()

    become_subreaper()
    t0 = time.monotonic()
    import torch  # noqa: E402  (once per worker, never per job)

    # Candidates build and load through torch.utils.cpp_extension, which brings setuptools: that
    # part (about 0.35 s a child) is imported here, once. Not cpp_extension itself: importing it
    # asks torch.cuda.is_available(), and a CUDA runtime started here is unusable in the children.
    try:
        import setuptools.command.build_ext  # noqa: F401
    except Exception:  # a child that needs it reports the error in its own job
        pass
    h = Harness(torch)
    send({
        "event": "ready",
        "protocol": PROTOCOL_VERSION,
        "pid": os.getpid(),
        "platform": args.platform,
        "torch": torch.__version__,
        "timing": TIMING_METHOD,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "python": sys.version.split()[0],
        "import_s": time.monotonic() - t0,
        "isolation": isolation_description(),
    })
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            job = json.loads(line)
        except ValueError as exc:
            send(rejection(None, "bad job line: {}".format(exc)))
            continue
        try:
            job = read_job(job)
        except JobError as exc:
            send(rejection(job, str(exc)))
            continue
        if job["op"] == "shutdown":
            break
        try:
            send(run_job(job, torch, h))
        except Exception as exc:  # never leave a job unanswered
            send(rejection(job, "worker: {}".format(exc)))


if __name__ == "__main__":
    main()
