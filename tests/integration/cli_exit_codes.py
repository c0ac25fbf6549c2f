#!/usr/bin/env python3
"""The command lines of kbrl-eval, kbrl-evald and kbrl-train, run as a user runs them: --version and every
command's --help answer with exit code 0 (and each kbrl-eval command's help lists every evaluator
setting of docs/evaluator.md's table), usage errors (an unknown flag or command, a missing
required option, a bad value) give 2, a missing or malformed input file gives 1, and an interrupt
gives 130: SIGINT during `kbrl-eval generations` (what finished is written), and SIGINT during
`kbrl-train` training (the step in flight is saved, the run is marked stopped). kbrl-evald drains on
SIGTERM and exits 0, or 130 when a second signal cuts the drain short. README.md,
"Exit codes", documents them.

    cli_exit_codes.py --eval <kbrl-eval> [--evald <kbrl-evald>] [--train <kbrl-train>] --source <repo> --work <scratch dir>
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def run(cmd, timeout=120, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def expect(cmd, code, what, out=None, err=None, env=None):
    r = run(cmd, env=env)
    ok = r.returncode == code
    if ok and out is not None:
        ok = out in r.stdout
    if ok and err is not None:
        ok = err in r.stderr
    if not ok:
        print(f"  $ {' '.join(cmd)}\n  exit {r.returncode}\n  stdout: {r.stdout[-1500:]!r}\n  stderr: {r.stderr[-1500:]!r}")
    check(ok, f"{what}: exit {code}")
    return r


def project_version(source):
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        return re.search(r"project\(kbrl VERSION ([0-9.]+)", f.read()).group(1)


def documented_flags(source):
    """The flags in docs/evaluator.md's table of evaluator settings (generated from the schema; a
    unit test keeps it in step)."""
    flags = []
    with open(os.path.join(source, "docs/evaluator.md")) as f:
        for line in f:
            if line.startswith("| `--"):
                flags += re.findall(r"`(--[a-z0-9-]+)", line.split("|")[1])
    return flags


def check_eval(args):
    ev = args.eval
    version = project_version(args.source)
    expect([ev, "--version"], 0, "kbrl-eval --version", out=f"kbrl-eval {version}")
    r = expect([ev, "--help"], 0, "kbrl-eval --help")
    check(all(c in r.stdout for c in ["generations", "kernel", "model"]), "kbrl-eval --help names its commands")
    flags = documented_flags(args.source)
    check(len(flags) > 30, f"docs/evaluator.md lists the evaluator settings' flags ({len(flags)})")
    for command, own in [("generations", "--problems"), ("kernel", "--kernel"), ("model", "--samples")]:
        r = expect([ev, command, "--help"], 0, f"kbrl-eval {command} --help", out=own)
        missing = [f for f in flags if not re.search(re.escape(f) + r"\b", r.stdout)]
        check(not missing, f"kbrl-eval {command} --help lists every evaluator setting (missing: {missing})")

    problems = os.path.join(args.source, "examples/problems")
    run_dir = os.path.join(args.work, "eval_run")
    os.makedirs(run_dir)
    solution = os.path.join(args.source, "examples/solutions/level_1_problem_1_sample_0_kernel.py")
    for s in range(3):
        shutil.copy(solution, os.path.join(run_dir, f"level_1_problem_1_sample_{s}_kernel.py"))
    work_dir = os.path.join(args.work, "eval_work")
    base = [ev, "generations", "--problems", problems, "--level", "1", "--run", run_dir, "--work-dir", work_dir]

    expect([ev], 2, "kbrl-eval without a command")
    expect([ev, "evaluate"], 2, "kbrl-eval with an unknown command")
    expect(base + ["--no-such-flag"], 2, "an unknown flag", err="--no-such-flag")
    # Without --problems: $KERNELBENCH_ROOT, else a checkout in the working directory or beside the run.
    no_root = {k: v for k, v in os.environ.items() if k != "KERNELBENCH_ROOT"}
    r = expect([ev, "generations", "--level", "1", "--run", run_dir], 2, "generations without --problems and no "
               "KernelBench to be found", err="--problems", env=no_root)
    check("KERNELBENCH_ROOT is not set" in r.stderr and os.path.join(args.work, "KernelBench") in r.stderr,
          "the message says where it looked")
    not_kb = os.path.join(args.work, "not_kernelbench")
    os.makedirs(not_kb)
    expect([ev, "generations", "--level", "1", "--run", run_dir], 2, "KERNELBENCH_ROOT naming a folder that is not a "
           "checkout", err="is not a KernelBench checkout", env=dict(no_root, KERNELBENCH_ROOT=not_kb))
    for where in ["root", "beside"]:
        kb = os.path.join(args.work, where, "KernelBench")
        os.makedirs(os.path.join(kb, "KernelBench", "level1") if where == "root" else os.path.join(kb, "level1"))
        shutil.copy(os.path.join(problems, "1_ScaledResidualAdd.py"),
                    os.path.join(kb, "KernelBench", "level1") if where == "root" else os.path.join(kb, "level1"))
        no_candidates = os.path.join(args.work, where, "run")
        os.makedirs(no_candidates)
        env = dict(no_root, KERNELBENCH_ROOT=kb) if where == "root" else no_root
        r = expect([ev, "generations", "--level", "1", "--run", no_candidates], 1,
                   f"generations without --problems, KernelBench found {'by KERNELBENCH_ROOT' if where == 'root' else 'beside the run'}",
                   err="no level_1_problem_P_sample_S_kernel.py files", env=env)
        check(f"problems from {kb}" in r.stderr, f"it says where the problems came from ({where})")
    expect([ev, "kernel", "--problem", os.path.join(problems, "1_ScaledResidualAdd.py")], 2,
           "kernel without --kernel", err="--kernel")
    expect(base[:5] + ["x"] + base[6:], 2, "a level that is not a number")
    expect([ev, "model", "--problems", problems, "--level", "1", "--run", run_dir], 2,
           "model with neither --model nor --endpoint", err="give --model (a checkpoint) or --endpoint")
    expect([ev, "model", "--model", problems, "--endpoint", "http://127.0.0.1:9/v1", "--problems", problems, "--level",
            "1", "--run", run_dir], 2, "model with both --model and --endpoint", err="excludes")
    expect(base + ["--trials", "0"], 2, "--trials 0", err="--trials: 0 is below 1")
    expect(base + ["--sandbox", "maybe"], 2, "--sandbox maybe", err="not one of: on, off")
    expect(base + ["--language", "fortran"], 2, "--language fortran")

    missing = os.path.join(args.work, "no_such_file.py")
    expect([ev, "kernel", "--problem", missing, "--kernel", solution], 1, "kernel with a missing problem file",
           err="no_such_file.py")
    expect([ev, "generations", "--problems", os.path.join(args.work, "no_such_dir"), "--level", "1", "--run", run_dir],
           1, "generations with a missing problems folder", err="no_such_dir")
    empty = os.path.join(args.work, "empty_run")
    os.makedirs(empty)
    expect([ev, "generations", "--problems", problems, "--level", "1", "--run", empty], 1,
           "generations on a folder without candidates", err="no level_1_problem_P_sample_S_kernel.py files")
    expect(base + ["--static-config", os.path.join(args.work, "no_such.json")], 1,
           "a missing --static-config file", err="no_such.json")
    bad = os.path.join(args.work, "bad_static.json")
    with open(bad, "w") as f:
        f.write('{"severity": {"side_stream": "loud"}}')
    expect(base + ["--static-config", bad], 1, "a malformed --static-config file", err="bad_static.json")

    # A run folder that cannot be written (a read-only mount, in a mount namespace of its own):
    # refused before anything is evaluated, naming the file and the reason.
    if run(["unshare", "-m", "true"]).returncode == 0:
        read_only = os.path.join(args.work, "read_only_run")
        shutil.copytree(run_dir, read_only)
        remount = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
        cmd = [ev, "generations", "--problems", problems, "--level", "1", "--run", read_only, "--work-dir", work_dir]
        expect(["unshare", "-m", "sh", "-c", remount, "sh", read_only] + cmd, 1, "a read-only run folder",
               err="eval_results.jsonl for appending: Read-only file system")
        check(not os.path.exists(os.path.join(read_only, "eval_results.json")), "nothing is written to it")
    else:
        print("skip: no mount namespace (unshare -m) for the read-only run folder")

    # SIGINT while the evaluator works: it stops, writes what finished, and exits 130.
    proc = subprocess.Popen(base, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    started = False
    deadline = time.time() + 60
    while time.time() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        if "to go" in line:  # the candidates are counted; the workers start next
            started = True
            break
    check(started, "kbrl-eval generations starts evaluating")
    check(proc.poll() is None, "kbrl-eval generations is still running when it is interrupted")
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    if proc.returncode != 130:
        print(f"  stdout: {out[-1500:]!r}\n  stderr: {err[-1500:]!r}")
    check(proc.returncode == 130, f"SIGINT during kbrl-eval generations: exit 130 (got {proc.returncode})")
    check("interrupted" in err and "run again to resume" in err, "the interrupted run says how to resume")
    check(os.path.isfile(os.path.join(run_dir, "eval_results.json")) and
          os.path.isfile(os.path.join(run_dir, "eval_summary.json")),
          "the interrupted run writes its result files")


def check_train(args):
    tr = args.train
    version = project_version(args.source)
    expect([tr, "--version"], 0, "kbrl-train --version", out=f"kbrl-train {version}")
    expect([tr, "--help"], 0, "kbrl-train --help", out="Exit codes")
    for command, own in [("train", "KEY=VALUE"), ("runs", "dir"), ("status", "run"), ("keys", "keys")]:
        expect([tr, command, "--help"], 0, f"kbrl-train {command} --help", out=own)
    expect([tr, "keys"], 0, "kbrl-train keys", out="evaluator.timing_trials")

    config = os.path.join(args.source, "examples/configs/cpu_demo.yaml")
    expect([tr], 2, "kbrl-train without arguments")
    expect([tr, "--no-such-flag"], 2, "kbrl-train with an unknown flag")
    expect([tr, "runs"], 2, "kbrl-train runs without its folder")
    expect([tr, "status"], 2, "kbrl-train status without its run")
    expect([tr, "dataset.batch_size=2"], 2, "kbrl-train without a config file or log_path", err="log_path")
    expect([tr, config, "log_path=x", "dataset.batch_sise=2"], 2, "kbrl-train with an unknown key=value",
           err="did you mean 'dataset.batch_size'")
    expect([tr, config, "log_path=x", "evaluator.timing_trials=0"], 2, "kbrl-train with a bad evaluator value",
           err="evaluator.timing_trials")
    expect([tr, config, "other.yaml"], 2, "kbrl-train with two config files")
    no_root = {k: v for k, v in os.environ.items() if k != "KERNELBENCH_ROOT"}
    lost = os.path.join(args.work, "train_no_problems", "run")
    r = expect([tr, config, f"log_path={lost}", "dataset.problems="], 1,
               "kbrl-train without dataset.problems and no KernelBench to be found", err="dataset.problems", env=no_root)
    check(os.path.join(args.work, "train_no_problems", "KernelBench") in r.stderr and not os.path.exists(lost),
          "it says where it looked, before the run folder is made")

    expect([tr, os.path.join(args.work, "no_such.yaml")], 1, "kbrl-train with a missing config file", err="no_such.yaml")
    bad = os.path.join(args.work, "bad.yaml")
    with open(bad, "w") as f:
        f.write("log_path: runs/x\nevaluator:\n  timing_trails: 3\n")
    expect([tr, bad], 1, "kbrl-train with a config file of an unknown key", err="bad.yaml:3")
    expect([tr, config, "log_path=x", f"evaluator.static_check_config={os.path.join(args.work, 'no_such.json')}"], 1,
           "kbrl-train with a missing static-check config file", err="no_such.json")
    expect([tr, "status", os.path.join(args.work, "no_such_run")], 1, "kbrl-train status of a missing run")

    # SIGINT during training: the step in flight finishes and is saved, the run is marked stopped,
    # and the exit code says it did not finish.
    model = os.path.join(args.work, "model")
    subprocess.run([args.python, os.path.join(args.source, "scripts/make_demo_model.py"), model], check=True,
                   capture_output=True)
    log_path = os.path.join(args.work, "runs", "interrupted")
    proc = subprocess.Popen([tr, config, f"model.path={model}", f"log_path={log_path}", "dataset.max_steps=50"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=args.source)
    metrics = os.path.join(log_path, "metrics.jsonl")
    seen = ""
    for line in proc.stderr:  # the first step's progress: it is in flight
        seen += line
        if line.startswith("step 1/"):
            break
    check(proc.poll() is None, "kbrl-train is still training when it is interrupted")
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    err = seen + err
    if proc.returncode != 130:
        print(f"  stderr: {err[-3000:]!r}")
    check(proc.returncode == 130, f"SIGINT during kbrl-train: exit 130 (got {proc.returncode})")
    check("stopped" in err, "the stopped run says so")
    with open(metrics) as f:
        steps = sum(1 for line in f if line.strip())
    with open(os.path.join(log_path, "checkpoints.jsonl")) as f:
        saved = sum(1 for line in f if line.strip())
    check(0 < steps < 50 and saved == steps, f"every finished step is saved ({steps} steps, {saved} checkpoints)")
    status = run([tr, "status", log_path])
    check(status.returncode == 0 and "stopped" in status.stdout, f"kbrl-train status says stopped: {status.stdout!r}")


def start_evald(evald, work, name, extra=()):
    port_file = os.path.join(work, f"{name}.port")
    proc = subprocess.Popen([evald, "--listen", "127.0.0.1:0", "--port-file", port_file, "--work-dir",
                             os.path.join(work, "evald_work"), "--journal", os.path.join(work, f"{name}_journal"),
                             "--compile-workers", "1", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline and not os.path.exists(port_file) and proc.poll() is None:
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())


def check_evald(args):
    ev = args.evald
    version = project_version(args.source)
    expect([ev, "--version"], 0, "kbrl-evald --version", out=f"kbrl-evald {version}")
    r = expect([ev, "--help"], 0, "kbrl-evald --help", out="--listen")
    flags = documented_flags(args.source) + ["--port-file", "--token-file", "--tls-cert", "--tls-key", "--max-queue",
                                              "--max-body-bytes", "--max-batch", "--journal"]
    missing = [f for f in flags if not re.search(re.escape(f) + r"\b", r.stdout)]
    check(not missing, f"kbrl-evald --help lists every evaluator setting and its own flags (missing: {missing})")
    expect([ev, "--no-such-flag"], 2, "kbrl-evald with an unknown flag", err="--no-such-flag")
    expect([ev, "--listen", "nohost"], 2, "kbrl-evald --listen without a port", err="--listen")
    expect([ev, "--listen", "127.0.0.1:70000"], 2, "kbrl-evald --listen with a bad port", err="--listen")
    expect([ev, "--trials", "0"], 2, "kbrl-evald --trials 0", err="--trials: 0 is below 1")
    expect([ev, "--tls-cert", "x.pem"], 2, "kbrl-evald --tls-cert without --tls-key", err="--tls-key")
    expect([ev, "--token-file", os.path.join(args.work, "no_such_token")], 1, "kbrl-evald with a missing token file",
           err="no_such_token")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    expect([ev, "--listen", f"127.0.0.1:{port}", "--work-dir", os.path.join(args.work, "evald_work")], 1,
           "kbrl-evald on a port in use", err=str(port))
    taken.close()

    # SIGTERM on an idle server: it drains at once and exits 0.
    proc, port = start_evald(ev, args.work, "idle")
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    check(proc.returncode == 0 and "drained" in err, f"SIGTERM on an idle kbrl-evald: exit 0 (got {proc.returncode})")

    # A second signal while accepted work is still pending stops the drain: exit 130.
    proc, port = start_evald(ev, args.work, "busy")
    with open(os.path.join(args.source, "examples/problems/1_ScaledResidualAdd.py")) as f:
        source = f.read()
    with open(os.path.join(args.source, "examples/solutions/level_1_problem_1_sample_0_kernel.py")) as f:
        candidate = f.read()
    body = json.dumps({"requests": [{"request_id": "pending", "problem": {"id": "p1", "source": source},
                                     "candidate_source": candidate, "language": "cpp"}], "stream": False})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", "/v1/evaluations", body=body, headers={"Content-Type": "application/json"})
    accepted = conn.getresponse().status
    conn.close()
    check(accepted == 202, f"kbrl-evald accepts a batch (got {accepted})")
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    check(proc.poll() is None, "kbrl-evald keeps draining while accepted work is pending")
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    check(proc.returncode == 130, f"a second signal during the drain: exit 130 (got {proc.returncode}; {err[-300:]!r})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", required=True)
    ap.add_argument("--evald", help="kbrl-evald")
    ap.add_argument("--train", help="kbrl-train (built with libtorch)")
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    check_eval(args)
    if args.evald:
        check_evald(args)
    if args.train:
        check_train(args)
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
