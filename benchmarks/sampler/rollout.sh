#!/usr/bin/env bash
# The rollout-shaped sampler benchmark on the GPU machine: 64 prompts x 8 samples with
# long-tailed completion lengths (log-normal, median 600, at most 4096) on the 1.5B shapes,
# continuous batching next to the same sampler run as fixed batches; then the 7B shapes with 64
# rows of 8,000 prompt tokens plus up to 192 new ones (64 x ~8k tokens in flight), for memory.
#
# usage: bash benchmarks/sampler/rollout.sh [build dir (build/cuda)] [out dir (benchmarks/sampler/out)]
#
# Needs the cuda preset's kbrl_bench_rollout, python3 with torch and transformers. Writes
# rollout-1.5b.json, rollout-7b-8k.json and rollout.md. ROLLOUT_ARGS passes options to the 1.5B
# run (e.g. "--max-batch 256"). About 3 minutes on an H100.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
  exit 0
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../../build/cuda}"
out="${2:-$here/out}"
python="${PYTHON:-python3}"
bench="$build/benchmarks/sampler/kbrl_bench_rollout"
[[ -x "$bench" ]] || { echo "rollout.sh: $bench is missing: build the cuda preset's kbrl_bench_rollout" >&2; exit 2; }
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-rollout-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" "$here/sampler_bench.py" make "$work/m15"
# shellcheck disable=SC2086
"$bench" "$work/m15" --json "$out/rollout-1.5b.json" ${ROLLOUT_ARGS:-}
"$python" "$here/sampler_bench.py" config "$work/c7" --shapes 7b
"$bench" "$work/c7" --random-weights --prompts 64 --samples 1 --prompt-tokens 8000 --median 150 --max 192 \
  --max-batch 64 --modes continuous --json "$out/rollout-7b-8k.json"
nvidia-smi --query-gpu=name --format=csv,noheader > "$out/rollout-gpu.txt"
"$python" "$here/sampler_bench.py" rollout-summary "$out"
