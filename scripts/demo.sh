#!/usr/bin/env bash
# The main job on the bundled default: GRPO training with kbrl-train on the CPU
# (examples/configs/cpu_demo.yaml): the tiny demo policy (scripts/make_demo_model.py) on the
# bundled problems (examples/problems) with the CPU evaluator, four steps, into runs/cpu-demo
# (metrics, traces, checkpoints, TensorBoard, and progress.png: reward and correct rate per step).
# Installs and builds what is missing first; extra arguments are config overrides (key=value).
#   ./scripts/demo.sh                 train (resumes runs/cpu-demo when it exists; rm -r it to start over)
#   ./scripts/demo.sh eval [args]     evaluate the bundled example kernels with kbrl-eval instead
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$repo/scripts/deps.sh"
cd "$repo"
python="${KBRL_VENV:-$repo/.venv}/bin/python"
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
cmake --build --preset dev --target kbrl-train
[[ -f "$repo/build/demo-model/model.safetensors" ]] || "$python" "$repo/scripts/make_demo_model.py" "$repo/build/demo-model"
"$repo/build/dev/apps/kbrl-train" examples/configs/cpu_demo.yaml "$@"
"$python" "$repo/scripts/plot_run.py" runs/cpu-demo
exec "$repo/build/dev/apps/kbrl-train" status runs/cpu-demo
