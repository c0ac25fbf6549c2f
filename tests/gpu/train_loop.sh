#!/usr/bin/env bash
# kbrl-train on the GPU machine: a random model with Qwen2.5-Coder-1.5B's layers (a 32k
# vocabulary trained here; scripts/make_demo_model.py --shapes 1.5b) on four KernelBench level-1
# problems with the CUDA evaluator, two single-turn steps and two multi-turn steps; writes the
# per-phase time breakdown to <out>/train_loop.md. The reward adds a length term, so that answers
# that end sooner score higher and the random policy has something to learn (a training phase).
#   bash tests/gpu/train_loop.sh <KernelBench checkout> [build dir (build/cuda)] [out dir ($OUT)]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # a carried bubblewrap on PATH (the evaluator's sandbox)
kb="$1"
build="${2:-build/cuda}"
out="${3:-${OUT:-build/train-loop-results}}"
python="${PYTHON:-python3}"
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-train-loop.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" scripts/make_demo_model.py "$work/model" --shapes 1.5b --vocab 32000
common=(model.path="$work/model" dataset.problems="$kb" "dataset.levels=[1]" "dataset.include=level1/1[0-3]_*"
        dataset.eval_fraction=0 dataset.batch_size=4 dataset.group_size=8 dataset.max_steps=2 sampling.max_tokens=1024
        evaluator.timing_trials=20 train.micro_batch_tokens=32768 sampling.groups_per_call=4
        reward.weights.length=0.5 reward.length.target_tokens=64 reward.length.limit_tokens=1024)
"$build/apps/kbrl-train" examples/configs/single_turn.yaml "${common[@]}" log_path="$work/single" 2> "$out/single.log"
"$build/apps/kbrl-train" examples/configs/multi_turn.yaml "${common[@]}" env.max_turns=2 log_path="$work/multi" \
  2> "$out/multi.log"
for r in single multi; do cp "$work/$r/metrics.jsonl" "$out/$r-metrics.jsonl"; done
"$python" - "$out" "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" <<'PY'
import json, sys
out, gpu = sys.argv[1], sys.argv[2]
rows = ["| run | step | rollouts | completion tokens | sample s | eval wait s | train s | save s | step s | reward mean | format rate |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
for run in ["single", "multi"]:
    for m in (json.loads(l) for l in open(f"{out}/{run}-metrics.jsonl")):
        rows.append(f"| {run} | {m['step'] + 1} | {int(m['kernel/evaluations'])} | {int(m['tokens/completion'])} | "
                    f"{m['time/sample']:.1f} | {m['time/eval_wait']:.2f} | {m['time/train']:.1f} | {m['time/save']:.2f} | "
                    f"{m['time/step']:.1f} | {m['reward/mean']:.3f} | {m['kernel/format_rate']:.2f} |")
text = f"# kbrl-train on {gpu}\n\n" + "\n".join(rows) + "\n"
open(f"{out}/train_loop.md", "w").write(text)
print(text)
PY
