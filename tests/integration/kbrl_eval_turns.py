#!/usr/bin/env python3
"""kbrl-eval over several levels and multi-turn (--turns), as a user runs it, on the CPU with
real workers. Pure-PyTorch candidates (the static checker off), so nothing is built.

generations: a KernelBench-style checkout with a problem at level 1 and one at level 2, answers
written by hand turn by turn, as an outside sampler would write them:
- one run over both levels writes RUN/level_L/eval_results.json per level, "levels" and "turns"
  in eval_summary.json, and each eval_results.jsonl line names its level and turn;
- an episode whose answer is wrong gets RUN/..._turn_2_prompt.json, the training environment's
  conversation (task, the earlier answer, its feedback); a correct one ends (early stop), unless
  --no-early-stop;
- answers to those conversations are evaluated on the next run (the earlier ones are not
  evaluated again), and "through turn T" counts an episode's best attempt so far;
- a line written before runs had levels and turns is read as turn 1 of the one level given;
- a plain folder of problems cannot serve two levels.
model --endpoint: an OpenAI-compatible stub server answers two levels over two turns (with an API
key from the environment, which ends up in no file); running it again requests nothing new.
model (where kbrl-eval has libtorch): the demo policy answers two levels over two turns; every
episode that did not end gets a second, sampled from the conversation kbrl-eval wrote.

    kbrl_eval_turns.py --eval <kbrl-eval> --source <repo> --work <scratch> [--with-model --python <python with transformers>]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


PROGRAM = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, {args}):
        super().__init__()
        self.{arg} = {arg}

    def forward(self, {inputs}):
        return {body}
"""


def residual_add(body):
    return PROGRAM.format(args="alpha", arg="alpha", inputs="x, residual", body=body)


def row_sum(body):
    return PROGRAM.format(args="dim", arg="dim", inputs="x", body=body)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def read_json(path):
    with open(path) as f:
        return json.load(f)


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


