#!/usr/bin/env bash
# kbrl-train on a machine with two GPUs: data parallelism under torchrun and asynchronous steps.
# Writes <out>/train_scale.md (the results, PASS/FAIL per check) with the metrics and logs beside
# it; exits 1 when a check fails.
#
# 1. Data parallel: three synchronous steps of the same run on one rank (GPU 0) and on two ranks
#    (torchrun, NCCL), fp32, a random policy with Qwen2.5-Coder-1.5B's layers and a length-shaped
#    reward (the train_loop.sh setup). The two-rank run must sample, score and train what the
#    one-rank run did: the same samples and rewards, losses and gradient norms within
#    data_parallel.sh's fp32 tolerance (1e-3 relative), one set of run files written by rank 0.
#    Both sample one group per call (sampling.groups_per_call=1): the GPU's matrix products pick
#    their kernels by shape, so a batch of 4 groups and one of 2 would round differently and,
#    now and then, draw a different token.
# 2. Asynchronous steps: a small policy first fitted (fit_policy.py) to answer four level-1
#    problems with our working CUDA kernels, so that evaluation compiles and runs real kernels;
#    then the same run with train.max_steps_off_policy 0 and 1. From the per-phase timeline in
#    metrics.jsonl (time/sample_*, time/eval_*, time/train_*): in the steady state of the
#    asynchronous run (steps 3 on) the step time is at most 1.25x the longest phase.
#
#   bash tests/gpu/train_scale.sh <KernelBench checkout> [build dir (build/cuda)] [out dir ($OUT)] [parts (dp,async)]
# The parts can run in separate calls into the same out dir (each fits in the device's 10-minute
# limit); the report covers the parts whose results are there.
# Environment: PYTHON (python3), ASYNC_STEPS (5), DP_STEPS (3).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # a carried bubblewrap on PATH (the evaluator's sandbox)
kb="$1"
build="${2:-build/cuda}"
out="${3:-${OUT:-build/train-scale-results}}"
parts=",${4:-dp,async},"
python="${PYTHON:-python3}"
train="$build/apps/kbrl-train"
async_steps="${ASYNC_STEPS:-5}"
dp_steps="${DP_STEPS:-3}"
[[ -x "$train" ]] || { echo "train_scale.sh: $train is missing (build the cuda preset)" >&2; exit 2; }
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-train-scale.XXXXXX")"
trap 'rm -rf "$work"' EXIT
torchrun=("$python" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python)

# --- 1. data parallel -----------------------------------------------------------------------
if [[ $parts == *,dp,* ]]; then
"$python" scripts/make_demo_model.py "$work/model-dp" --shapes 1.5b --vocab 32000
dp=(model.path="$work/model-dp" model.device=cuda model.dtype=fp32 dataset.problems="$kb" "dataset.levels=[1]"
    "dataset.include=level1/1[0-3]_*" dataset.eval_fraction=0 dataset.batch_size=4 dataset.group_size=8
    dataset.max_steps="$dp_steps" sampling.max_tokens=256 sampling.groups_per_call=1 "evaluator.gpus=[]" evaluator.timing_trials=5
    train.learning_rate=1e-4 train.micro_batch_tokens=16384 train.remove_constant_reward_groups=false
    reward.weights.length=0.5 reward.length.target_tokens=8 reward.length.limit_tokens=64)
t0=$(date +%s.%N)
CUDA_VISIBLE_DEVICES=0 "$train" examples/configs/single_turn.yaml "${dp[@]}" log_path="$work/dp-one" 2> "$out/dp-one.log"
t1=$(date +%s.%N)
"${torchrun[@]}" "$train" examples/configs/single_turn.yaml "${dp[@]}" log_path="$work/dp-two" > "$out/dp-two.log" 2>&1
t2=$(date +%s.%N)
for r in dp-one dp-two; do
  cp "$work/$r/metrics.jsonl" "$out/$r-metrics.jsonl"
  cp "$work/$r/checkpoints.jsonl" "$out/$r-checkpoints.jsonl"
  "$python" -c "import json,sys; [print(json.dumps({k: t[k] for k in ('step','group','sample','completion','reward','advantage')})) for t in map(json.loads, open(sys.argv[1]))]" \
    "$work/$r/traces.jsonl" > "$out/$r-traces.jsonl"
done
ls "$work/dp-two" > "$out/dp-two-files.txt"; ls "$work/dp-two/eval_work" >> "$out/dp-two-files.txt"
echo "$t0 $t1 $t2" > "$out/dp-times.txt"
fi

# --- 2. asynchronous steps on a fitted policy -----------------------------------------------
if [[ $parts == *,async,* ]]; then
"$python" scripts/make_demo_model.py "$work/model-fit" --vocab 32000 --hidden 1024 --layers 6
fit=(model.path="$work/model-fit" model.device=cuda:0 model.dtype=fp32 dataset.problems="$kb" "dataset.levels=[1]"
     "dataset.include=[\"level1/19_*\", \"level1/2[0-2]_*\"]" dataset.eval_fraction=0 dataset.batch_size=4
     prompt.one_shot=false "evaluator.gpus=[0]")
