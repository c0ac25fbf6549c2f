#!/usr/bin/env python3
"""Policies of kbrl_fast_build.py's compile accelerations.

After a CUDA source fails to compile with the minimal tier's light headers
(kbrl_fast_build.py), the types tier is tried only where a fuller tier's declarations could mend
the errors: a name not found, an overload not matched, a type left incomplete, and for errors that
name what was not found, only where a header beyond the minimal tier mentions that name at all.
Checked here on the names worked out from the installed torch's headers (header_names_beyond)
and on compiler messages of both front ends' wording (EDG in cudafe++ and cicc, GCC in the host
compile). Whichever attempt comes next, the full headers' build has the last word; this decides
only how much a failing candidate costs.

A binding file compiled beside nvcc's passes waits for a PCH that another compile is building
(the lock's holder), and stops waiting when its attempt is over (cancel) or after a limit. On a
busy evaluator (binding_early off) it starts only once nvcc's front ends have passed, and not at
all when they fail.

Which of a binding file's leading #include lines its precompiled header holds (leading_headers):
angle-bracket includes after blank and // comment lines only, each once, up to the last of torch's
headers, the first one of torch's; none where anything else comes first.

usage: fast_build_policies.py WORK_DIR   (exit status 0 when every check passed, 1 when one failed,
77 (CTest's skip code, tests/integration/CMakeLists.txt) when this torch builds no CUDA sources;
needs g++)
"""
import fcntl
import os
import shutil
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "libkbrl", "worker"))

import torch  # noqa: E402

import kbrl_fast_build  # noqa: E402

FAILED = []
SKIPPED = 77  # nothing checked: CTest reports the test as skipped, not passed


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        FAILED.append(what)


# (compiler output, whether a fuller tier might compile the source)
MESSAGES = [
    ('k.cu(12): error: identifier "undefined_function_of_the_candidate" is undefined\n', False),
    ('k.cu(41): error: identifier "negative_slope_" is undefined\n', False),
    ('k.cu(3): error: namespace "at" has no member "flatten"\n', True),
    ('k.cu(3): error: namespace "std" has no member "cout"\n', True),
    ('k.cu(7): error: identifier "py" is undefined\n', True),
    ('k.cu(40): error: too many arguments in function call\n', False),
    ('k.cu(66): error: too few arguments in function call\n', False),
    ('k.cu(15): error #167-D: argument of type "const float *" is incompatible with parameter of type "float"\n', False),
    ('k.cu(69): error: a pointer to a bound function may only be used to call the function\n', False),
    ('k.cu(46): error: expected a ";"\n1 error detected in the compilation of "k.cu".\n', False),
    ('k.cu(38): error: no instance of overloaded function "__shfl_xor_sync" matches the argument list\n', False),
    ('k.cu(77): error: no instance of function template "my_kernel<T>" matches the argument list\n', False),
    ('k.cu(119): error: no instance of overloaded function "std::min" matches the argument list\n', True),
    ('k.cu(9): error: no operator "<<" matches these operands\n', True),
    ('k.cu(9): error: incomplete type "at::cuda::CUDAStream" is not allowed\n', True),
    # one mendable error among others is enough
    ('k.cu(55): error: expected a ")"\nk.cu(57): error: namespace "torch" has no member "sum"\n', True),
    ("k.cudafe1.cpp:12:3: error: \u2018frobnicate_x\u2019 was not declared in this scope\n", False),
    ("k.cudafe1.cpp:12:3: error: 'cout' is not a member of 'std'\n", True),
    ("k.cudafe1.cpp:12:3: error: expected ';' before '}' token\n", False),
    # no error line to judge by (a crash, a ptxas message): try the next tier
    ("Segmentation fault (core dumped)\n", True),
    ("ptxas error   : Entry function uses too much shared data\n", True),
]


