"""examples/python's TRL and verl reward functions, called the way TRL's GRPOTrainer and verl's
reward managers call them, on answers built from the bundled solutions: a correct kernel, a wrong
one, a reward hack the static checker rejects, and an answer without code. The rewards must be
stage2's: 1 for the correct kernel, 0.3 plus partial credit for the wrong one, 0 for the hack and
for the answer without a kernel; TRL's list, verl's per-call and batched scores must agree.

    python examples_test.py --source <checkout> --work <evaluator work dir> [--compile-cache <dir>]
        (PYTHONPATH holds kbrl*.so)
"""
import argparse
import json
import os
import sys
import time


def answer(source):
    return f"<think>One pass over the data.</think>\n<KERNEL>\n```python\n{source}```\n</KERNEL>"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--source", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--compile-cache", default="")
    args = p.parse_args()
    # The examples read their settings from the environment; the same ones kbrl-eval's test uses,
    # so that its builds and reference timings in the work directory are reused.
    settings = {"device": "cpu", "timing_trials": 5, "warmup_runs": 1, "work_dir": args.work}
    if args.compile_cache:
        settings["compile_cache_dir"] = args.compile_cache
    os.environ["KBRL_EVALUATOR_SETTINGS"] = json.dumps(settings)
    os.environ["KBRL_LANGUAGE"] = "cpp"
    os.environ["KBRL_REWARD"] = "kbrl_stage2"
    sys.path.insert(0, os.path.join(args.source, "examples", "python"))
    import kbrl
    import trl_reward
    import verl_reward

    solutions = os.path.join(args.source, "examples", "solutions")
    problems = {p["number"]: p for p in kbrl.load_problems(os.path.join(args.source, "examples", "problems"))}

    def read(name):
        with open(os.path.join(solutions, name)) as f:
            return f.read()

    cases = [  # (problem number, answer, what the reward must be)
        (3, answer(read("level_1_problem_3_sample_0_kernel.py")), "correct"),
        (2, answer(read("level_1_problem_2_sample_1_kernel.py")), "wrong"),
        (2, answer(read("level_1_problem_2_sample_2_kernel.py")), "hack"),
        (4, "I would write a softmax kernel here.", "no kernel"),
    ]
    failures = []

    def check(where, rewards, which=cases):
        if len(rewards) != len(which):
            failures.append(f"{where}: {len(rewards)} rewards for {len(which)} completions")
        for (_, _, kind), r in zip(which, rewards):
            ok = {"correct": abs(r - 1.0) < 1e-9, "wrong": 0.3 - 1e-9 <= r < 1.0,
                  "hack": r == 0.0, "no kernel": r == 0.0}[kind]
            print(f"  {where}: {kind}: {r:.4f}")
            if not ok:
                failures.append(f"{where}: the {kind} answer got {r}")

    # TRL: conversational completions, the dataset's extra columns as keyword lists.
    rows = trl_reward.dataset_rows([problems[n] for n, _, _ in cases], language="cpp")
    t0 = time.monotonic()
    trl = trl_reward.kernel_reward(
        prompts=[row["prompt"] for row in rows],
        completions=[[{"role": "assistant", "content": text}] for _, text, _ in cases],
        problem=[row["problem"] for row in rows],
        completion_ids=[[0] * 100 for _ in cases], trainer_state=None)
    print(f"TRL kernel_reward: {time.monotonic() - t0:.1f} s")
    if not (isinstance(trl, list) and all(isinstance(r, float) for r in trl)):
        failures.append(f"TRL reward is not a list of floats: {trl!r}")
    check("TRL", trl)
    # standard (non-conversational) completions are plain strings
    plain = trl_reward.kernel_reward(prompts=["p"], completions=[cases[0][1]], problem=[problems[3]])
    check("TRL (plain text)", plain, cases[:1])

    # verl: ground_truth is the reference program, extra_info names the problem.
    t0 = time.monotonic()
    # one call per response (verl's naive manager) on the correct and the hack answer, the batch on all
    single = [cases[0], cases[2]]
    verl_one = [verl_reward.compute_score(data_source="kernelbench", solution_str=text,
                                          ground_truth=problems[n]["source"], extra_info={"problem_id": problems[n]["id"]})
                for n, text, _ in single]
    verl_batch = verl_reward.compute_score_batch(
        data_sources=["kernelbench"] * len(cases), solution_strs=[t for _, t, _ in cases],
        ground_truths=[problems[n]["source"] for n, _, _ in cases],
        extra_infos=[{"problem_id": problems[n]["id"]} for n, _, _ in cases])
    print(f"verl compute_score x{len(single)} and compute_score_batch x{len(cases)}: {time.monotonic() - t0:.1f} s")
    for name, scores, which in (("verl compute_score", verl_one, single), ("verl compute_score_batch", verl_batch, cases)):
        if len(scores) != len(which) or not all(isinstance(s, dict) and isinstance(s["score"], float) for s in scores):
            failures.append(f"{name} did not return a dict with a float score per response: {scores!r}")
            continue
        check(name, [s["score"] for s in scores], which)
    if verl_one and verl_one[0].get("correct") != 1.0:
        failures.append(f"verl's extra info for the correct kernel: {verl_one[0]}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        sys.exit(1)
    print("ok")


if __name__ == "__main__":
    main()
