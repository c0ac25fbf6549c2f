#!/usr/bin/env bash
# Runs on the GPU machine (through the device tool), from the repository root:
#   bash tests/gpu/run.sh [KernelBench checkout] [results dir]
# Builds with the cuda preset, runs every test (unit, integration on the CPU backend, and the
# CUDA tests in tests/gpu), and writes logs and result tables into the results dir.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"  # a carried bubblewrap on PATH (the evaluator's sandbox)
kb="${1:-}"
out="${2:-${OUT:-build/gpu-results}}"
mkdir -p "$out"
bash tests/gpu/build.sh "$out" || exit 1
export KBRL_GPU_RESULTS="$out"
if [[ "${KBRL_GPU_ONLY:-0}" != 1 ]]; then
  ctest --preset cuda -j 8 -E evaluator_cuda_test > "$out/ctest.log" 2>&1; rc_all=$?
  tail -15 "$out/ctest.log"
else
  rc_all=0
fi
( [[ -n "$kb" ]] && export KBRL_KERNELBENCH_ROOT="$kb"
  cd build/cuda && ./tests/gpu/evaluator_cuda_test --durations yes ) > "$out/gpu_tests.log" 2>&1; rc_gpu=$?
tail -60 "$out/gpu_tests.log"
# The model on CUDA (a few minutes): KBRL_GPU_MODEL=1. The tiny fixtures' parity, the sampler
# suite (CUDA graphs against the eager loop included), the decoder at Qwen2.5-Coder-1.5B's shapes.
rc_model=0
if [[ "${KBRL_GPU_MODEL:-0}" == 1 ]]; then
  { build/cuda/tests/model/model_parity tests/data/model/tiny --device cuda &&
    (cd build/cuda && KBRL_TEST_DEVICE=cuda ./tests/model/model_sampler_test) &&
    python3 tests/gpu/model_parity.py --build build/cuda; } > "$out/model_parity.log" 2>&1; rc_model=$?
  tail -40 "$out/model_parity.log"
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu.txt" 2>&1
exit $(( rc_all != 0 || rc_gpu != 0 || rc_model != 0 ))