def check_pch_wait(work):
    path = os.path.join(work, "pch.lock")
    holder = open(path, "a")
    fcntl.flock(holder, fcntl.LOCK_EX)  # another compile building the PCH
    threading.Timer(0.6, holder.close).start()  # ... lets go when it is done
    with open(path, "a") as lock:
        check(not kbrl_fast_build.try_lock(lock), "the lock is held")
        start = time.monotonic()
        got = kbrl_fast_build.wait_for_lock(lock, threading.Event())
        check(got and 0.5 < time.monotonic() - start < 5, "the waiter takes the lock when its holder lets go")
    holder = open(path, "a")
    fcntl.flock(holder, fcntl.LOCK_EX)
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with open(path, "a") as lock:
        start = time.monotonic()
        check(not kbrl_fast_build.wait_for_lock(lock, cancel) and time.monotonic() - start < 5,
              "a cancelled wait ends without the lock")
        check(not kbrl_fast_build.wait_for_lock(lock, threading.Event(), limit=0.3), "so does one past its limit")
    holder.close()


class NoPchBuild:
    """What SideBuild asks of its FastBuild, with no PCH and no light binding header."""

    def __init__(self):
        self.pch = False
        self.in_tier = ("minimal", "")
        self.binding_light_built = False
        self.events = []

    def light_binding_cpath(self, build_dir, cancel=None):
        return None

    def note(self, what, event):
        self.events.append((what, event))


def check_binding_gate(work):
    """The binding file's compile (SideBuild) starts only once its gate is open, and not at all
    when the passes fail first; nvcc's passes open the gate once both front ends have passed."""
    build = os.path.join(work, "gate")
    os.makedirs(build, exist_ok=True)
    with open(os.path.join(build, "build.ninja"), "w") as f:
        f.write("rule touch\n  command = touch $out\nbuild main.o: touch\n")
    main_o = os.path.join(build, "main.o")

    gate = threading.Event()
    side = kbrl_fast_build.SideBuild(NoPchBuild(), build, ["main.o"], gate)
    time.sleep(0.5)
    check(not os.path.exists(main_o), "a closed gate holds the binding compile back")
    side.finish(stop=True)  # the front ends failed
    check(not os.path.exists(main_o) and side.proc is None, "failed passes: the binding compile never starts")

    gate = threading.Event()
    side = kbrl_fast_build.SideBuild(NoPchBuild(), build, ["main.o"], gate)
    gate.set()  # the front ends passed
    side.finish(stop=False)
    check(os.path.exists(main_o), "an open gate lets it run")
    os.remove(main_o)
    side = kbrl_fast_build.SideBuild(NoPchBuild(), build, ["main.o"], threading.Event())
    side.finish(stop=False)  # passes done without the callback: finish opens the gate
    check(os.path.exists(main_o), "passes that succeeded open the gate at the latest when they end")

    for host_ok, device_ok in ((True, True), (True, False), (False, True)):
        keep = os.path.join(work, "keep-{}-{}".format(host_ok, device_ok))
        os.makedirs(keep, exist_ok=True)
        step = lambda ok: [["true"] if ok else ["false"]]  # noqa: E731
        plan = kbrl_fast_build.NvccPlan(build, "cuda.o", dict(os.environ), step(host_ok), step(device_ok),
                                        [["touch", os.path.join(build, "cuda.o")]], keep, [])
        opened = threading.Event()
        try:
            plan.run(front_ends_passed=opened.set)
            raised = False
        except kbrl_fast_build.PassFailed:
            raised = True
        want = host_ok and device_ok
        check(opened.is_set() == want and raised != want,
              "host pass {}, device pass {}: gate {}".format(host_ok, device_ok, "opened" if opened.is_set() else "closed"))


