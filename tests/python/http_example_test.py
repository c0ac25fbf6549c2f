"""examples/python/http_reward.py and kbrl.RemoteEvaluator against a real kbrl-evald on loopback:
the example, run as a user runs it, scores a correct answer 1 and a wrong one stage2's partial
value; its written-out stage2 formula equals kbrl.compute_reward(..., "kbrl_stage2") on the server's
results; a wrong token is refused (HTTP 401, the example exits non-zero); RemoteEvaluator gets the
same verdicts through the same server, and so does the TRL example given {"endpoints": URL} as its
settings; SIGTERM ends the server with exit code 0.

    python http_example_test.py --source <checkout> --evald <kbrl-evald> --work <evaluator work dir>
        [--compile-cache <dir>] --scratch <dir>     (PYTHONPATH holds kbrl*.so)
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

import kbrl


def answer(source):
    return f"<think>A row per task.</think>\n<KERNEL>\n```python\n{source}```\n</KERNEL>"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--evald", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--compile-cache", default="")
    p.add_argument("--scratch", required=True)
    args = p.parse_args()
    os.makedirs(args.scratch, exist_ok=True)
    example = os.path.join(args.source, "examples", "python", "http_reward.py")
    sys.path.insert(0, os.path.dirname(example))
    import http_reward

    token_file = os.path.join(args.scratch, "token")
    with open(token_file, "w") as f:
        f.write("s3cret-token\n")
    port_file = os.path.join(args.scratch, "port")
    if os.path.exists(port_file):
        os.remove(port_file)
    journal = os.path.join(args.scratch, "journal")
    subprocess.run(["rm", "-rf", journal], check=True)
    log = open(os.path.join(args.scratch, "evald.log"), "w")
    server = subprocess.Popen(
        [args.evald, "--listen", "127.0.0.1:0", "--port-file", port_file, "--token-file", token_file,
         "--journal", journal, "--device", "cpu", "--timing-trials", "5", "--warmup", "1", "--work-dir", args.work]
        + (["--compile-cache-dir", args.compile_cache] if args.compile_cache else []),
        stdout=log, stderr=subprocess.STDOUT)
    failures = []
    try:
        deadline = time.monotonic() + 60
        while not os.path.exists(port_file) and server.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if not os.path.exists(port_file):
            raise SystemExit(f"kbrl-evald did not start (exit {server.poll()}); see {log.name}")
        with open(port_file) as f:
            url = f"http://127.0.0.1:{int(f.read().strip())}"

        solutions = os.path.join(args.source, "examples", "solutions")
        problems = os.path.join(args.source, "examples", "problems")
        cases = [("3_RowSumOfSquares.py", "level_1_problem_3_sample_0_kernel.py", "correct"),
                 ("2_GELUTanh.py", "level_1_problem_2_sample_1_kernel.py", "wrong")]
        answers = {}
        for problem, solution, kind in cases:
            path = os.path.join(args.scratch, f"{kind}.txt")
            with open(os.path.join(solutions, solution)) as f, open(path, "w") as out:
                answers[kind] = answer(f.read())
                out.write(answers[kind])
            t0 = time.monotonic()
            run = subprocess.run([sys.executable, example, "--url", url, "--problem", os.path.join(problems, problem),
                                  "--completion", path, "--language", "cpp", "--token-file", token_file],
                                 capture_output=True, text=True)
            print(f"http_reward.py on the {kind} answer: {time.monotonic() - t0:.1f} s: {run.stdout.strip()}")
            if run.returncode != 0:
                failures.append(f"http_reward.py failed on the {kind} answer:\n{run.stderr}")
                continue
            line = json.loads(run.stdout)
            ok = line["reward"] == 1.0 and line["correct"] if kind == "correct" else \
                0.3 <= line["reward"] < 1.0 and line["error_category"] == "correctness"
            if not ok:
                failures.append(f"the {kind} answer scored {line}")

        # The example's formula is kbrl's kbrl_stage2 preset, on the server's own results.
        requests = []
        for i, (problem, _, kind) in enumerate(cases):
            with open(os.path.join(problems, problem)) as f:
                requests.append({"request_id": f"formula-{i}", "problem": {"id": problem, "source": f.read()},
                                 "candidate_source": http_reward.kernel_of(answers[kind]), "language": "cpp"})
        results = http_reward.evaluate(url, requests, token="s3cret-token")
        if sorted(r["request_id"] for r in results) != ["formula-0", "formula-1"]:
            failures.append(f"the stream answered {[r['request_id'] for r in results]}")
        for r in results:
            kind = cases[int(r["request_id"].split("-")[1])][2]
            mine, kbrls = http_reward.kbrl_stage2_reward(r), kbrl.compute_reward(r, answers[kind], "kbrl_stage2")["total"]
            if abs(mine - kbrls) > 1e-12:
                failures.append(f"{kind}: the example's stage2 gives {mine}, kbrl's {kbrls}")

        bad = subprocess.run([sys.executable, example, "--url", url, "--problem", os.path.join(problems, cases[0][0]),
                              "--completion", os.path.join(args.scratch, "correct.txt"), "--language", "cpp"],
                             capture_output=True, text=True, env=dict(os.environ, KBRL_EVALD_TOKEN="wrong"))
        if bad.returncode == 0 or "401" not in bad.stderr:
            failures.append(f"a wrong token: exit {bad.returncode}, stderr {bad.stderr[-300:]!r}")

        # RemoteEvaluator through the same server: the verdicts LocalEvaluator's tests expect.
        t0 = time.monotonic()
        with kbrl.RemoteEvaluator([url], token="s3cret-token", language="cpp", timing_trials=5, warmup_runs=1) as remote:
            remote_results = remote.evaluate([{k: v for k, v in r.items() if k != "request_id"} for r in requests])
            stats, servers = remote.stats(), remote.servers()
        print(f"RemoteEvaluator: {len(remote_results)} results in {time.monotonic() - t0:.1f} s, servers {servers}")
        got = [(r["correctness"], r["error_category"]) for r in remote_results]
        if got != [(True, "none"), (False, "correctness")]:
            failures.append(f"RemoteEvaluator's verdicts: {got}")
        if stats["delivered"] != 2 or stats["results_by_server"].get(url) != 2:
            failures.append(f"RemoteEvaluator's stats: {stats}")
        # The TRL example on the fleet: settings with endpoints, no change to its code.
        os.environ.update(KBRL_EVALUATOR_SETTINGS=json.dumps({"endpoints": url, "timing_trials": 5, "warmup_runs": 1}),
                          KBRL_LANGUAGE="cpp", KBRL_REWARD="kbrl_stage2", KBRL_EVALD_TOKEN="s3cret-token")
        import trl_reward
        rewards = trl_reward.kernel_reward(prompts=["p", "p"], completions=[answers["correct"], answers["wrong"]],
                                           problem=[r["problem"] for r in requests])
        print(f"TRL example through kbrl-evald: {rewards}")
        if not isinstance(trl_reward.evaluator(), kbrl.RemoteEvaluator) or abs(rewards[0] - 1.0) > 1e-9 \
                or not 0.3 - 1e-9 <= rewards[1] < 1.0:
            failures.append(f"the TRL example through kbrl-evald: {rewards} from {type(trl_reward.evaluator())}")
        try:
            kbrl.RemoteEvaluator([url], device="cpu")
            failures.append("RemoteEvaluator took the server's setting 'device'")
        except kbrl.InvalidArgument as e:
            if "'device' is the servers'" not in str(e):
                failures.append(f"RemoteEvaluator's refusal of 'device': {e}")
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(timeout=120)
        except subprocess.TimeoutExpired:
            server.kill()
            code = "killed after 120 s"
        log.close()
    if code != 0:
        failures.append(f"kbrl-evald after SIGTERM: exit {code}")
    if failures:
        with open(log.name) as f:
            print("kbrl-evald's output:\n" + f.read()[-3000:])
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
