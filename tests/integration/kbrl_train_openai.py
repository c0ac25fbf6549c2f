#!/usr/bin/env python3
"""kbrl-train with sampling.backend=openai on the CPU demo: a real kbrl-serve (the demo policy's
checkpoint) samples the rollouts from the adapters kbrl-train publishes after each step.

Checks: the run finishes its steps and writes its files; the server's log shows one adapter load
per published version, the earlier one unloaded; the losses were computed with the server's
log-probabilities and these agree with the trainer's own on the same tokens (train/ratio 1 and
train/kl_sampler 0 within floating-point tolerance: the first minibatch of each step trains the
weights that sampled it); only the last version's adapter stays on disk. Refusals, each before a
step runs and with a message saying what is wrong: no endpoint, asynchronous steps, and a server
that cannot load adapters (a stub that answers 404).

    kbrl_train_openai.py --train <kbrl-train> --serve <kbrl-serve> --source <repo> --work <dir>
"""
import argparse
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def start_serve(args, log):
    port_file = os.path.join(args.work, "serve.port")
    if os.path.exists(port_file):
        os.remove(port_file)
    proc = subprocess.Popen([args.serve, "--model", args.model, "--device", "cpu", "--dtype", "fp32",
                             "--listen", "127.0.0.1:0", "--port-file", port_file],
                            stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if os.path.exists(port_file) and open(port_file).read().strip():
            return proc, f"http://127.0.0.1:{open(port_file).read().strip()}/v1"
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise SystemExit("kbrl-serve did not start")


def train(args, log_path, *overrides):
    cmd = [args.train, os.path.join(args.source, "examples/configs/cpu_demo.yaml"), f"model.path={args.model}",
           f"log_path={log_path}", *overrides]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=args.source)


class NoAdapters(http.server.BaseHTTPRequestHandler):
    """An OpenAI-like server without the LoRA endpoints: 404 with an OpenAI error object."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": {"message": "not found", "type": "NotFoundError"}}).encode()
        self.send_response(404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


class NoLogprobs(http.server.BaseHTTPRequestHandler):
    """Loads adapters, but answers completions without log-probabilities (as some servers do)."""

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path.endswith("load_lora_adapter"):
            body, kind = b"Success", "text/plain"
        else:
            body = json.dumps({"id": "x", "object": "text_completion", "model": request.get("model"),
                               "choices": [{"index": i, "text": "hi", "finish_reason": "length"}
                                           for i in range(request.get("n", 1))]}).encode()
            kind = "application/json"
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def refused_by(args, handler, name):
    stub = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=stub.serve_forever, daemon=True).start()
    try:
        return train(args, os.path.join(args.work, "runs", name), "sampling.backend=openai",
                     f"sampling.endpoint=http://127.0.0.1:{stub.server_address[1]}/v1", "dataset.max_steps=1")
    finally:
        stub.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--serve", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    args.model = os.path.join(args.work, "model")
    subprocess.run([args.python, os.path.join(args.source, "scripts/make_demo_model.py"), args.model], check=True)

    serve_log_path = os.path.join(args.work, "serve.log")
    with open(serve_log_path, "w") as serve_log:
        serve, endpoint = start_serve(args, serve_log)
        try:
            run = os.path.join(args.work, "runs", "served")
            # eval_every=1: the held-out rollouts after step s sample version s + 1, which step s + 1
            # then samples too (published once).
            r = train(args, run, "sampling.backend=openai", f"sampling.endpoint={endpoint}", "dataset.max_steps=2",
                      "eval_every=1")
            if r.returncode != 0:
                print(r.stdout[-3000:], r.stderr[-5000:])
            check(r.returncode == 0, "kbrl-train with sampling.backend=openai finishes")
            metrics_path = os.path.join(run, "metrics.jsonl")
            metrics = [json.loads(l) for l in open(metrics_path)] if os.path.exists(metrics_path) else []
            check([m["step"] for m in metrics] == [0, 1], "one metrics line per step")
            trained = [m for m in metrics if "train/ratio" in m]  # a step whose groups all tie trains nothing
            check(len(trained) >= 1, f"{len(trained)} step(s) trained")
            for m in trained:
                ratio, kl = m["train/ratio"], m.get("train/kl_sampler")
                check(abs(ratio - 1) < 1e-3,
                      f"step {m['step']}: the trainer's log-probabilities match the server's (train/ratio {ratio})")
                check(kl is not None and 0 <= kl < 1e-5, f"step {m['step']}: train/kl_sampler {kl} is ~0")
            check(all(m.get("tokens/completion", 0) > 0 for m in metrics), "every step sampled tokens")
            traces = os.path.join(run, "traces.jsonl")
            check(os.path.exists(traces) and os.path.getsize(traces) > 0, "traces written")
            served = os.path.join(run, "served_adapters")
            check(sorted(os.listdir(served)) == ["v2"] if os.path.isdir(served) else False,
                  f"only the last version's adapter stays on disk ({os.listdir(served) if os.path.isdir(served) else None})")
        finally:
            serve.terminate()
            serve.wait(timeout=60)
    with open(serve_log_path) as f:
        log = f.read()
    loads = re.findall(r"(?<!un)loaded adapter '([^']+)'", log)
    unloads = re.findall(r"unloaded adapter '([^']+)'", log)
    check(loads == ["served-v0", "served-v1", "served-v2"], f"the server loaded each version once, in order ({loads})")
    check(set(["served-v0", "served-v1"]) <= set(unloads), f"earlier versions were unloaded ({unloads})")

    # Refusals.
    r = train(args, os.path.join(args.work, "runs", "no-endpoint"), "sampling.backend=openai")
    check(r.returncode != 0 and "sampling.endpoint" in r.stderr, "no endpoint: refused, naming sampling.endpoint")
    r = train(args, os.path.join(args.work, "runs", "async"), "sampling.backend=openai",
              "sampling.endpoint=http://127.0.0.1:9/v1", "train.max_steps_off_policy=1")
    check(r.returncode != 0 and "max_steps_off_policy" in r.stderr, "asynchronous steps: refused with a message")
    for handler, name, expected in [(NoAdapters, "no-lora", "load_lora_adapter"),
                                    (NoLogprobs, "no-logprobs", "no log-probabilities")]:
        r = refused_by(args, handler, name)
        ok = r.returncode != 0 and expected in r.stderr
        check(ok, f"a server without {name[3:]}: refused, saying so")
        if not ok:
            print(r.stderr[-2000:])
        metrics = os.path.join(args.work, "runs", name, "metrics.jsonl")
        check(not os.path.exists(metrics) or os.path.getsize(metrics) == 0, f"{name}: no step ran")
    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