# The prompts kbrl-train renders for the four problems (one step of the random policy).
"$train" examples/configs/single_turn.yaml "${fit[@]}" dataset.group_size=2 dataset.max_steps=1 sampling.max_tokens=8 \
  log_path="$work/prompts" 2> "$out/prompts.log"
"$python" tests/gpu/fit_policy.py "$work/model-fit" "$work/prompts/traces.jsonl" tests/gpu/kernelbench_l1 \
  "$work/adapter" > "$out/fit.log" 2>&1
cp "$work/adapter/fit.json" "$out/fit.json"
run=("${fit[@]}" lora.init_adapter="$work/adapter" dataset.group_size=4 dataset.max_steps="$async_steps"
     sampling.max_tokens=1536 sampling.temperature=0.7 sampling.groups_per_call=1 evaluator.timing_trials=20
     train.learning_rate=1e-5 train.remove_constant_reward_groups=false reward.preset=kbrl_stage2)
for k in 0 1; do
  "$train" examples/configs/single_turn.yaml "${run[@]}" train.max_steps_off_policy=$k log_path="$work/async-$k" \
    2> "$out/async-$k.log"
  cp "$work/async-$k/metrics.jsonl" "$out/async-$k-metrics.jsonl"
done
fi

"$python" - "$out" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" <<'PY'
import json, os, statistics, sys
out, gpu = sys.argv[1], sys.argv[2]
rd = lambda p: [json.loads(l) for l in open(p) if l.strip()]
rel = lambda x, y: abs(x - y) / max(abs(y), 1e-6)
lines, ok_all = [f"# kbrl-train on two GPUs ({gpu})", ""], True

def checks(named):
    global ok_all
    lines.extend([f"- {'PASS' if ok else 'FAIL'}: {n}" for n, ok in named.items()] + [""])
    ok_all &= all(named.values())

# 1. data parallel
if os.path.exists(f"{out}/dp-one-metrics.jsonl"):
    one, two = rd(f"{out}/dp-one-metrics.jsonl"), rd(f"{out}/dp-two-metrics.jsonl")
    t = [float(x) for x in open(f"{out}/dp-times.txt").read().split()]
    lines += ["## Data parallel: one rank vs two (torchrun, NCCL), fp32", "",
              "| step | loss, 1 rank | loss, 2 ranks | grad norm, 1 rank | grad norm, 2 ranks | reward mean 1 / 2 | step s 1 / 2 |",
              "|---|---|---|---|---|---|---|"]
    for a, b in zip(one, two):
        lines.append(f"| {a['step'] + 1} | {a['train/loss']:.7f} | {b['train/loss']:.7f} | {a['train/grad_norm']:.6f} | "
                     f"{b['train/grad_norm']:.6f} | {a['reward/mean']:.4f} / {b['reward/mean']:.4f} | "
                     f"{a['time/step']:.1f} / {b['time/step']:.1f} |")
    loss_err = max(rel(b["train/loss"], a["train/loss"]) for a, b in zip(one, two))
    norm_err = max(rel(b["train/grad_norm"], a["train/grad_norm"]) for a, b in zip(one, two))
    files = open(f"{out}/dp-two-files.txt").read().split()
    ckpts = rd(f"{out}/dp-two-checkpoints.jsonl")
    lines += ["", f"max relative difference: loss {loss_err:.2e}, grad norm {norm_err:.2e}; wall time with process start, "
              f"model load and evaluator start: 1 rank {t[1] - t[0]:.1f} s, 2 ranks {t[2] - t[1]:.1f} s", ""]
    traces = rd(f"{out}/dp-one-traces.jsonl"), rd(f"{out}/dp-two-traces.jsonl")
    differ = [(x, y) for x, y in zip(*traces) if x != y]
    if differ or len(traces[0]) != len(traces[1]):
        lines += [f"{len(differ)} of {len(traces[0])} rollouts differ ({len(traces[1])} in the two-rank run)."]
        for x, y in differ[:3]:
            fields = [k for k in x if x[k] != y.get(k)]
            where = next((i for i, (c, d) in enumerate(zip(x["completion"], y["completion"])) if c != d),
                         min(len(x["completion"]), len(y["completion"])))
            lines += [f"- step {x['step']} group {x['group']} sample {x['sample']}: {', '.join(fields)} differ; the "
                      f"completions part at character {where}: {x['completion'][where:where + 40]!r} / "
                      f"{y['completion'][where:where + 40]!r}; rewards {x['reward']} / {y['reward']}"]
        lines += [""]
    checks({
        "both runs complete every step": len(one) == len(two) > 0,
        "the same samples, rewards and advantages": traces[0] == traces[1],
        "losses within 1e-3 (data_parallel.sh's fp32 tolerance)": loss_err <= 1e-3,
        "grad norms within 1e-3": norm_err <= 1e-3,
        "rewards differ within groups (nonzero advantages to train on)":
            any(m["advantage/max"] > m["advantage/min"] for m in one),
        "the loss changed (training happened)": len({round(m["train/loss"], 9) for m in one}) > 1,
        "one set of run files (rank 0's), an evaluator work dir per rank":
            files.count("metrics.jsonl") == 1 and "rank0" in files and "rank1" in files,
        "checkpoints record two ranks": all(c["world_size"] == 2 for c in ckpts),
    })

