#!/usr/bin/env python3
"""The worker's output check (kbrl_worker.compare) against a plain whole-tensor float64 version
of the same rules, on random outputs of every floating dtype judged at every precision (fp32,
fp16, bf16: each has its own relative L2 bound): identical, rounded differently,
off by more than the tolerances, constant, zero, with NaN and infinities where the reference has
them or not. The worker works chunk by chunk (small chunks here, so that every case spans
several) and takes shortcuts (identical outputs, finite outputs read once at the end); the
verdicts, the reasons and the largest errors must be the plain version's, and neither tensor may
change.

usage: worker_compare.py   (exit status 0 when every case agreed)
"""
import math
import os
import random
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libkbrl", "worker"))

import torch  # noqa: E402

import kbrl_worker  # noqa: E402


def plain(out, ref, precision, atol, rtol, noise):
    """The rules of compare, written out on whole tensors: (reason or None, max_abs, max_rel)."""
    o = out.reshape(-1).double()
    r = ref.reshape(-1).double()
    if not torch.equal(torch.isfinite(o), torch.isfinite(r)):
        return "output has NaN/Inf where the reference has finite values (or the reverse)", None, None
    fin = torch.isfinite(r)
    special_ok = (o == r) | (torch.isnan(o) & torch.isnan(r)) | fin
    if not bool(special_ok.all()):
        return "non-finite values differ from the reference", None, None
    o, r = o[fin], r[fin]
    if o.numel() == 0:
        return None, 0.0, 0.0
    noise_max, noise_norm = noise if noise is not None else (0.0, 0.0)
    err = (o - r).abs()
    max_abs = float(err.max())
    max_rel = float((err / r.abs().clamp_min(1e-12)).max())
    if not bool((err <= atol + kbrl_worker.SENSITIVITY_FACTOR * noise_max + rtol * r.abs()).all()):
        return "values differ", max_abs, max_rel
    ref_norm = float(r.norm())
    if ref_norm > 0:
        limit = max(kbrl_worker.NORM_TOLERANCE[precision], kbrl_worker.SENSITIVITY_FACTOR * noise_norm / ref_norm)
        if float(err.norm()) / ref_norm > limit:
            return "output is off by", max_abs, max_rel
    if o.numel() > 1 and float(r.max()) != float(r.min()) and float(o.max()) == float(o.min()):
        return "output is constant while the reference varies", max_abs, max_rel
    return None, max_abs, max_rel


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    return a == b or abs(a - b) <= 1e-9 * max(abs(a), abs(b))


def case(rng, n, dtype):
    ref = (torch.randn(n, dtype=torch.float64, generator=rng) * random.choice([1e-6, 1.0, 1e3])).to(dtype)
    kind = random.choice(["same", "rounded", "off", "constant", "zeros", "one_off",
                          "special_same", "special_moved", "special_rounded"])
    out = ref.clone()
    if kind == "rounded":
        out = (ref.double() * (1 + 1e-5 * torch.randn(n, dtype=torch.float64, generator=rng))).to(dtype)
    elif kind == "off":
        out = (ref.double() + 1e-3 * torch.randn(n, dtype=torch.float64, generator=rng)).to(dtype)
    elif kind == "constant" and n:
        out = torch.full_like(ref, 0.5)
    elif kind == "zeros":
        out = torch.zeros_like(ref)
    elif kind == "one_off" and n:
        out[n // 2] += 1
    elif kind.startswith("special") and n:
        where = torch.randint(0, n, (max(1, n // 50),), generator=rng)
        ref[where] = random.choice([math.nan, math.inf, -math.inf])
        out = ref.clone()
        if kind == "special_moved":
            out[where[:1]] = 1.0
        elif kind == "special_rounded":
            out = (out.double() * (1 + 1e-6 * torch.randn(n, dtype=torch.float64, generator=rng))).to(dtype)
    return kind, out, ref


def main():
    random.seed(5)
    rng = torch.Generator().manual_seed(5)
    h = kbrl_worker.Harness(torch)
    kbrl_worker.COMPARE_CHUNK = 1000
    failed = 0
    cases = 0
    for _ in range(3000):
        n = random.choice([0, 1, 7, 999, 1000, 1001, 3500])
        dtype = random.choice([torch.float32, torch.float64, torch.float16, torch.bfloat16])
        kind, out, ref = case(rng, n, dtype)
        noise = random.choice([None, (1e-5, 1e-4)])
        tol = random.choice([1e-4, 1e-2])
        precision = random.choice(["fp32", "fp16", "bf16"])  # each has its own relative L2 bound
        out_before, ref_before = out.clone(), ref.clone()
        got = kbrl_worker.compare(h, out, ref, precision, tol, tol, noise)
        want = plain(out, ref, precision, tol, tol, noise)
        agree = (got[0] is None) == (want[0] is None) and (want[0] is None or got[0].startswith(want[0])) \
            and close(got[1], want[1]) and close(got[2], want[2])
        untouched = kbrl_worker.same_tensor(h, out, out_before) and kbrl_worker.same_tensor(h, ref, ref_before)
        cases += 1
        if not (agree and untouched):
            failed += 1
            print("FAIL {} n={} {} {}: worker {} plain {}{}".format(
                kind, n, dtype, precision, got, want, "" if untouched else " (a tensor changed)"))
    for flip in (False, True):  # integer outputs are compared exactly
        r = torch.randint(0, 5, (2500,), generator=rng)
        o = r.clone()
        if flip:
            o[1700] += 1
        got = kbrl_worker.compare(h, o, r, "fp32", 1e-4, 1e-4)
        cases += 1
        if (got[0] is not None) != flip:
            failed += 1
            print("FAIL integer outputs, one changed: {}: {}".format(flip, got))
    print("{} of {} cases agree".format(cases - failed, cases))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
