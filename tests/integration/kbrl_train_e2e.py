#!/usr/bin/env python3
"""kbrl-train end to end on the CPU with real processes: the demo policy (scripts/make_demo_model.py)
on the bundled problems with the CPU evaluator. Two steps of single-turn training on two ranks
(torchrun, the store backend) and of multi-turn training write every output file, once; a run
killed with SIGKILL in the middle resumes and its metrics show each step exactly once;
TensorBoard's own reader finds our scalars and histograms; `kbrl-train runs` / `status` report the
runs' states.

The single-turn run, the killed run and their uninterrupted reference are asynchronous
(train.max_steps_off_policy=1: each batch sampled from the weights of the step before the last),
the multi-turn run synchronous. Resume is checked against an uninterrupted run of the same config
and seed (on the CPU a step is deterministic: same samples, rewards, advantages, losses and
weights): the SIGKILLed run, and a run put in the exact file state of a kill between a step's
metrics line and its checkpoint line (the redo path, which a kill at a random moment hits only by
chance), must end with the same per-step metrics (time/* aside), traces and checkpoint files
(byte for byte; the optimizer's tensors one by one, without the random generators' states). The
two-rank run must sample, score and train what the one-rank reference did (losses within
floating-point rounding of the sum over ranks), and refuse to resume on one rank.

    kbrl_train_e2e.py --train <kbrl-train> --source <repo> --work <scratch dir>
"""
import argparse
import json
import re
import os
import shutil
import signal
import subprocess
import sys
import time

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        FAILURES.append(what)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


ASYNC = "train.max_steps_off_policy=1"


def run_train(args, log_path, *overrides, timeout=900, ranks=1):
    cmd = [args.train, os.path.join(args.source, "examples/configs/cpu_demo.yaml"),
           f"model.path={args.model}", f"log_path={log_path}", *overrides]
    if ranks > 1:
        cmd = [args.python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}",
               "--no-python", *cmd]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=args.source)
    if r.returncode != 0:
        print(r.stdout[-3000:], r.stderr[-5000:])
    return r


def check_outputs(log_path, steps, multi_turn):
    name = os.path.basename(log_path)
    for f in ["config.yaml", "metrics.jsonl", "traces.jsonl", "checkpoints.jsonl", "run.json", "logs.log"]:
        check(os.path.isfile(os.path.join(log_path, f)), f"{name}: {f} written")
    metrics = read_jsonl(os.path.join(log_path, "metrics.jsonl"))
    check([m["step"] for m in metrics] == list(range(steps)), f"{name}: one metrics line per step")
    for key in ["reward/mean", "reward/std", "reward/min", "reward/max", "kernel/format_rate", "kernel/compile_rate",
                "kernel/correct_rate", "kernel/cheat_rate", "kernel/speedup_mean", "time/sample", "time/eval_wait",
                "time/train", "time/step", "tokens/completion", "sampling/completed_fraction"]:
        check(all(key in m for m in metrics), f"{name}: metrics carry {key}")
    if multi_turn:
        check(all("multiturn/success_rate" in m and "multiturn/avg_turns" in m for m in metrics),
              f"{name}: multi-turn metrics")
        for key in ["multiturn/compile_rate", "multiturn/correct_rate", "multiturn/max_correct_per_trajectory",
                    "multiturn/turn_1/compile_rate"]:
            check(all(key in m for m in metrics), f"{name}: metrics carry {key}")
    with open(os.path.join(log_path, "logs.log")) as f:
        logged = f.read().splitlines()
    done = [line for line in logged if " step " in line and " done in " in line]
    check(len(done) >= steps, f"{name}: logs.log holds a line per step ({len(done)})")
    check(all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ ", line) for line in logged),
          f"{name}: logs.log lines are timestamped")
    check(not any("\r" in line for line in logged), f"{name}: logs.log has no progress redraws")
    traces = read_jsonl(os.path.join(log_path, "traces.jsonl"))
    check(len(traces) >= steps * 2 * 2, f"{name}: a trace line per rollout ({len(traces)})")
    t = traces[0]
    for key in ["step", "group", "sample", "turn", "problem_id", "prompt", "completion", "kernel", "eval", "reward",
                "advantage"]:
        check(key in t, f"{name}: traces carry {key}")
    check("<|im_start|>" in t["prompt"], f"{name}: the trace holds the rendered prompt")
    if multi_turn:
        check(any(x["turn"] == 1 for x in traces), f"{name}: some episode reached a second turn")
        later = [x for x in traces if x["turn"] == 1]
        if later:
            check(later[0]["prompt"].count("<|im_start|>assistant") >= 2, f"{name}: a later turn carries the earlier answer")
    ckpts = read_jsonl(os.path.join(log_path, "checkpoints.jsonl"))
    check([c["step"] for c in ckpts] == list(range(steps)), f"{name}: a checkpoint per step")
    last = ckpts[-1]
    check(os.path.isfile(os.path.join(log_path, last["state"], "state.json")), f"{name}: the training state exists")
    check(os.path.isfile(os.path.join(log_path, last["adapter"], "adapter_config.json")) and
          os.path.isfile(os.path.join(log_path, last["adapter"], "adapter_model.safetensors")),
          f"{name}: the PEFT adapter exists")
    tb = os.path.join(log_path, "tb")
    check(os.path.isdir(tb) and any(f.startswith("events.out.tfevents") for f in os.listdir(tb)),
          f"{name}: TensorBoard event file")
    return metrics


