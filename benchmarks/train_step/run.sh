#!/usr/bin/env bash
# A LoRA training step of kbrl next to transformers + PEFT on the GPU machine, in one run: the
# same random bf16 checkpoint with Qwen2.5-Coder-1.5B's shapes, LoRA r=32 on every projection,
# one 4096-token sequence, forward + backward with activation checkpointing; and adapter parity
# in both directions (kbrl's adapter in PEFT, PEFT's in kbrl) on that model.
#
# usage: bash benchmarks/train_step/run.sh [build dir (build/cuda)] [out dir (benchmarks/train_step/out)]
#
# Needs the cuda preset's kbrl_bench_train_step, python3 with torch, transformers and peft, ~4 GB
# of disk. Writes results.md and the JSON files into the out dir. About 4 minutes on an H100.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/gpu/env.sh"  # a carried bubblewrap on PATH (the evaluator's sandbox)
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"  # the comment above
  exit 0
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../../build/cuda}"
out="${2:-$here/out}"
python="${PYTHON:-python3}"
bench="$build/benchmarks/train_step/kbrl_bench_train_step"
[[ -x "$bench" ]] || { echo "run.sh: $bench is missing: build the cuda preset's kbrl_bench_train_step" >&2; exit 2; }
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-train-step.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" "$here/../sampler/sampler_bench.py" make "$work/model"
"$python" "$here/train_step_bench.py" prepare "$work/model" "$work"
"$bench" "$work/model" "$work"
"$python" "$here/train_step_bench.py" check "$work/model" "$work"
"$python" "$here/train_step_bench.py" time "$work/model" "$work"
cp "$work"/*.json "$out"/
"$python" "$here/train_step_bench.py" summarize "$work/model" "$work" "$out"
