#!/usr/bin/env bash
# Data parallel on NCCL (a machine with two GPUs): the same LoRA training steps on one GPU with
# the whole global batch, then on two GPUs launched by torchrun (each rank half the batch), on a
# random bf16 checkpoint with Qwen2.5-0.5B's shapes. Passes when the loss curves and gradient
# norms agree within tolerance and both ranks end with identical parameters.
#   bash tests/gpu/data_parallel.sh [build dir (build/cuda)] [out dir ($OUT or build/dp-results)]
set -euo pipefail
build="${1:-build/cuda}"
out="${2:-${OUT:-build/dp-results}}"
python="${PYTHON:-python3}"
worker="$build/tests/train/data_parallel_worker"
[[ -x "$worker" ]] || { echo "data_parallel.sh: $worker is missing (build the cuda preset)" >&2; exit 2; }
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-dp.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" benchmarks/sampler/sampler_bench.py make --shapes 0.5b "$work/model"
steps=6 batch=16 tokens=512
start=$(date +%s.%N)
CUDA_VISIBLE_DEVICES=0 "$worker" "$work/model" "$work/one" bf16-cuda $steps $batch $tokens
mid=$(date +%s.%N)
"$python" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python \
  "$worker" "$work/model" "$work/two" bf16-cuda $steps $batch $tokens
end=$(date +%s.%N)
cp "$work/one/rank0.json" "$out/dp_one_gpu.json"
cp "$work/two/rank0.json" "$out/dp_two_gpus_rank0.json"
cp "$work/two/rank1.json" "$out/dp_two_gpus_rank1.json"
"$python" - "$out" "$start" "$mid" "$end" <<'PY'
import json, sys
out = sys.argv[1]
t1, t2 = float(sys.argv[3]) - float(sys.argv[2]), float(sys.argv[4]) - float(sys.argv[3])
one = json.load(open(f"{out}/dp_one_gpu.json"))
a = json.load(open(f"{out}/dp_two_gpus_rank0.json"))
b = json.load(open(f"{out}/dp_two_gpus_rank1.json"))
rel = lambda x, y: abs(x - y) / max(abs(y), 1e-6)
loss_err = max(rel(x, y) for x, y in zip(a["loss"], one["loss"]))
norm_err = max(rel(x, y) for x, y in zip(a["grad_norm"], one["grad_norm"]))
checks = {
    "backend is nccl": a["backend"] == "nccl",
    "each rank half the batch": a["datums"] == b["datums"] == one["datums"] // 2,
    "loss curves within 2e-3": loss_err <= 2e-3,
    "grad norms within 2e-2": norm_err <= 2e-2,
    "ranks hold identical parameters": a["param_abs_sum"] == b["param_abs_sum"],
    "loss changed": one["loss"][0] != one["loss"][-1],
}
lines = ["# Data parallel on NCCL: one GPU vs two", "",
         f"| step | loss, 1 GPU | loss, 2 GPUs | grad norm, 1 GPU | grad norm, 2 GPUs |", "|---|---|---|---|---|"]
for i, (l1, l2, n1, n2) in enumerate(zip(one["loss"], a["loss"], one["grad_norm"], a["grad_norm"])):
    lines.append(f"| {i + 1} | {l1:.6f} | {l2:.6f} | {n1:.5f} | {n2:.5f} |")
lines += ["", f"max relative difference: loss {loss_err:.2e}, grad norm {norm_err:.2e}",
          f"wall time including process start and model load: 1 GPU {t1:.1f} s, 2 GPUs {t2:.1f} s", ""]
lines += [f"- {'PASS' if ok else 'FAIL'}: {name}" for name, ok in checks.items()]
open(f"{out}/data_parallel.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
sys.exit(0 if all(checks.values()) else 1)
PY
