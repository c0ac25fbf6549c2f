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
steps=6 batch=16 tokens=512 lr=1e-4
# fp32 (TF32 off): the curves must agree closely. bf16: rounding differs with the micro-batch
# shapes (each rank packs half the datums) and Adam's first steps amplify it, so a looser bound.
for mode in cuda bf16-cuda; do
  start=$(date +%s.%N)
  CUDA_VISIBLE_DEVICES=0 "$worker" "$work/model" "$work/$mode-one" $mode $steps $batch $tokens $lr
  mid=$(date +%s.%N)
  "$python" -m torch.distributed.run --standalone --nproc-per-node 2 --no-python \
    "$worker" "$work/model" "$work/$mode-two" $mode $steps $batch $tokens $lr
  end=$(date +%s.%N)
  echo "$mode $start $mid $end" >> "$work/times"
done
"$python" - "$work" "$out" <<'PY'
import json, sys
work, out = sys.argv[1], sys.argv[2]
times = {l.split()[0]: [float(x) for x in l.split()[1:]] for l in open(f"{work}/times")}
rel = lambda x, y: abs(x - y) / max(abs(y), 1e-6)
lines, ok_all = ["# Data parallel on NCCL: one GPU vs two (torchrun)", ""], True
for mode, name, tol_loss, tol_norm in [("cuda", "fp32", 1e-3, 1e-3), ("bf16-cuda", "bf16 base, fp32 adapters", 3e-2, 5e-2)]:
    one = json.load(open(f"{work}/{mode}-one/rank0.json"))
    a = json.load(open(f"{work}/{mode}-two/rank0.json"))
    b = json.load(open(f"{work}/{mode}-two/rank1.json"))
    loss_err = max(rel(x, y) for x, y in zip(a["loss"], one["loss"]))
    norm_err = max(rel(x, y) for x, y in zip(a["grad_norm"], one["grad_norm"]))
    checks = {
        "backend is nccl": a["backend"] == "nccl",
        "each rank half the batch": a["datums"] == b["datums"] == one["datums"] // 2,
        f"loss curves within {tol_loss:g}": loss_err <= tol_loss,
        f"grad norms within {tol_norm:g}": norm_err <= tol_norm,
        "ranks hold identical parameters": a["param_abs_sum"] == b["param_abs_sum"],
        "loss changed": one["loss"][0] != one["loss"][-1],
    }
    t = times[mode]
    lines += [f"## {name}", "", "| step | loss, 1 GPU | loss, 2 GPUs | grad norm, 1 GPU | grad norm, 2 GPUs |",
              "|---|---|---|---|---|"]
    for i, (l1, l2, n1, n2) in enumerate(zip(one["loss"], a["loss"], one["grad_norm"], a["grad_norm"])):
        lines.append(f"| {i + 1} | {l1:.7f} | {l2:.7f} | {n1:.6f} | {n2:.6f} |")
    lines += ["", f"max relative difference: loss {loss_err:.2e}, grad norm {norm_err:.2e}; wall time with process "
              f"start and model load: 1 GPU {t[1] - t[0]:.1f} s, 2 GPUs {t[2] - t[1]:.1f} s", ""]
    lines += [f"- {'PASS' if ok else 'FAIL'}: {n}" for n, ok in checks.items()] + [""]
    ok_all &= all(checks.values())
open(f"{out}/data_parallel.md", "w").write("\n".join(lines))
print("\n".join(lines))
sys.exit(0 if ok_all else 1)
PY