class StubOpenAi:
    """An OpenAI-compatible chat server on 127.0.0.1: the first answer to the residual-add task
    forgets alpha, the answer to its feedback is right, the row-sum task is answered right at
    once. It counts the requests and keeps the Authorization headers it saw."""

    def __init__(self):
        import http.server
        import threading
        stub = self
        self.requests = 0
        self.authorizations = set()
        self.lock = threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with stub.lock:
                    stub.requests += 1
                    stub.authorizations.add(self.headers.get("Authorization", ""))
                if self.path != "/v1/chat/completions" or body.get("model") != "stub-coder":
                    self.send_response(404)
                    self.end_headers()
                    return
                text = "\n".join(m["content"] for m in body["messages"])
                if "alpha * residual" in text:
                    program = residual_add("x + self.alpha * residual" if "Attempt 1 of" in text else "x + residual")
                else:
                    program = row_sum("(x * x).sum(dim=self.dim)")
                answer = "<think>Fuse it.</think>\n<KERNEL>\n```python\n" + program + "```\n</KERNEL>\n"
                choices = [{"index": i, "message": {"role": "assistant", "content": answer}, "finish_reason": "stop"}
                           for i in range(body["n"])]
                data = json.dumps({"id": "c", "model": body["model"], "choices": choices,
                                   "usage": {"prompt_tokens": 10, "completion_tokens": 20 * body["n"],
                                             "total_tokens": 10 + 20 * body["n"]}}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:{}/v1".format(self.server.server_address[1])

    def close(self):
        self.server.shutdown()


def check_served_model(args, common):
    stub = StubOpenAi()
    run = os.path.join(args.work, "served-run")
    env = dict(os.environ, KBRL_TEST_API_KEY="sk-kbrl-test-secret")
    cmd = [args.eval, "model", "--endpoint", stub.url, "--model-name", "stub-coder", "--api-key-env",
           "KBRL_TEST_API_KEY", "--run", run, *common, "--level", "1,2", "--turns", "2", "--samples", "2"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
        check(r.returncode == 0, "kbrl-eval model --endpoint over two levels, two turns exits 0")
        # Turn 1: one request per problem (n = 2); turn 2: one per waiting episode (the two
        # residual-add samples).
        check(stub.requests == 4, "the server was asked 4 times (got {})".format(stub.requests))
        check(stub.authorizations == {"Bearer sk-kbrl-test-secret"}, "the API key went in the Authorization header")
        summary = read_json(os.path.join(run, "eval_summary.json")) if os.path.isfile(
            os.path.join(run, "eval_summary.json")) else {}
        through = {t: summary.get("turns", {}).get(t, {}).get("correct") for t in ("1", "2")}
        check(through == {"1": 2, "2": 4}, "served answers: 2 correct through turn 1, 4 through turn 2 (got {})".format(through))
        gens = jsonl(os.path.join(run, "generations.jsonl"))
        check(len(gens) == 6 and all(g.get("stop_reason") == "stop" for g in gens),
              "generations.jsonl holds the 6 answers with their stop reasons")
        leaked = [name for name in os.listdir(run)
                  if os.path.isfile(os.path.join(run, name)) and "sk-kbrl-test-secret" in open(os.path.join(run, name)).read()]
        check(not leaked and "sk-kbrl-test-secret" not in r.stderr + r.stdout, "the key is in no file and no output")
        again = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
        check(again.returncode == 0 and stub.requests == 4, "run again: nothing new is requested (asked {} times)".format(
            stub.requests))
        no_key = [os.path.join(args.work, "served-no-key") if a == run else a for a in cmd]
        unset = subprocess.run(no_key, capture_output=True, text=True, timeout=120,
                               env={k: v for k, v in os.environ.items() if k != "KBRL_TEST_API_KEY"})
        check(unset.returncode != 0 and "KBRL_TEST_API_KEY is not set" in unset.stderr,
              "an unset key variable is refused naming it")
    finally:
        stub.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--eval", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--with-model", action="store_true", help="kbrl-eval has libtorch: test `kbrl-eval model` too")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    kb = os.path.join(args.work, "kb", "KernelBench")
    for level, problem in [(1, "1_ScaledResidualAdd.py"), (2, "3_RowSumOfSquares.py")]:
        os.makedirs(os.path.join(kb, "level{}".format(level)))
        shutil.copy(os.path.join(args.source, "examples", "problems", problem), os.path.join(kb, "level{}".format(level)))
    run = os.path.join(args.work, "run")
    os.makedirs(run)
    common = ["--problems", os.path.dirname(kb), "--no-static-check", "--work-dir", os.path.join(args.work, "eval-work"),
              "--cpu-run-lanes", "2"]

    def evaluate(*extra, run_dir=run, code=0):
        r = subprocess.run([args.eval, "generations", "--run", run_dir, *common, *extra], capture_output=True, text=True,
                           timeout=600)
        if r.returncode != code:
            print(r.stdout, r.stderr)
        check(r.returncode == code, "kbrl-eval generations {} exits {} (got {})".format(" ".join(extra), code, r.returncode))
        return r

    # Turn 1: level 1 sample 0 forgets alpha (wrong), level 1 sample 1 is a raw answer with
    # thinking (correct), level 2 sample 0 is correct.
    write(os.path.join(run, "level_1_problem_1_sample_0_kernel.py"), residual_add("x + residual"))
    write(os.path.join(run, "level_1_problem_1_sample_1_kernel.py"),
          "<think>Scale the residual first.</think>\n<KERNEL>\n```python\n" +
          residual_add("torch.add(x, residual, alpha=self.alpha)") + "```\n</KERNEL>\n")
    write(os.path.join(run, "level_2_problem_3_sample_0_kernel.py"), row_sum("(x * x).sum(dim=self.dim)"))
    r = evaluate("--level", "1,2", "--turns", "3", "--keep-thinking")
    check("3 candidates, 0 already evaluated, 3 to go" in r.stderr, "turn 1: three candidates evaluated")
    summary = read_json(os.path.join(run, "eval_summary.json"))
    check(summary["total"] == 3 and summary["correct"] == 2, "the summary counts three episodes, two correct")
    check(sorted(summary.get("levels", {})) == ["1", "2"], "the summary has each level")
    check(summary["levels"]["1"]["pass_at_k"]["pass@1"] == 0.5 and summary["levels"]["2"]["correct"] == 1,
          "per level: level 1 pass@1 0.5, level 2 correct")
    check(sorted(summary.get("turns", {})) == ["1", "2", "3"], "the summary has each turn")
    check(summary.get("next_turn_prompts_waiting") == 1, "one episode waits for its next answer")
    for level, want in [(1, {"1"}), (2, {"3"})]:
        path = os.path.join(run, "level_{}".format(level), "eval_results.json")
        check(os.path.isfile(path) and set(read_json(path)) == want,
              "level_{}/eval_results.json holds its level's problems".format(level))
    check(not os.path.exists(os.path.join(run, "eval_results.json")), "no top-level eval_results.json with two levels")
    lines = jsonl(os.path.join(run, "eval_results.jsonl"))
    check(all(line.get("level") in (1, 2) and line.get("turn") == 1 for line in lines),
          "eval_results.jsonl lines name their level and turn")
    prompt = os.path.join(run, "level_1_problem_1_sample_0_turn_2_prompt.json")
    check(os.path.isfile(prompt), "the wrong answer's episode gets a turn-2 conversation")
    check(not any(os.path.exists(os.path.join(run, name)) for name in
                  ["level_1_problem_1_sample_1_turn_2_prompt.json", "level_2_problem_3_sample_0_turn_2_prompt.json"]),
          "correct answers end their episodes (early stop)")
    if os.path.isfile(prompt):
        p = read_json(prompt)
        roles = [m["role"] for m in p["messages"]]
        check(roles == ["system", "user", "assistant", "user"], "turn 2's conversation: task, answer, feedback")
        check(p["turn"] == 2 and p["problem_id"] == "level1/1_ScaledResidualAdd", "the conversation names its turn and problem")
        check("return x + residual" in p["messages"][2]["content"], "the earlier program is in the conversation")
        check(p["messages"][3]["content"].startswith("Attempt 1 of 3: wrong outputs"),
              "the feedback is the training environment's: " + p["messages"][3]["content"][:60])

    # Turn 2: still wrong (raises); turn 3: correct.
    write(os.path.join(run, "level_1_problem_1_sample_0_turn_2_kernel.py"), residual_add("x + self.alpha * missing"))
    r = evaluate("--level", "1,2", "--turns", "3", "--keep-thinking")
    check("4 candidates, 3 already evaluated, 1 to go" in r.stderr, "turn 2: only the new answer is evaluated")
    prompt3 = os.path.join(run, "level_1_problem_1_sample_0_turn_3_prompt.json")
    check(os.path.isfile(prompt3), "a second failure gets a turn-3 conversation")
    if os.path.isfile(prompt3):
        p = read_json(prompt3)
        check([m["role"] for m in p["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"],
              "turn 3's conversation holds both earlier attempts")
        check(p["messages"][5]["content"].startswith("Attempt 2 of 3:") and "missing" in p["messages"][5]["content"],
              "the second feedback names the error")
    write(os.path.join(run, "level_1_problem_1_sample_0_turn_3_kernel.py"), residual_add("x + self.alpha * residual"))
    evaluate("--level", "1,2", "--turns", "3", "--keep-thinking")
    summary = read_json(os.path.join(run, "eval_summary.json"))
    through = {t: summary["turns"][t]["correct"] for t in ("1", "2", "3")}
    check(through == {"1": 2, "2": 2, "3": 3}, "correct episodes through turns 1, 2, 3: 2, 2, 3 (got {})".format(through))
    check(summary["turns"]["3"]["pass_at_k"]["pass@1"] == 1.0 and summary["turns"]["1"]["pass_at_k"]["pass@1"] == 0.75,
          "pass@1 through turn 1 is 0.75, through turn 3 is 1")
    check(summary["next_turn_prompts_waiting"] == 0 and summary["correct"] == 3, "no episode waits; all three correct")
    best = read_json(os.path.join(run, "level_1", "eval_results.json"))["1"]
    check(all(r["correctness"] for r in best), "level 1's eval_results.json holds each sample's best attempt")

    # --no-early-stop: a correct answer's episode goes on (the results are read back, not redone).
    go_on = os.path.join(args.work, "go_on")
    shutil.copytree(run, go_on)
    for name in os.listdir(go_on):
        if name.endswith("_prompt.json"):
            os.remove(os.path.join(go_on, name))
    r = evaluate("--level", "1,2", "--turns", "3", "--no-early-stop", run_dir=go_on)
    check("to go" in r.stderr and ", 0 to go" in r.stderr, "--no-early-stop: nothing evaluated again")
    check(os.path.isfile(os.path.join(go_on, "level_1_problem_1_sample_1_turn_2_prompt.json")) and
          os.path.isfile(os.path.join(go_on, "level_2_problem_3_sample_0_turn_2_prompt.json")),
          "--no-early-stop: correct answers get a next turn too")

    # A run from before levels and turns were recorded: its lines resume as turn 1 of the level given.
    old = os.path.join(args.work, "old")
    os.makedirs(old)
    shutil.copy(os.path.join(run, "level_2_problem_3_sample_0_kernel.py"), old)
    with open(os.path.join(old, "eval_results.jsonl"), "w") as f:
        for line in lines:
            if line["level"] == 2:
                line.pop("level")
                line.pop("turn")
                f.write(json.dumps(line) + "\n")
    r = evaluate("--level", "2", run_dir=old)
    check("1 candidates, 1 already evaluated, 0 to go" in r.stderr, "a line without level and turn resumes")
    check(os.path.isfile(os.path.join(old, "eval_results.json")), "one level: eval_results.json at the top")

    # A plain folder of problems has no levels: it serves one.
    r = subprocess.run([args.eval, "generations", "--run", run, "--problems", os.path.join(args.source, "examples", "problems"),
                        "--level", "1,2", "--no-static-check"], capture_output=True, text=True, timeout=120)
    check(r.returncode == 1 and "serves one --level" in r.stderr, "a plain folder with two levels is refused: " +
          r.stderr.strip()[-160:])

    # model --endpoint: an OpenAI-compatible stub server answers, two levels, two turns, resumed.
    check_served_model(args, common)

    # model: the demo policy, two levels, two turns.
    if args.with_model:
        model = os.path.join(args.work, "model")
        subprocess.run([args.python, os.path.join(args.source, "scripts", "make_demo_model.py"), model], check=True,
                       capture_output=True)
        mrun = os.path.join(args.work, "model-run")
        r = subprocess.run([args.eval, "model", "--model", model, "--run", mrun, *common, "--level", "1,2", "--turns", "2",
                            "--samples", "2", "--max-tokens", "24", "--model-device", "cpu"],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            print(r.stdout, r.stderr)
        check(r.returncode == 0, "kbrl-eval model --turns 2 over two levels exits 0")
        gens = jsonl(os.path.join(mrun, "generations.jsonl")) if os.path.isfile(os.path.join(mrun, "generations.jsonl")) else []
        first = [g for g in gens if g["turn"] == 1]
        second = [g for g in gens if g["turn"] == 2]
        check(len(first) == 4 and {g["level"] for g in first} == {1, 2}, "turn 1: two answers to each level's problem")
        summary = read_json(os.path.join(mrun, "eval_summary.json")) if os.path.isfile(
            os.path.join(mrun, "eval_summary.json")) else {}
        ended = 4 - len(second)
        check(len(second) == 4 - summary.get("turns", {}).get("1", {}).get("correct", 0),
              "turn 2: an answer for each episode the first did not end ({} ended)".format(ended))
        check(all(os.path.isfile(os.path.join(mrun, g["file"])) for g in gens), "every answer is a file in the run")
        check(all(os.path.isfile(os.path.join(mrun, g["file"].replace("_kernel.py", "_prompt.json"))) for g in second),
              "each turn-2 answer was sampled from its conversation")
        check(len(jsonl(os.path.join(mrun, "eval_results.jsonl"))) == len(gens), "every answer was evaluated")
        check(sorted(summary.get("levels", {})) == ["1", "2"] and sorted(summary.get("turns", {})) == ["1", "2"],
              "the model's summary has both levels and both turns")
    else:
        print("skip kbrl-eval model: built without libtorch")

    print("{} failure(s)".format(len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