def deterministic_metrics(log_path):
    """Each step's metrics without the time/* ones (wall clock)."""
    return [{k: v for k, v in m.items() if not k.startswith("time/")}
            for m in read_jsonl(os.path.join(log_path, "metrics.jsonl"))]


def trace_keys(log_path):
    """What a step sampled and how it was scored (the evaluation's timings aside)."""
    return [(t["step"], t["group"], t["sample"], t["turn"], t["completion"], t["reward"], t["advantage"])
            for t in read_jsonl(os.path.join(log_path, "traces.jsonl"))]


def checkpoint_files(log_path):
    """checkpoints.jsonl's lines, and the bytes of every file of every checkpoint they name; the
    optimizer file tensor by tensor without the generators' states (rng.*): libtorch seeds its CPU
    generator at random in each process, and nothing in these runs draws from it."""
    from safetensors.numpy import load_file
    lines = read_jsonl(os.path.join(log_path, "checkpoints.jsonl"))
    files = {}
    for c in lines:
        for key in ("state", "adapter"):
            folder = os.path.join(log_path, c[key])
            for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
                path = os.path.join(folder, name)
                if name == "optimizer.safetensors":
                    for tensor, value in load_file(path).items():
                        if not tensor.startswith("rng."):
                            files[f"{c[key]}/{name}:{tensor}"] = (value.dtype.str, value.shape, value.tobytes())
                else:
                    with open(path, "rb") as f:
                        files[f"{c[key]}/{name}"] = f.read()
    return lines, files


def check_same_run(reference, other, what):
    """`other` (interrupted and resumed) ends where the uninterrupted `reference` did."""
    want, got = deterministic_metrics(reference), deterministic_metrics(other)
    differ = [(m.get("step"), k, m.get(k), w.get(k)) for m, w in zip(got, want)
              for k in sorted(set(m) | set(w)) if m.get(k) != w.get(k)]
    same = len(got) == len(want) and not differ
    check(same, f"{what}: per-step metrics equal the uninterrupted run's" +
          ("" if same else f" ({len(got)} vs {len(want)} lines; first differences (step, key, got, want): {differ[:4]})"))
    check(trace_keys(other) == trace_keys(reference), f"{what}: the same samples, rewards and advantages")
    want_lines, want_files = checkpoint_files(reference)
    got_lines, got_files = checkpoint_files(other)
    check(got_lines == want_lines,
          f"{what}: the same checkpoint lines" + ("" if got_lines == want_lines else f" ({got_lines} vs {want_lines})"))
    check(len(want_files) >= 5 * len(want_lines), f"{what}: the reference's checkpoints hold their files")
    differ = sorted(k for k in set(want_files) | set(got_files) if want_files.get(k) != got_files.get(k))
    check(not differ, f"{what}: every checkpoint file (state, optimizer, adapters) byte for byte" +
          (f" (differ: {differ[:4]})" if differ else ""))


