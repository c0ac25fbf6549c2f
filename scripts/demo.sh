#!/usr/bin/env bash
# The main job on the bundled default, on the CPU: the tiny demo policy learns to write correct C++
# kernels (examples/configs/elementwise_demo.yaml; scripts/run_demo.sh runs the steps):
#   1. a supervised warm start on kernels of examples/demo, each also in a buggy copy;
#   2. fresh samples of the warm-started policy, evaluated by the CPU evaluator;
#   3. GRPO with the CPU evaluator (reward: format, compile, correctness);
#   4. fresh samples of the trained policy, evaluated as in 2;
# into runs/demo (runs/demo/grpo/progress.png plots reward and correct rate per step and the rates
# before and after; runs/demo/grpo/demo_rates.json has them). About 10 minutes on 2 cores.
# Installs and builds what is missing first; extra arguments are config overrides (key=value).
#   ./scripts/demo.sh                 the demo (starts over: runs/demo is replaced)
#   ./scripts/demo.sh eval [args]     evaluate the bundled example kernels with kbrl-eval instead
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/deps.sh"
cd "$repo"
cmake --preset dev >/dev/null
if [[ "${1:-}" == eval ]]; then
  shift
  cmake --build --preset dev --target kbrl-eval
  run="$repo/build/demo-run"
  rm -rf "$run"
  mkdir -p "$run"
  cp "$repo"/examples/solutions/level_*_kernel.py "$run"/
  exec "$repo/build/dev/apps/kbrl-eval" generations --problems "$repo/examples/problems" --level 1 \
    --run "$run" --device cpu --work-dir "$repo/build/demo-work" "$@"
fi
cmake --build --preset dev --target kbrl-train kbrl-eval
rm -rf runs/demo
exec "$repo/scripts/run_demo.sh" "$repo/build/dev/apps" runs/demo 0 "$@"