LEADING = [  # (main.cpp's start, the headers its PCH holds)
    ("#include <torch/extension.h>\n\n#include <torch/extension.h>\n#include <cmath>\nint f();\n", ["torch/extension.h"]),
    ("// a kernel\n#include <ATen/core/Tensor.h>\n#include <ATen/ops/empty.h>\n\n#include <ATen/Parallel.h>\n"
     "#include <torch/csrc/utils/pybind.h>\n#include <torch/csrc/Exceptions.h>\n#include <cmath>\n#include <vector>\n",
     ["ATen/core/Tensor.h", "ATen/ops/empty.h", "ATen/Parallel.h", "torch/csrc/utils/pybind.h", "torch/csrc/Exceptions.h"]),
    ("#include <ATen/core/Tensor.h>\n#include <cmath>\n#include <ATen/Parallel.h>\n", ["ATen/core/Tensor.h", "cmath", "ATen/Parallel.h"]),
    ("#include <ATen/core/Tensor.h>\n#define N 4\n#include <ATen/Parallel.h>\n", ["ATen/core/Tensor.h"]),
    ("#include <vector>\n#include <torch/extension.h>\n", []),  # not torch's first: no PCH stands in for <vector>
    ("#include <cmath>\nint f();\n", []),
    ('#include "torch/extension.h"\n', []),
    ("#include <torch/extension.h> // a comment\n", []),
    ("// a comment that goes on \\\n#include <torch/extension.h>\n", []),
    ("/* a comment */\n#include <torch/extension.h>\n", []),
    ("int x;\n#include <torch/extension.h>\n", []),
]


def check_leading_headers(work):
    fast = kbrl_fast_build.FastBuild(torch, {"pch": True, "light_headers": False, "parallel_passes": False,
                                             "binding_early": True, "dir": work}, work)
    main_cpp = os.path.join(work, "main.cpp")
    for text, want in LEADING:
        with open(main_cpp, "w") as f:
            f.write(text)
        got = fast.leading_headers(main_cpp)
        check(got == want, "leading headers of {!r}: {}".format(text[:60], got))


def main():
    work = sys.argv[1] if len(sys.argv) > 1 else "light_tier_errors"
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check_leading_headers(work)  # any torch: C++ binding files are built everywhere
    # A compile job's fast_build settings: light headers only.
    settings = {"pch": False, "light_headers": True, "parallel_passes": False, "binding_early": True, "dir": work}
    fast = kbrl_fast_build.FastBuild(torch, settings, work)
    if not fast.light:
        print("skipped: this torch builds no CUDA sources")
        return 1 if FAILED else SKIPPED
    tiers = dict(fast.light_tiers())
    check("minimal" in tiers, "the minimal tier is written")
    names = fast.names_beyond_minimal()
    check(names is not None and len(names) > 1000, "names beyond the minimal tier: {}".format(len(names or ())))
    names = names or frozenset()
    for name in ("flatten", "matmul", "cout", "gil_scoped_release", "min"):
        check(name in names, "{} is declared beyond the minimal tier".format(name))
    for name in ("__shfl_xor_sync", "threadIdx", "undefined_function_of_the_candidate"):
        check(name not in names, "{} is not".format(name))
    check(fast.names_beyond_minimal() is names and os.path.exists(os.path.join(fast.light_base, "beyond-minimal-names.txt")),
          "worked out once, kept with the shadow headers")
    again = kbrl_fast_build.FastBuild(torch, settings, work)
    again.light_tiers()
    check(again.names_beyond_minimal() == names, "a later compile reads the same names")
    for output, want in MESSAGES:
        got = kbrl_fast_build.may_lack_declarations(output, fast.names_beyond_minimal)
        check(got == want, "{} -> {}".format(output.strip().splitlines()[-1][:90], "try types" if got else "skip types"))
    check(kbrl_fast_build.may_lack_declarations('k.cu(12): error: identifier "kBlock" is undefined\n', lambda: None),
          "without the names, a name not found may be a missing declaration")
    check_pch_wait(work)
    check_binding_gate(work)
    print("{} failed".format(len(FAILED)) if FAILED else "all passed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