def check_same_as_one_rank(one, two, steps):
    """The first `steps` steps of `two` (trained on two ranks) against `one` (one rank): the same
    samples, rewards and advantages; training metrics within the rounding of summing over ranks."""
    check(trace_keys(two) == [t for t in trace_keys(one) if t[0] < steps],
          "two ranks: the same samples, rewards and advantages as one rank")
    want, got = deterministic_metrics(one)[:steps], deterministic_metrics(two)
    differ = []
    for w, g in zip(want, got):
        for k in sorted(set(w) | set(g)):
            if k.startswith("eval/"):
                continue  # the two-rank run evaluated its held-out split, the reference did not
            a, b = g.get(k), w.get(k)
            if k.startswith("train/") and isinstance(a, float) and isinstance(b, float):
                if abs(a - b) > 1e-5 * max(1.0, abs(b)):
                    differ.append((w["step"], k, a, b))
            elif a != b:
                differ.append((w["step"], k, a, b))
    check(len(got) == steps and not differ,
          f"two ranks: the one-rank run's metrics and losses ({len(got)} steps; differences: {differ[:4]})")


def cut_to_kill_before_checkpoint_line(log_path, step):
    """The files of a run killed after `step`'s metrics line, before its checkpoint line: the
    checkpoint folder of `step` is written (it comes first), its metrics and traces lines are
    there, its checkpoint line and everything of later steps are not, and run.json still says
    running. (The TensorBoard events of later steps stay: a resume does not read them.)"""
    def keep(name, last):
        path = os.path.join(log_path, name)
        lines = [line for line in open(path) if line.strip() and json.loads(line)["step"] <= last]
        with open(path, "w") as f:
            f.writelines(lines)
    keep("checkpoints.jsonl", step - 1)
    keep("metrics.jsonl", step)
    keep("traces.jsonl", step)
    for c in read_jsonl(os.path.join(log_path, "checkpoints.jsonl")):
        assert c["step"] < step
    for name in os.listdir(os.path.join(log_path, "checkpoints")):
        if int(name.split("_")[1]) > step + 1:
            shutil.rmtree(os.path.join(log_path, "checkpoints", name))
    run = json.load(open(os.path.join(log_path, "run.json")))
    run["state"] = "running"
    with open(os.path.join(log_path, "run.json"), "w") as f:
        json.dump(run, f)


