#!/usr/bin/env bash
# The CPU demo's steps, with programs already built (scripts/demo.sh installs and builds first):
#   run_demo.sh BIN_DIR OUT_DIR [SEED] [key=value overrides of examples/configs/elementwise_demo.yaml]
# 1. the demo policy: build/demo-policy (scripts/make_demo_model.py --hidden 128 --vocab 2048)
# 2. OUT/sft: the supervised warm start on examples/demo/sft_train.jsonl (train.mode=sft)
# 3. OUT/before: fresh samples of the warm-started policy on every demo problem, evaluated
# 4. OUT/grpo: GRPO from the warm start's adapter with the CPU evaluator
# 5. OUT/after: fresh samples of the trained policy, evaluated as in 3
# 6. OUT/grpo/demo_rates.json (correct rates before and after, training and held-out problems)
#    and OUT/grpo/progress.png (reward and correct rate per step)
# Evaluations share one build cache (OUT/../eval-work): a kernel seen before is not built again.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$(cd "$1" && pwd)"
mkdir -p "$2"
out="$(cd "$2" && pwd)"
seed="${3:-0}"
shift $(( $# > 3 ? 3 : $# ))
python="${KBRL_PYTHON:-$repo/.venv/bin/python}"
config="$repo/examples/configs/elementwise_demo.yaml"
model="${KBRL_DEMO_POLICY:-$repo/build/demo-policy}"
work="$(dirname "$out")/eval-work"
samples="${KBRL_DEMO_SAMPLES:-8}"
setting() {  # the config's value of a sampling key (sampling.KEY), or the last override of it
  local value a
  value="$(sed -n "/^sampling:/,/^[^ ]/ s/^  $1: *//p" "$config")"
  for a in "$@"; do [[ "$a" == "sampling.$1="* ]] && value="${a#*=}"; done
  echo "$value"
}
temperature="$(setting temperature "$@")"
max_tokens="$(setting max_tokens "$@")"
cd "$repo"

[[ -f "$model/model.safetensors" ]] || "$python" scripts/make_demo_model.py "$model" --hidden 128 --vocab 2048
common=(model.path="$model" seed="$seed" evaluator.work_dir="$work" "$@")
start=$(date +%s)

last_adapter() {  # a run directory's last checkpointed adapter
  local dir
  dir=$(ls -d "$1"/checkpoints/step_* | sort | tail -1)
  echo "$dir/adapter"
}
sample_and_evaluate() {  # adapter, run folder
  rm -rf "$2"
  "$bin/kbrl-eval" model --model "$model" --adapter "$1" --problems examples/demo/problems --level 1 --run "$2" \
    --samples "$samples" --temperature "$temperature" --max-tokens "$max_tokens" --sample-seed "$((seed + 1000))" \
    --model-device cpu --model-dtype fp32 --language cpp --no-one-shot --no-thinking --device cpu --work-dir "$work" --trials 2 --no-timing \
    > "$2.log" 2>&1 || { tail -20 "$2.log"; exit 1; }
}

echo "== supervised warm start: $out/sft"
"$bin/kbrl-train" "$config" train.mode=sft log_path="$out/sft" "${common[@]}" > "$out/sft.log" 2>&1 \
  || { tail -20 "$out/sft.log"; exit 1; }
tail -1 "$out/sft.log"
echo "== fresh samples before GRPO: $out/before"
sample_and_evaluate "$(last_adapter "$out/sft")" "$out/before"
echo "== GRPO: $out/grpo"
"$bin/kbrl-train" "$config" lora.init_adapter="$out/sft" log_path="$out/grpo" "${common[@]}" > "$out/grpo.log" 2>&1 \
  || { tail -20 "$out/grpo.log"; exit 1; }
tail -1 "$out/grpo.log"
echo "== fresh samples after GRPO: $out/after"
sample_and_evaluate "$(last_adapter "$out/grpo")" "$out/after"

"$python" - "$out" "$samples" "$(( $(date +%s) - start ))" <<'EOF'
import json, os, sys
out, samples, seconds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
held = {int(json.loads(l)["id"].split("_")[0]) for l in open("examples/demo/sft_heldout.jsonl")}
rates = {"samples_per_problem": samples, "seconds": seconds}
for when in ("before", "after"):
    counts = {}
    for line in open(os.path.join(out, when, "eval_results.jsonl")):
        r = json.loads(line)
        split = "heldout" if r["problem"] in held else "train"
        c = counts.setdefault(split, [0, 0])
        c[0] += r["result"]["correctness"] is True
        c[1] += 1
    rates[when] = {s: {"correct": c[0], "samples": c[1], "correct_rate": c[0] / c[1]} for s, c in counts.items()}
with open(os.path.join(out, "grpo", "demo_rates.json"), "w") as f:
    json.dump(rates, f, indent=2)
for s in ("train", "heldout"):
    b, a = rates["before"][s], rates["after"][s]
    print(f"{s:8s} problems: correct rate of fresh samples {b['correct_rate']:.2f} ({b['correct']}/{b['samples']}) "
          f"before GRPO, {a['correct_rate']:.2f} ({a['correct']}/{a['samples']}) after")
print(f"in {seconds} s")
EOF
"$python" scripts/plot_run.py "$out/grpo" --title "CPU demo, seed $seed"
