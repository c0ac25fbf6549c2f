#!/usr/bin/env python3
"""Retrieved examples in prompts end to end (docs/retrieval.md, "Prompts"), with real processes:
kbrl-index builds an index of the bundled retrieval corpus plus two labeled leaks (an exact copy
and a reformatted copy of a bundled problem, each with a kernel no prompt may show);
`kbrl-eval model` prompts the demo policy with it: each problem's first conversation
(level_L_problem_P_prompt.json) opens with its examples, best first, within the token budget and
before the task, the leaks of the problem are not in its prompt and are counted, and
generations.jsonl and the log line carry the counts; bad settings exit 1 (a missing or unusable
index) or 2. A dense index (embedded in process with the demo checkpoint) puts kbrl-index query's
hits in kbrl-eval's and kbrl-train's prompts, and is refused without its embedder or with another. Then one step of kbrl-train with prompt.retrieval: the traces' prompts hold the same
task prompts as kbrl-eval's (the same examples from another program and process), and the step's
metrics and logs.log the counts.

    retrieval_prompts.py --eval <kbrl-eval> --index <kbrl-index> --train <kbrl-train> --source <repo> --work <scratch>
        [--model <demo model>]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

FAILURES = []
LEAK_MARKER = "LEAKED-ANSWER-MARKER"
LEAKY = "4_SoftmaxTemperature.py"  # the problem the leaks copy
OTHER = "6_LayerNormAffine.py"
BUDGET = 1500


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run(cmd, cwd=None, timeout=300):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd)
    return r


def write_leaks(path, problem_source):
    reformatted = "# a copy with comments and blank lines added\n\n" + problem_source.replace("\n\n", "\n\n\n")
    with open(path, "w") as f:
        for id_, source in [("leak_exact", problem_source), ("leak_reformatted", reformatted)]:
            # Kernels of their own (comments aside): kbrl-index build keeps one of two entries equal on
            # both sides.
            kernel = "// {}: the answer to this very problem\n__global__ void {}() {{}}\n".format(LEAK_MARKER, id_)
            f.write(json.dumps({"id": id_, "source": source, "kernel": kernel, "language": "cuda"}) + "\n")


def check_prompt(path, leaky):
    name = os.path.basename(path)
    if not os.path.isfile(path):
        check(False, name + " written")
        return None
    p = json.load(open(path))
    user = p["messages"][1]["content"]
    r = p["retrieval"]
    check(p["turn"] == 1 and [m["role"] for m in p["messages"]] == ["system", "user"], name + ": the first conversation")
    check(len(r["examples"]) >= 1, name + ": examples in the prompt ({})".format(r["examples"]))
    check(user.startswith("# Similar solved examples\n"), name + ": the prompt opens with the examples")
    at = [user.find("## Example {}: {}\n".format(i + 1, e)) for i, e in enumerate(r["examples"])]
    check(all(a >= 0 for a in at) and at == sorted(at), name + ": each example by its id, best first")
    check(max(at) < user.find("# Task\n") < user.find("# Program to optimize"), name + ": the examples come before the task")
    check(0 < r["tokens"] <= BUDGET and not r["tokens_estimated"],
          name + ": {} tokens within the budget of {}, counted with the checkpoint's tokenizer".format(r["tokens"], BUDGET))
    check(LEAK_MARKER not in user and "leak_" not in user, name + ": no leak in the prompt")
    if leaky:
        check(r["excluded_exact"] == 2 and sorted(r["excluded"]) == ["leak_exact", "leak_reformatted"],
              name + ": both copies excluded as exact leaks ({})".format(r["excluded"]))
    else:
        check(r["excluded_exact"] == 0 and r["excluded_near"] == 0, name + ": nothing excluded")
    return p


def query_ids(out):
    """The entry ids of `kbrl-index query`'s hit lines, best first."""
    ids = []
    for line in out.splitlines():
        m = re.match(r"^\s*\d+\.\s+\S+\s+(\S+)\s+\[", line)
        if m:
            ids.append(m.group(1))
    return ids


