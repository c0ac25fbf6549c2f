#!/usr/bin/env bash
# Per-candidate evaluation time with inputs made on the GPU (kbrl's default) against inputs made
# on the host and copied, as KernelBench does (`--kernelbench-inputs`): the same candidates, the
# same builds, the same settings, one after the other in one run on one GPU machine.
#
# usage: bash benchmarks/eval_inputs/run.sh <KernelBench checkout> <out dir> [problem numbers...]
#
# Candidates: our CUDA kernels in tests/gpu/kernelbench_l1 (default: four problems, heavy and
# light). Writes <out>/results.md and the two runs' eval_results.jsonl. Needs the cuda preset.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/gpu/env.sh"  # a carried bubblewrap on PATH (the evaluator's sandbox)
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"  # the comment above
  exit 0
fi
kb="${1:?KernelBench checkout}"
out="${2:?out dir}"
shift 2
problems=("$@")
((${#problems[@]})) || problems=(1 19 40 47)
repo="$(cd "$(dirname "$0")/../.." && pwd)"
mkdir -p "$out"
out="$(cd "$out" && pwd)"
cd "$repo"
cmake --preset cuda > "$out/configure.log" 2>&1
cmake --build --preset cuda --target kbrl-eval -j "$(nproc)" > "$out/build.log" 2>&1
eval_bin="$repo/build/cuda/apps/kbrl-eval"
scratch="$(mktemp -d)"
for mode in device host; do
  mkdir -p "$scratch/$mode"
  for p in "${problems[@]}"; do
    src=$(ls tests/gpu/kernelbench_l1/"${p}"_*.py)
    cp "$src" "$scratch/$mode/level_1_problem_${p}_sample_0_kernel.py"
  done
done
common=(--problems "$kb" --level 1 --device cuda --work-dir "$scratch/work" --no-baseline-cache --seed 7)
# The first run also builds every candidate; the second finds the builds in the same work dir.
# Compile time is not part of the comparison: only the run stage (reference, load, correctness,
# timing) differs between the two ways of making inputs.
"$eval_bin" generations "${common[@]}" --run "$scratch/device" > "$out/device.log" 2>&1
"$eval_bin" generations "${common[@]}" --run "$scratch/host" --kernelbench-inputs > "$out/host.log" 2>&1
cp "$scratch/device/eval_results.jsonl" "$out/device.jsonl"
cp "$scratch/host/eval_results.jsonl" "$out/host.jsonl"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpu.txt" 2>&1 || true
python3 "$repo/benchmarks/eval_inputs/summarize.py" "$out/device.jsonl" "$out/host.jsonl" "$out/gpu.txt" | tee "$out/results.md"
