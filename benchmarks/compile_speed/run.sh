#!/usr/bin/env bash
# Compile time of a trivial elementwise candidate, CUDA and CPU (cpp), with each compile
# acceleration on and off (docs/evaluator.md, "Compile speed"). From anywhere:
#
# usage: bash benchmarks/compile_speed/run.sh [measure.py options (measure.py --help)]
#
# Needs python3 with torch (KBRL_PYTHON picks another interpreter), ninja and g++, and nvcc for
# the CUDA candidate (no GPU: only the compile stage runs). Builds run as the evaluator's compile
# lanes run them (MAX_JOBS=2: the binding file and the .cu side by side): first one at a time,
# then one per core at once. Prints markdown tables; with OUT set, writes $OUT/compile_speed.md (rewritten after every row, so a run cut
# short keeps what it measured) and $OUT/compile_speed.log.
#
# The whole default run takes about 15 minutes on a 16-core H100 host (the CUDA builds without
# accelerations are most of it). In parts of under 10 minutes each:
#   run.sh --languages cuda --settings plain,both
#   run.sh --languages cuda --settings pch,light
#   run.sh --languages cpp
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"  # the comment above
  exit 0
fi
repo="$(cd "$(dirname "$0")/../.." && pwd)"
python="${KBRL_PYTHON:-python3}"
languages=cuda,cpp
if ! command -v nvcc > /dev/null 2>&1 && [[ ! -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]]; then
  echo "no nvcc: the CPU candidate only" >&2
  languages=cpp
fi
log=/dev/null
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  log="$OUT/compile_speed.log"
fi
"$python" "$repo/benchmarks/compile_speed/measure.py" --languages "$languages" --parallel "$(nproc)" "$@" 2> >(tee "$log" >&2)