def check_dense(args, problems, leaks, model, common):
    """A dense index of the same corpus, embedded in process with the demo policy's checkpoint: the
    prompts of `kbrl-eval model` hold the examples `kbrl-index query` returns; without the embedder
    settings, or with another model's, it is refused naming the flag and the model. Skipped where
    kbrl was built without FAISS."""
    dense = os.path.join(args.work, "examples.kbrldix")
    embed = ["--embeddings-checkpoint", model, "--embeddings-device", "cpu"]
    r = run([args.index, "build", "--corpus", os.path.join(args.source, "tests", "data", "retrieval", "corpus.jsonl"),
             "--corpus", leaks, "--field-id", "id", "--field-language", "language", "--dense", *embed, "--out", dense])
    if r.returncode != 0 and "without FAISS" in r.stdout + r.stderr:
        print("skip dense: kbrl was built without FAISS")
        return
    check(r.returncode == 0 and os.path.isfile(dense), "kbrl-index build --dense with the demo checkpoint")
    name = os.path.basename(os.path.normpath(model))
    flags = ["--retrieval-index", dense, "--retrieval-language", "any", "--retrieval-k", "2",
             "--retrieval-token-budget", "100000"]
    embedder = ["--retrieval-embeddings-checkpoint", model, "--retrieval-embeddings-device", "cpu"]
    run_dir = os.path.join(args.work, "run_dense")
    one = list(common)
    one[one.index("--samples") + 1] = "1"  # the prompts are what is checked
    r = run([args.eval, "model", *one, "--run", run_dir, *flags, *embedder])
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-5000:])
    check(r.returncode == 0, "kbrl-eval model with a dense --retrieval-index exits 0")
    for number, problem in ((4, LEAKY), (6, OTHER)):
        path = os.path.join(run_dir, "level_1_problem_{}_prompt.json".format(number))
        if not os.path.isfile(path):
            check(False, os.path.basename(path) + " written (dense)")
            continue
        shown = json.load(open(path))["retrieval"]["examples"]
        q = run([args.index, "query", "--index", dense, "--problem", os.path.join(problems, problem), "-k", "2", *embed])
        check(q.returncode == 0 and shown == query_ids(q.stdout) and len(shown) == 2,
              "{}: the dense prompt's examples are kbrl-index query's hits ({} vs {})".format(
                  problem, shown, query_ids(q.stdout)))
    bad = os.path.join(args.work, "bad_dense")
    r = run([args.eval, "model", *one, "--run", bad, *flags])
    check(r.returncode == 2 and "--retrieval-embeddings-checkpoint" in r.stderr and
          "a dense index of embeddings of '{}'".format(name) in r.stderr,
          "a dense index without --retrieval-embeddings-*: exit 2 naming the flag and the model ({})".format(
              r.stderr.strip()[-300:]))
    r = run([args.eval, "model", *one, "--run", bad, *flags, *embedder, "--retrieval-embeddings-model", "renamed"])
    check(r.returncode == 1 and "built with embeddings of '{}'".format(name) in r.stderr and "'renamed'" in r.stderr,
          "a dense index with another embedder: exit 1 naming both ({})".format(r.stderr.strip()[-300:]))

    # kbrl-train with the same dense index and settings (about 4 s): the same examples in its prompts;
    # without the embedder keys it stops when it reads the config, naming the key and the model.
    train = [args.train, os.path.join(args.source, "examples", "configs", "cpu_demo.yaml"), "model.path=" + model,
             "dataset.problems=" + problems, "dataset.eval_fraction=0.0", "dataset.max_steps=1", "dataset.group_size=2",
             "sampling.max_tokens=8", "prompt.retrieval.index=" + dense, "prompt.retrieval.language=any",
             "prompt.retrieval.k=2", "prompt.retrieval.token_budget=100000"]
    log_path = os.path.join(args.work, "train_dense")
    r = run([*train, "log_path=" + log_path + "_refused"], cwd=args.source)
    check(r.returncode == 1 and "prompt.retrieval.embeddings_endpoint" in r.stderr and
          "a dense index of embeddings of '{}'".format(name) in r.stderr and not os.path.exists(log_path + "_refused"),
          "kbrl-train: a dense index without prompt.retrieval.embeddings_* stops at the config ({})".format(
              r.stderr.strip()[-300:]))
    r = run([*train, "log_path=" + log_path, "prompt.retrieval.embeddings_checkpoint=" + model,
             "prompt.retrieval.embeddings_device=cpu"], cwd=args.source)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-5000:])
    check(r.returncode == 0, "kbrl-train with a dense prompt.retrieval.index runs a step")
    traces = os.path.join(log_path, "traces.jsonl")
    traces = jsonl(traces) if os.path.isfile(traces) else []
    for number in (4, 6):
        path = os.path.join(run_dir, "level_1_problem_{}_prompt.json".format(number))
        if not os.path.isfile(path):
            continue
        p = json.load(open(path))
        user = p["messages"][1]["content"]
        check(any(t["problem_id"] == p["problem_id"] and user in t["prompt"] for t in traces),
              "{}: kbrl-train's dense prompt holds kbrl-eval's, examples and all".format(p["problem_id"]))


