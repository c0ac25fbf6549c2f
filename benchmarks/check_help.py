#!/usr/bin/env python3
"""Checks that every benchmark program answers --help: exit status 0 and a usage on stdout.

The scripts are found by listing benchmarks/*/: every shell script, and every Python file that
runs as a program (it has a __main__ block; modules such as kb_import.py are left out). The C++
programs are named on the command line by CMake, which lists the executable targets under
benchmarks/. So a new benchmark is checked without being added anywhere, and one that runs, or
fails, when asked for --help fails this check. The CTest test benchmarks:help runs it.

usage: check_help.py [--python PY] [PROGRAM ...]
"""
import argparse
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def scripts():
    found = []
    for path in sorted(HERE.glob("*/*")):
        if path.suffix == ".sh":
            found.append(path)
        elif path.suffix == ".py" and "if __name__ == \"__main__\":" in path.read_text(encoding="utf-8"):
            found.append(path)
    return found


def check(command, name, env, timeout):
    try:
        p = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "did not finish within {} s".format(timeout)
    except OSError as e:
        return "cannot run: {}".format(e)
    if p.returncode != 0:
        return "exit status {}:\n{}{}".format(p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    if "usage" not in p.stdout.lower():
        return "no usage on stdout (stdout: {!r}, stderr: {!r})".format(p.stdout[-500:], p.stderr[-500:])
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable, help="the interpreter for the Python scripts "
                        "(also given to the shell scripts as KBRL_PYTHON and PYTHON)")
    parser.add_argument("--timeout", type=float, default=120, help="seconds each program may take")
    parser.add_argument("programs", nargs="*", help="the C++ benchmark programs")
    args = parser.parse_args()
    env = dict(os.environ, KBRL_PYTHON=args.python, PYTHON=args.python)
    commands = []
    for path in scripts():
        runner = ["bash"] if path.suffix == ".sh" else [args.python]
        commands.append((str(path.relative_to(HERE.parent)), runner + [str(path), "--help"]))
    for program in args.programs:
        commands.append((Path(program).name, [program, "--help"]))
    if not any(name.endswith(".py") for name, _ in commands) or not any(name.endswith(".sh") for name, _ in commands):
        print("check_help.py: found no Python or no shell benchmark scripts under {}".format(HERE))
        return 1
    failed = 0
    for name, command in commands:
        error = check(command, name, env, args.timeout)
        print("{} {}{}".format("FAIL" if error else "ok  ", name, ": " + error if error else ""), flush=True)
        failed += error is not None
    print("{} of {} benchmark programs answer --help".format(len(commands) - failed, len(commands)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
