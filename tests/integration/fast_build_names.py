#!/usr/bin/env python3
"""Temporary file names of kbrl_fast_build.py do not collide between sandboxed workers.

Every sandboxed worker runs in a PID namespace of its own (bubblewrap --unshare-pid), where
process ids start again from 1: two workers writing the same cache entry at once had the same
process id, so names made from it alone collided and one build deleted the other's files. Here
two processes in fresh PID namespaces show that they do get the same process id, and different
temporary names.

usage: fast_build_names.py   (exit 0 when both checks pass, 1 when one fails, 77 without bwrap)
"""
import os
import shutil
import subprocess
import sys

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "libkbrl", "worker")


def main():
    if shutil.which("bwrap") is None:
        print("fast_build_names: no bwrap here, nothing checked")
        return 77
    worker = os.path.realpath(WORKER)
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import kbrl_fast_build; "
            "print(os.getpid(), kbrl_fast_build.temporary_name('/cache/light/key'))")
    outputs = []
    for _ in range(2):
        run = subprocess.run(["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid",
                              "--die-with-parent", sys.executable, "-c", code, worker],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
        if run.returncode != 0:
            print("fast_build_names: the sandboxed process failed:", run.stderr)
            return 1
        pid, name = run.stdout.split()
        outputs.append((pid, name))
    (pid_a, name_a), (pid_b, name_b) = outputs
    ok = True
    for what, good in (("both processes have the same pid in their namespaces ({}, {})".format(pid_a, pid_b),
                        pid_a == pid_b),
                       ("their temporary names differ ({}, {})".format(name_a, name_b), name_a != name_b),
                       ("the names are beside the entry", name_a.startswith("/cache/light/key.tmp-"))):
        print("{}: {}".format("ok" if good else "FAILED", what))
        ok &= good
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