def main():
    ap = argparse.ArgumentParser()
    for a in ("--eval", "--index", "--train", "--source", "--work"):
        ap.add_argument(a, required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--model", help="the demo policy (scripts/make_demo_model.py); made here when not given")
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    problems = os.path.join(args.work, "problems")
    os.makedirs(problems)
    for name in (LEAKY, OTHER):
        shutil.copy(os.path.join(args.source, "examples", "problems", name), problems)
    leaks = os.path.join(args.work, "leaks.jsonl")
    write_leaks(leaks, open(os.path.join(problems, LEAKY)).read())
    index = os.path.join(args.work, "examples.kbrlidx")
    r = run([args.index, "build", "--corpus", os.path.join(args.source, "tests", "data", "retrieval", "corpus.jsonl"),
             "--corpus", leaks, "--field-id", "id", "--field-language", "language", "--out", index])
    check(r.returncode == 0 and os.path.isfile(index), "kbrl-index build: the corpus and the leaks")
    model = args.model or os.path.join(args.work, "model")
    if not args.model:
        subprocess.run([args.python, os.path.join(args.source, "scripts", "make_demo_model.py"), model], check=True,
                       capture_output=True)

    # kbrl-eval model with the index.
    retrieval = ["--retrieval-index", index, "--retrieval-language", "any", "--retrieval-token-budget", str(BUDGET)]
    common = ["--model", model, "--problems", problems, "--level", "1", "--samples", "2", "--max-tokens", "8",
              "--model-device", "cpu", "--no-one-shot", "--no-static-check", "--work-dir", os.path.join(args.work, "eval-work")]
    run_dir = os.path.join(args.work, "run")
    r = run([args.eval, "model", *common, "--run", run_dir, *retrieval])
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-5000:])
    check(r.returncode == 0, "kbrl-eval model --retrieval-index exits 0")
    lines = [line for line in r.stderr.splitlines() if line.startswith("kbrl-eval: retrieval for ")]
    check(len(lines) == 2 and any("leaks excluded: 2 exact, 0 near (leak_exact, leak_reformatted)" in line for line in lines),
          "a log line per problem, naming the leaks: {}".format(lines))
    leaky = check_prompt(os.path.join(run_dir, "level_1_problem_4_prompt.json"), True)
    other = check_prompt(os.path.join(run_dir, "level_1_problem_6_prompt.json"), False)
    gens = jsonl(os.path.join(run_dir, "generations.jsonl")) if os.path.isfile(os.path.join(run_dir, "generations.jsonl")) else []
    check(len(gens) == 4, "two answers per problem")
    if leaky and other:
        by_problem = {4: leaky["retrieval"], 6: other["retrieval"]}
        check(all(g.get("retrieval") == by_problem[g["problem"]] for g in gens),
              "generations.jsonl: each answer's line carries its prompt's retrieval counts")

    # Bad settings: a missing index is a missing file (1), the rest usage errors (2).
    bad = os.path.join(args.work, "bad")
    for what, extra, code, says in [
            ("a missing index", ["--retrieval-index", os.path.join(args.work, "none.kbrlidx")], 1, "no such file"),
            ("--retrieval-k 0", ["--retrieval-index", index, "--retrieval-k", "0"], 2, "--retrieval-k: 0 examples"),
            ("--retrieval-token-budget -1", ["--retrieval-index", index, "--retrieval-token-budget", "-1"], 2,
             "--retrieval-token-budget: -1 is below 0"),
            ("no example of the language asked (cpp)", ["--retrieval-index", index], 1, "holds no cpp examples")]:
        r = run([args.eval, "model", *common, "--run", bad, *extra])
        check(r.returncode == code and says in r.stderr,
              "{} exits {} saying '{}' (got {}: {})".format(what, code, says, r.returncode, r.stderr.strip()[-200:]))

    check_dense(args, problems, leaks, model, common)

    # One step of kbrl-train with prompt.retrieval.
    log_path = os.path.join(args.work, "train")
    r = run([args.train, os.path.join(args.source, "examples", "configs", "cpu_demo.yaml"), "model.path=" + model,
             "log_path=" + log_path, "dataset.problems=" + problems, "dataset.eval_fraction=0.0", "dataset.max_steps=1",
             "dataset.group_size=2", "sampling.max_tokens=8", "prompt.retrieval.index=" + index,
             "prompt.retrieval.language=any", "prompt.retrieval.token_budget=" + str(BUDGET)], cwd=args.source)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-5000:])
    check(r.returncode == 0, "kbrl-train with prompt.retrieval runs a step")
    metrics = jsonl(os.path.join(log_path, "metrics.jsonl")) if os.path.isfile(os.path.join(log_path, "metrics.jsonl")) else [{}]
    m = metrics[-1]
    check(all(k in m for k in ("retrieval/examples", "retrieval/excluded_exact", "retrieval/excluded_near",
                               "retrieval/dropped", "retrieval/tokens")), "the step's metrics carry retrieval/*")
    # Both problems in the batch: the leaky one excludes two, the other none.
    check(m.get("retrieval/excluded_exact") == 1.0 and m.get("retrieval/examples", 0) >= 1,
          "retrieval/excluded_exact is the mean over the prompts (2 and 0): {}".format(m.get("retrieval/excluded_exact")))
    logs = open(os.path.join(log_path, "logs.log")).read() if os.path.isfile(os.path.join(log_path, "logs.log")) else ""
    check(logs.count("kbrl-train: retrieval for ") == 2 and "leaks excluded: 2 exact, 0 near" in logs,
          "logs.log: a retrieval line per problem")
    traces = jsonl(os.path.join(log_path, "traces.jsonl")) if os.path.isfile(os.path.join(log_path, "traces.jsonl")) else []
    check(len(traces) == 4 and all("# Similar solved examples" in t["prompt"] and LEAK_MARKER not in t["prompt"]
                                   for t in traces), "the traces' prompts hold the examples and no leak")
    # Another program, another process, the same settings and tokenizer: the same examples, byte for byte.
    if leaky and other:
        for p in (leaky, other):
            user = p["messages"][1]["content"]
            check(any(t["problem_id"] == p["problem_id"] and user in t["prompt"] for t in traces),
                  "{}: kbrl-train's prompt holds kbrl-eval's task prompt, examples and all".format(p["problem_id"]))
    config = open(os.path.join(log_path, "config.yaml")).read() if os.path.isfile(os.path.join(log_path, "config.yaml")) else ""
    check("retrieval.index: " in config and index in config, "config.yaml records prompt.retrieval")

    print("{} failure(s)".format(len(FAILURES)))
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
