#!/usr/bin/env python3
"""The evaluator fleet end to end, on loopback with the CPU backend (docs/services.md): three
kbrl-evald processes and 100 requests through RemoteEvaluator (evald_fleet_client), while

  - a third server joins mid-run (the endpoints file is rewritten) with its queue full: the client
    gets 429, backs off and the server then receives work;
  - one server is SIGKILLed with requests in flight and another is SIGTERMed (it drains and exits 0);

and then checks that all 100 results came, each once, with the category its candidate earns; that
no request was evaluated twice on the servers that survived (their journals and
kbrl_evald_evaluations_total); that bad token, bad JSON, an oversized body and an unknown field
get 401, 400, 413 and 400 naming the field; that the killed server, restarted on its journal,
answers for what it finished without evaluating again; and that `kbrl-eval kernel --endpoints`
evaluates on the fleet.

Cheap by design: pure-PyTorch candidates (the static checker is off on these servers, so they
need no C++ build), five distinct sources reused across the 100 requests, one correctness trial,
no timing.

    evald_fleet.py --evald <kbrl-evald> --client <evald_fleet_client> --eval <kbrl-eval>
                   --source <repo> --work <scratch dir> [--compile-cache <dir>]
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

FAILURES = []
TOKEN = "fleet-test-token"


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


def wait_for(pred, timeout, step=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


class Server:
    def __init__(self, name, args, work, journal=None, extra=()):
        self.name = name
        self.dir = os.path.join(work, name)
        os.makedirs(self.dir, exist_ok=True)
        self.port_file = os.path.join(self.dir, "port")
        self.journal = journal or os.path.join(self.dir, "journal")
        self.log_path = os.path.join(self.dir, "stderr.log")
        cmd = [args.evald, "--listen", "127.0.0.1:0", "--port-file", self.port_file,
               "--work-dir", os.path.join(self.dir, "work"), "--journal", self.journal,
               "--token-file", args.token_file, "--max-body-bytes", "262144",
               "--compile-workers", "1", "--cpu-run-lanes", "1", "--compile-cache-dir", args.compile_cache,
               "--no-static-check", "--no-timing", "--trials", "1", "--no-input-families", *extra]
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        self.port = None

    def wait_listening(self, timeout=60):
        ok = wait_for(lambda: os.path.exists(self.port_file) or self.proc.poll() is not None, timeout)
        if ok and os.path.exists(self.port_file):
            with open(self.port_file) as f:
                self.port = int(f.read())
        return self.port is not None

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def request(self, method, path, body=None, token=TOKEN, headers=None, timeout=30):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        if body is not None:
            h["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=h)
        r = conn.getresponse()
        data = r.read().decode("utf-8", "replace")
        conn.close()
        return r.status, data, dict(r.getheaders())

    def ready(self):
        try:
            return self.request("GET", "/readyz", token=None, timeout=5)[0] == 200
        except OSError:
            return False

    def metric(self, name):
        status, text, _ = self.request("GET", "/metrics")
        if status != 200:
            return None
        m = re.search(r"^" + re.escape(name) + r" ([0-9.eE+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0

    def journal_ids(self):
        ids = []
        path = os.path.join(self.journal, "journal.jsonl")
        if os.path.exists(path):
            with open(path) as f:
                for line in f:
                    if line.endswith("\n"):
                        ids.append(json.loads(line)["request_id"])
        return ids

    def log_text(self):
        if not self.log.closed:
            self.log.flush()
        with open(self.log_path) as f:
            return f.read()


def problem(source_dir, number, name):
    path = os.path.join(source_dir, "examples/problems", f"{number}_{name}.py")
    with open(path) as f:
        return {"id": f"bundled/{number}_{name}", "level": 1, "number": number, "name": name,
                "source": f.read(), "content_hash": "", "origin": "", "needs_weights": False}


def solution(source_dir, p, s):
    with open(os.path.join(source_dir, "examples/solutions", f"level_1_problem_{p}_sample_{s}_kernel.py")) as f:
        return f.read()


# Every field, as RemoteEvaluator sends it (core::to_json): the same request posted by hand below
# must hash to the same request_sha256.
OPTIONS = {"correctness_trials": 1, "timing_trials": 100, "warmup_runs": 5, "measure_performance": False,
           "seed": None, "atol": None, "rtol": None, "compile_timeout_s": 120.0, "run_timeout_s": 60.0,
           "input_families": False, "kernelbench_inputs": False}


def make_requests(source_dir):
    gelu = problem(source_dir, 2, "GELUTanh")
    gelu_op = solution(source_dir, 2, 2)  # F.gelu itself: correct once the static checker is off
    cases = [
        ("gelu_op", gelu, gelu_op, "none"),
        ("softmax_op", problem(source_dir, 4, "SoftmaxTemperature"), solution(source_dir, 4, 2), "none"),
        ("erf_gelu", gelu, gelu_op.replace('approximate="tanh"', 'approximate="none"'), "correctness"),
        ("fallback", problem(source_dir, 3, "RowSumOfSquares"), solution(source_dir, 3, 1), "none"),
        ("syntax_error", gelu, gelu_op + "\ndef broken(:\n    pass\n", "compile"),
    ]
    requests, expected = [], {}
    for i in range(100):
        name, prob, src, category = cases[i % len(cases)]
        rid = f"fleet-{i:03d}-{name}"
        requests.append({"request_id": rid, "problem": prob, "candidate_source": src, "language": "cpp",
                         "precision": "fp32", "options": OPTIONS})
        expected[rid] = category
    # Slow but correct: fills the joining server's queue before the client first reaches it.
    slow = gelu_op.replace("    def forward(self, x):\n",
                           "    def forward(self, x):\n        import time\n        time.sleep(0.4)\n")
    flood = [{"request_id": f"flood-{k}", "problem": gelu, "candidate_source": slow, "language": "cpp",
              "precision": "fp32", "options": OPTIONS} for k in range(3)]
    return requests, expected, flood


def write_endpoints(path, servers):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("# the fleet, rewritten as servers join\n")
        for s in servers:
            f.write(s.url + "\n")
    os.replace(tmp, path)


def check_refusals(server):
    """Bad token, bad JSON, oversized body, unknown fields: each its 4xx, naming what is wrong."""
    good = {"request_id": "refused", "problem": {"id": "p", "source": "x"}, "candidate_source": "", "language": "cpp"}
    body = json.dumps({"requests": [good]})
    status, text, headers = server.request("POST", "/v1/evaluations", body, token="not-the-token")
    check(status == 401 and headers.get("WWW-Authenticate") == "Bearer", f"a wrong token gets 401 (got {status})")
    status, _, _ = server.request("POST", "/v1/evaluations", body, token=None)
    check(status == 401, f"no token gets 401 (got {status})")
    status, _, _ = server.request("GET", "/metrics", token=None)
    check(status == 401, f"/metrics without the token gets 401 (got {status})")
    status, _, _ = server.request("GET", "/healthz", token=None)
    check(status == 200, f"/healthz needs no token (got {status})")
    status, text, _ = server.request("POST", "/v1/evaluations", '{"requests": [{"request_id": ')
    check(status == 400 and "not valid JSON" in text, f"bad JSON gets 400 (got {status}: {text[:120]})")
    unknown = dict(good, options={"trails": 3})
    status, text, _ = server.request("POST", "/v1/evaluations", json.dumps({"requests": [unknown]}))
    check(status == 400 and "requests[0].options.trails" in text,
          f"an unknown field gets 400 naming requests[0].options.trails (got {status}: {text[:160]})")
    status, text, _ = server.request("POST", "/v1/evaluations", json.dumps({"requests": [good], "stream": True, "x": 1}))
    check(status == 400 and "'x'" in text, f"an unknown top-level field gets 400 naming it (got {status}: {text[:120]})")
    big = json.dumps({"requests": [dict(good, candidate_source="#" * 300_000)]})
    try:
        status, text, _ = server.request("POST", "/v1/evaluations", big)
    except OSError as e:  # the server may close the connection while the body is still being sent
        status, text = -1, str(e)
    check(status == 413, f"a body over --max-body-bytes gets 413 (got {status}: {text[:120]})")
    check(server.metric("kbrl_evald_evaluations_total") == 0, "nothing refused was evaluated")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--evald", required=True)
    ap.add_argument("--client", required=True)
    ap.add_argument("--eval", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--compile-cache", default="")
    args = ap.parse_args()
    started = time.monotonic()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    # One compile cache for every server: evaluators with different work dirs may share it.
    args.compile_cache = args.compile_cache or os.path.join(args.work, "compile_cache")
    args.token_file = os.path.join(args.work, "token")
    with open(args.token_file, "w") as f:
        f.write(TOKEN + "\n")

    requests, expected, flood = make_requests(args.source)
    requests_path = os.path.join(args.work, "requests.jsonl")
    with open(requests_path, "w") as f:
        for r in requests:
            f.write(json.dumps(r) + "\n")
    by_id = {r["request_id"]: r for r in requests}

    a = Server("a", args, args.work)
    b = Server("b", args, args.work)
    # c joins later, with a queue of one beyond its two slots: the flood fills it.
    c = Server("c", args, args.work, extra=["--max-queue", "1"])
    servers = [a, b, c]
    try:
        for s in servers:
            if not check(s.wait_listening(), f"server {s.name} listens (port file written)"):
                print(s.log_text())
                return 1
        check_refusals(c)

        endpoints = os.path.join(args.work, "endpoints.txt")
        write_endpoints(endpoints, [a, b])
        env = dict(os.environ, KBRL_EVALD_TOKEN=TOKEN)
        client = subprocess.Popen([args.client, endpoints, requests_path, "90"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env)
        lines, stats = [], {}
        client_err = []

        def read_stdout():
            for line in client.stdout:
                if line.startswith("result "):
                    lines.append(line.split(" ", 4))
                elif line.startswith("stats "):
                    stats.update(json.loads(line[6:]))

        reader = threading.Thread(target=read_stdout)
        reader.start()
        err_reader = threading.Thread(target=lambda: client_err.extend(client.stderr))
        err_reader.start()
        # The client starts at once: requests wait in the servers while their workers import torch.
        if not check(wait_for(lambda: all(s.ready() for s in servers), 120), "every server becomes ready"):
            return 1
        print(f"servers ready after {time.monotonic() - started:.1f} s", flush=True)

        # 1. c joins with its queue full: the client is answered 429 and backs off.
        wait_for(lambda: len(lines) >= 10 or client.poll() is not None, 60)
        status, text, _ = c.request("POST", "/v1/evaluations", json.dumps({"requests": flood, "stream": False}))
        check(status == 202, f"c accepts the flood batch (got {status}: {text[:120]})")
        write_endpoints(endpoints, [a, b, c])
        got_429 = wait_for(lambda: 'kbrl_evald_http_requests_total{code="429"}' in c.request("GET", "/metrics")[1], 15)
        check(got_429, "the joining server's full queue answered the client 429")

        # 2. a is SIGKILLed with requests in flight, once c took work of the client.
        wait_for(lambda: (c.metric("kbrl_evald_evaluations_total") or 0) > len(flood), 30)
        wait_for(lambda: len(lines) >= 35, 60)
        wait_for(lambda: (a.metric("kbrl_evald_in_flight") or 0) > 0, 5, step=0.01)
        in_flight_at_kill = a.metric("kbrl_evald_in_flight")
        a.proc.kill()
        a.proc.wait()
        print(f"a killed after {len(lines)} results, {in_flight_at_kill:.0f} in flight on it", flush=True)

        # 3. b is SIGTERMed: it drains what it accepted and exits 0.
        wait_for(lambda: len(lines) >= 55, 60)
        b.proc.send_signal(signal.SIGTERM)
        print(f"b terminated after {len(lines)} results", flush=True)
        try:
            b_code = b.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            b_code = None
        check(b_code == 0, f"b drains and exits 0 after SIGTERM (got {b_code})")

        try:
            client.wait(timeout=120)
        except subprocess.TimeoutExpired:
            client.kill()
        reader.join()
        err_reader.join()
        check(client.returncode == 0, f"the client finishes (exit {client.returncode}; {''.join(client_err)[-500:]})")

        # Every request answered once, with what its candidate earns.
        ids = [l[2] for l in lines]
        check(len(lines) == 100, f"100 results delivered (got {len(lines)})")
        check(len(set(ids)) == len(ids) and set(ids) == set(expected), "each request's result delivered exactly once")
        wrong = [(l[2], l[3], l[4].strip()[:100]) for l in lines if expected.get(l[2]) != l[3]]
        check(not wrong, f"every result has its candidate's category (wrong: {wrong[:5]})")
        check(stats.get("delivered") == 100 and stats.get("gave_up") == 0, f"client stats: {stats}")
        check(stats.get("redispatched", 0) >= 1, "the killed server's requests were re-dispatched")
        check(stats.get("queue_full", 0) >= 1, "the client honoured at least one 429")
        check(stats.get("results_by_server", {}).get(c.url, 0) > 0, "the server that joined mid-run delivered results")
        check(stats.get("connections_opened", 1000) < stats.get("batches", 0) + 20,
              f"connections are kept alive ({stats.get('connections_opened')} opened for {stats.get('batches')} batches)")

        # No request evaluated twice on the servers that survived: each journal line is one
        # evaluation, c's counter matches its journal, and b and c share no request.
        b_ids, c_ids = b.journal_ids(), c.journal_ids()
        m = re.search(r"drained \((\d+) evaluations run\)", b.log_text())
        check(m is not None and int(m.group(1)) == len(b_ids),
              f"b ran as many evaluations as its journal holds ({m.group(1) if m else '?'} vs {len(b_ids)})")
        c_evals = c.metric("kbrl_evald_evaluations_total")
        check(c_evals == len(c_ids), f"c ran as many evaluations as its journal holds ({c_evals} vs {len(c_ids)})")
        survivors = b_ids + c_ids
        twice = sorted({i for i in survivors if survivors.count(i) > 1})
        check(not twice, f"no request evaluated twice on the surviving servers (twice: {twice[:5]})")
        check(set(i for i in survivors if i in expected) | set(a.journal_ids()) >= set(expected),
              "every request was evaluated by some server")

        # The killed server, restarted on its journal, answers for what it finished.
        a_ids = [i for i in a.journal_ids() if i in by_id]
        if check(len(a_ids) > 0, f"a finished some requests before it was killed ({len(a_ids)})"):
            a2 = Server("a2", args, args.work, journal=a.journal)
            servers.append(a2)
            if check(a2.wait_listening(), "a restarts on its journal"):
                body = json.dumps({"requests": [by_id[a_ids[0]]], "stream": True})
                status, text, _ = a2.request("POST", "/v1/evaluations", body)
                result = json.loads(text.splitlines()[0]) if status == 200 and text else {}
                check(status == 200 and result.get("request_id") == a_ids[0] and
                      result.get("error_category") == expected[a_ids[0]],
                      f"the restarted server answers {a_ids[0]} from its journal (got {status}: {text[:120]})")
                check(a2.metric("kbrl_evald_evaluations_total") == 0 and a2.metric("kbrl_evald_replayed_total") == 1,
                      "...without evaluating it again")
                changed = dict(by_id[a_ids[0]], candidate_source="class ModelNew: pass\n")
                status, text, _ = a2.request("POST", "/v1/evaluations", json.dumps({"requests": [changed]}))
                check(status == 409 and a_ids[0] in text, f"the same id with another request gets 409 (got {status})")

        # kbrl-eval evaluates on the fleet.
        r = subprocess.run([args.eval, "kernel", "--problem", os.path.join(args.source, "examples/problems/2_GELUTanh.py"),
                            "--kernel", os.path.join(args.source, "examples/solutions/level_1_problem_2_sample_2_kernel.py"),
                            "--endpoints", c.url, "--trials", "1", "--no-timing", "--no-input-families"],
                           capture_output=True, text=True, timeout=120, env=env)
        result = json.loads(r.stdout) if r.returncode == 0 and r.stdout.strip() else {}
        check(r.returncode == 0 and result.get("correctness") is True,
              f"kbrl-eval kernel --endpoints evaluates on a server (exit {r.returncode}: {r.stderr[-300:]})")
        # The flood was accepted with stream false: its results are fetched by polling.
        polled = [c.request("GET", f"/v1/evaluations/{r['request_id']}") for r in flood]
        check(all(p[0] == 200 and json.loads(p[1])["error_category"] == "none" for p in polled),
              f"polling returns the flood's results ({[p[0] for p in polled]})")
        status, _, _ = c.request("GET", "/v1/evaluations/no-such-id")
        check(status == 404, f"polling an unknown id gets 404 (got {status})")
        c.proc.send_signal(signal.SIGTERM)
        try:
            c_code = c.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            c_code = None
        check(c_code == 0, f"c drains and exits 0 (got {c_code})")
    finally:
        for s in servers:
            if s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
            s.log.close()
    elapsed = time.monotonic() - started
    print(f"evald_fleet: {elapsed:.1f} s", flush=True)
    if FAILURES:
        for s in servers:
            print(f"---- {s.name} stderr ----\n{s.log_text()[-3000:]}")
        print(f"{len(FAILURES)} checks failed")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