def check_tensorboard(log_path, steps):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(os.path.join(log_path, "tb"), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    check("reward/mean" in tags["scalars"], "tensorboard reads the scalar reward/mean")
    if "reward/mean" in tags["scalars"]:
        events = acc.Scalars("reward/mean")
        check([e.step for e in events] == list(range(1, steps + 1)), "tensorboard: reward/mean at every step")
        metrics = read_jsonl(os.path.join(log_path, "metrics.jsonl"))
        check(all(abs(e.value - m["reward/mean"]) < 1e-5 * max(1, abs(m["reward/mean"]))
                  for e, m in zip(events, metrics)), "tensorboard: the values are the metrics'")
    check("reward" in tags["histograms"] and "advantage" in tags["histograms"],
          f"tensorboard reads the histograms reward and advantage ({tags['histograms']})")
    if "reward" in tags["histograms"]:
        h = acc.Histograms("reward")
        check(len(h) == steps and h[0].histogram_value.num == 8, "tensorboard: a reward histogram of 8 rollouts per step")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--train", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--custom-train", help="examples/custom_reward's training program")
    ap.add_argument("--python", default=sys.executable)
    args = ap.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    args.model = os.path.join(args.work, "model")
    subprocess.run([args.python, os.path.join(args.source, "scripts/make_demo_model.py"), args.model], check=True)

    # Single turn, two asynchronous steps on two ranks.
    single = os.path.join(args.work, "runs", "single")
    r = run_train(args, single, "dataset.max_steps=2", "eval_every=2", ASYNC, ranks=2)
    check(r.returncode == 0, "single-turn on two ranks: kbrl-train exits 0")
    check(r.stderr.count("2/2 steps in") == 1, "two ranks: one final report (rank 0's)")
    if r.returncode == 0:
        metrics = check_outputs(single, 2, False)
        check("eval/reward_mean" in metrics[1] and metrics[1]["eval/problems"] == 3 and "eval/reward_mean" not in metrics[0],
              "single-turn: the held-out split is evaluated at step 2")
        check_tensorboard(single, 2)
        check([c["world_size"] for c in read_jsonl(os.path.join(single, "checkpoints.jsonl"))] == [2, 2],
              "two ranks: the checkpoints record the world size")
        check(sorted(os.listdir(os.path.join(single, "eval_work"))) == ["compile_cache", "rank0", "rank1"],
              "two ranks: an evaluator work dir per rank, one compile cache")
        check([m["async/policy_lag"] for m in metrics] == [0, 1], "asynchronous: batch 2 sampled one step behind")
        for key in ["sample_start", "sample_end", "eval_start", "eval_end", "train_start", "train_end", "step_end"]:
            check(all(f"time/{key}" in m for m in metrics), f"asynchronous: the timeline carries time/{key}")
        check(metrics[1]["time/sample_start"] < metrics[0]["time/train_end"],
              "asynchronous: batch 2 is sampled before step 1's training ends")
        r = run_train(args, single, "dataset.max_steps=3", "eval_every=2", ASYNC)
        check(r.returncode != 0 and "resumes only on as many" in r.stderr,
              f"a run of two ranks refuses to resume on one: {r.stderr[-300:]!r}")
        check([m["step"] for m in read_jsonl(os.path.join(single, "metrics.jsonl"))] == [0, 1],
              "the refused resume leaves the run's files as they were")

    # Multi-turn, two steps, sampled at temperature 0.7: the trainer's log p is the tempered
    # distribution's, as the sampler's is, so the two agree but for rounding.
    multi = os.path.join(args.work, "runs", "multi")
    r = run_train(args, multi, "dataset.max_steps=2", "env.multi_turn=true", "env.max_turns=2",
                  "sampling.temperature=0.7", "train.warmup_steps=2")
    check(r.returncode == 0, "multi-turn: kbrl-train exits 0")
    if r.returncode == 0:
        metrics = check_outputs(multi, 2, True)
        kls = [m["train/kl_sampler"] for m in metrics if "train/kl_sampler" in m]
        check(kls and all(0 <= kl < 1e-4 for kl in kls) and all(abs(m["train/ratio"] - 1) < 1e-3
                                                               for m in metrics if "train/ratio" in m),
              f"temperature 0.7: trainer and sampler agree (train/kl_sampler {kls})")
        lrs = {m["step"]: m["train/lr"] for m in metrics if "train/lr" in m}
        check(lrs and all(abs(lr - 0.01 * (s + 1) / 2) < 1e-12 for s, lr in lrs.items()),
              f"train.warmup_steps 2: learning rate 0.005 then 0.01 ({lrs})")

    # Killed in the middle of the second step, then resumed.
    killed = os.path.join(args.work, "runs", "killed")
    cmd = [args.train, os.path.join(args.source, "examples/configs/cpu_demo.yaml"), f"model.path={args.model}",
           f"log_path={killed}", "dataset.max_steps=3", ASYNC]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=args.source)
    metrics_file = os.path.join(killed, "metrics.jsonl")
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if os.path.exists(metrics_file) and len(read_jsonl(metrics_file)) >= 1:
            break
        time.sleep(0.05)
    time.sleep(0.3)  # into the next step
    check(proc.poll() is None, "kill test: the run is still going when it is killed")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    status = subprocess.run([args.train, "status", killed], capture_output=True, text=True)
    check(status.returncode == 0 and "crashed" in status.stdout, f"status of a killed run says crashed: {status.stdout!r}")
    before = len(read_jsonl(os.path.join(killed, "checkpoints.jsonl")))
    r = subprocess.run([args.train, f"log_path={killed}"], capture_output=True, text=True, cwd=args.source, timeout=900)
    if r.returncode != 0:
        print(r.stderr[-5000:])
    check(r.returncode == 0, "the killed run resumes from its own config.yaml and finishes")
    check("resuming" in r.stderr, "the resumed run says where it resumes")
    metrics = read_jsonl(metrics_file)
    check([m["step"] for m in metrics] == [0, 1, 2], f"resumed run: each step exactly once ({[m['step'] for m in metrics]})")
    ckpts = read_jsonl(os.path.join(killed, "checkpoints.jsonl"))
    check([c["step"] for c in ckpts] == [0, 1, 2], "resumed run: each checkpoint once")
    opt = [c["optimizer_steps"] for c in ckpts]
    check(all(b > a for a, b in zip(opt, opt[1:])) and before >= 1, f"no optimizer step repeated or lost: {opt}")
    traces = read_jsonl(os.path.join(killed, "traces.jsonl"))
    check(sorted({t["step"] for t in traces}) == [0, 1, 2], "resumed run: traces of each step")
    check(len([t for t in traces if t["step"] == 1 and t["turn"] == 0]) == 8, "resumed run: step 1's traces once")

    # The same run uninterrupted: what the resumed ones must have ended with.
    straight = os.path.join(args.work, "runs", "straight")
    r = run_train(args, straight, "dataset.max_steps=3", ASYNC)
    check(r.returncode == 0, "uninterrupted run: kbrl-train exits 0")
    if r.returncode == 0:
        check_same_run(straight, killed, "SIGKILLed and resumed run")
        check(os.path.isfile(os.path.join(straight, "checkpoints/step_000001/sampler_adapters.safetensors")),
              "asynchronous: a checkpoint keeps the adapters the next batches sample with")
        if os.path.isfile(os.path.join(single, "metrics.jsonl")):
            check_same_as_one_rank(straight, single, 2)

        # The redo path on purpose: a copy of the uninterrupted run cut back to a kill between step
        # 1's metrics line and its checkpoint line; the resume must drop step 1's lines and redo it.
        redo = os.path.join(args.work, "runs", "redo")
        shutil.copytree(straight, redo, ignore=shutil.ignore_patterns("eval_work", "run.lock"))
        cut_to_kill_before_checkpoint_line(redo, 1)
        check([m["step"] for m in read_jsonl(os.path.join(redo, "metrics.jsonl"))] == [0, 1] and
              [c["step"] for c in read_jsonl(os.path.join(redo, "checkpoints.jsonl"))] == [0],
              "redo: the files of the kill (metrics of steps 0 and 1, checkpoint line of step 0)")
        r = subprocess.run([args.train, f"log_path={redo}"], capture_output=True, text=True, cwd=args.source,
                           timeout=900)
        if r.returncode != 0:
            print(r.stderr[-5000:])
        check(r.returncode == 0, "redo: the run resumes and finishes")
        check("at step 1 of 3" in r.stderr, "redo: it resumes at step 1, the step without a checkpoint line")
        check([m["step"] for m in read_jsonl(os.path.join(redo, "metrics.jsonl"))] == [0, 1, 2],
              "redo: step 1's metrics once")
        check_same_run(straight, redo, "redone run")

    # A reward term of the user's own (examples/custom_reward/train.cpp).
    if args.custom_train:
        custom = os.path.join(args.work, "runs", "custom")
        r = subprocess.run([args.custom_train, os.path.join(args.source, "examples/configs/cpu_demo.yaml"),
                            f"model.path={args.model}", f"log_path={custom}", "dataset.max_steps=1"],
                           capture_output=True, text=True, cwd=args.source, timeout=900)
        if r.returncode != 0:
            print(r.stdout[-2000:], r.stderr[-3000:])
        check(r.returncode == 0 and "shared_memory weight 0.2" in r.stdout, "custom reward: a run trains with the term")
        if r.returncode == 0:
            traces = read_jsonl(os.path.join(custom, "traces.jsonl"))
            check(all("shared_memory" in t["reward_terms"]["terms"] for t in traces),
                  "custom reward: every rollout's reward has the user's term")
            check(len(read_jsonl(os.path.join(custom, "metrics.jsonl"))) == 1, "custom reward: one step")
        r = subprocess.run([args.train, os.path.join(args.source, "examples/configs/cpu_demo.yaml"),
                            f"model.path={args.model}", f"log_path={custom}-bare", "reward.weights.shared_memory=0.2"],
                           capture_output=True, text=True, cwd=args.source)
        check(r.returncode != 0 and "shared_memory" in r.stderr, "kbrl-train without the term rejects its weight")

    # Run management.
    runs = subprocess.run([args.train, "runs", os.path.join(args.work, "runs")], capture_output=True, text=True)
    finished = 6 if args.custom_train else 5
    check(runs.returncode == 0 and runs.stdout.count("finished") == finished,
          f"runs lists {finished} finished runs:\n{runs.stdout}")

    print(f"{len(FAILURES)} failure(s)")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