# 2. asynchronous steps
if os.path.exists(f"{out}/async-1-metrics.jsonl"):
    fitj = json.load(open(f"{out}/fit.json"))
    lines += ["## Asynchronous steps (train.max_steps_off_policy=1) on a fitted policy", "",
              f"Policy: a random demo model (6 layers, hidden 1024) whose LoRA adapters were fitted to answer {', '.join(fitj['problems'])} "
              f"with our working kernels ({fitj['steps']} steps, loss per answer token {fitj['loss']:.4f}).", ""]
    # A batch's evaluations are submitted as it is sampled, but in the pipeline they queue behind the
    # previous batch's: its evaluation phase starts when both its first candidate is in and the
    # previous batch's last result is (time/eval_start is the first submission).
    def with_eval_phase(ms):
        prev_end = 0.0
        for m in ms:
            m["time/eval_start"] = max(m["time/eval_start"], prev_end)
            prev_end = m["time/eval_end"]
        return ms
    phase = lambda m, p: m[f"time/{p}_end"] - m[f"time/{p}_start"]
    summary = {}
    for k in (0, 1):
        ms = with_eval_phase(rd(f"{out}/async-{k}-metrics.jsonl"))
        lines += [f"### max_steps_off_policy = {k}", "",
                  "| step | lag | sample s | evaluate s | train s | step s | correct rate | sample | evaluate | train | step end |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for m in ms:
            lines.append(f"| {m['step'] + 1} | {int(m.get('async/policy_lag', 0))} | {phase(m, 'sample'):.1f} | "
                         f"{phase(m, 'eval'):.1f} | {phase(m, 'train'):.1f} | {m['time/step']:.1f} | "
                         f"{m['kernel/correct_rate']:.2f} | {m['time/sample_start']:.1f}-{m['time/sample_end']:.1f} | "
                         f"{m['time/eval_start']:.1f}-{m['time/eval_end']:.1f} | "
                         f"{m['time/train_start']:.1f}-{m['time/train_end']:.1f} | {m['time/step_end']:.1f} |")
        # A timeline to look at: one row per step, S sampling, E evaluating, T training (a column
        # is 1/100 of the run).
        end = max(m["time/step_end"] for m in ms)
        col = lambda x: min(99, int(100 * x / end))
        chart = []
        for m in ms:
            row = [" "] * 100
            for p, c in (("eval", "E"), ("sample", "S"), ("train", "T")):
                for i in range(col(m[f"time/{p}_start"]), col(m[f"time/{p}_end"]) + 1):
                    row[i] = c
            chart.append(f"step {m['step'] + 1:2d} |{''.join(row)}|")
        lines += ["", "```", *chart, f"         0 s{' ' * 88}{end:.0f} s", "```", ""]
        steady = ms[2:] if len(ms) > 2 else ms
        med = {p: statistics.median(phase(m, p) for m in steady) for p in ("sample", "eval", "train")}
        step_s = statistics.median(m["time/step"] for m in steady)
        summary[k] = (step_s, med)
        lines += [f"Steady state (steps 3 on), medians: step {step_s:.1f} s; sample {med['sample']:.1f} s, "
                  f"evaluate {med['eval']:.1f} s, train {med['train']:.1f} s", ""]
    step1, med1 = summary[1]
    longest = max(med1.values())
    evals = sum(m["kernel/evaluations"] for m in rd(f"{out}/async-1-metrics.jsonl"))
    compiled = statistics.mean(m["kernel/compile_rate"] for m in rd(f"{out}/async-1-metrics.jsonl"))
    lines += [f"Asynchronous step time {step1:.1f} s = {step1 / longest:.2f}x the longest phase ({longest:.1f} s); "
              f"synchronous step time {summary[0][0]:.1f} s. Candidates evaluated: {evals:.0f}, compile rate "
              f"{compiled:.2f} (mean over steps).", ""]
    checks({
        "asynchronous step time <= 1.25x the longest phase": step1 <= 1.25 * longest,
        "evaluation is real work: candidates compile, run and pass in every step":
            evals > 0 and all(m["kernel/correct_rate"] > 0 for m in rd(f"{out}/async-1-metrics.jsonl")),
        "every phase takes seconds": min(med1.values()) >= 1.0,
        "batches sampled one step behind": all(m["async/policy_lag"] <= 1 and m["async/dropped_stale"] == 0
                                               for m in rd(f"{out}/async-1-metrics.jsonl")),
    })
open(f"{out}/train_scale.md", "w").write("\n".join(lines))
print("\n".join(lines))
sys.exit(0 if ok_all else 1)
PY
