#!/usr/bin/env bash
# Evaluation throughput of kbrl-eval against KernelBench's own evaluation: the same candidates
# (benchmarks/eval_throughput/workload), one GPU machine, one configuration after another.
#
# usage: bash benchmarks/eval_throughput/run.sh <KernelBench checkout> <out dir> [budget s] [configurations]
#
# budget: seconds in which each KernelBench configuration may start candidates (default 150;
#   kb-precompile's counts from the end of its parallel build, for which KBT_BUILD_ALLOWANCE
#   seconds, default 150, are kept free before the deadline);
#   the candidate in flight may finish within KBT_GRACE more seconds (default 60), else it is cut
#   and not counted. KernelBench takes minutes per candidate, so it evaluates a seeded sample of
#   the workload (the same order for both of its configurations); kbrl-eval runs all of it.
# configurations, comma-separated, run in this order (default kb-fresh,kb-precompile,build,kbrl):
#   kb-fresh       KernelBench: a fresh python3 process per candidate, one after another
#   kb-precompile  KernelBench: its parallel CPU build (batch_compile, KBT_WORKERS workers), then
#                  GPU evaluation one candidate after another
#   kb-verdicts    KernelBench's verdict and speedup on every candidate (not compared on throughput):
#                  batch_compile of all, then evaluations KBT_CONCURRENCY at a time taking turns on
#                  the GPU; about 25 minutes on one GPU, so run it with KBT_DEADLINE=0 in the
#                  background (setsid) and poll <scratch>/logs/kb-verdicts.log; KBT_RESUME=<the
#                  kb-verdicts.jsonl of a stopped run> carries over what it finished and does the rest
#   build          configure and build kbrl-eval (the cuda preset)
#   kbrl           kbrl-eval on the whole workload: a fresh --work-dir (cold caches), --gpus 0;
#                  with KBT_KBRL_WARMUP=1, the work dir is first warmed up, untimed, by a copy of
#                  each problem's sample 0 under another extension name (as an RL run's earlier
#                  steps leave it: PCHs built, reference timings known); every workload candidate
#                  is still built from scratch; KBT_KBRL_ARGS: more kbrl-eval flags (e.g.
#                  "--sandbox off", which sandbox.sh compares with the default, sandboxed)
# A command on the GPU machine may run 9.5 minutes, so the script stops itself after KBT_DEADLINE
# seconds (default 560; 0: no limit): each configuration gets at most what is left, and whatever
# finished is summarized. All four do not fit in one such command: see docs/performance.md.
#
# Environment: KBT_GRACE (60), KBT_SEED (1), KBT_WORKERS (nproc), KBT_CONCURRENCY (kb-verdicts'
# evaluation processes at once; default nproc - 2, at most 12), KBT_KB_TIMEOUT (kb-verdicts'
# batch_compile timeout per build; default 1200 s), KBT_KBRL_LIMIT (540 s),
# KBT_DEADLINE (560 s), KBT_SCRATCH (builds and work dirs; default a new folder under $TMPDIR),
# KBRL_EVAL (a kbrl-eval to use instead of build/cuda/apps/kbrl-eval), KBT_WHEELS (a folder of
# wheels, e.g. pydantic's, installed with pip --no-index into the scratch folder for KernelBench).
#
# Writes into <out dir>: results.md and results.json (summarize.py), machine.json, one
# <configuration>.jsonl per configuration run, gpu.csv (utilization sampled every 500 ms), cpu.csv
# (the share of all cores busy, every 500 ms) and logs.tar.gz. summarize.py can also combine
# several out dirs of separate runs.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/gpu/env.sh"  # a carried bubblewrap on PATH (the evaluator's sandbox)
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"  # the comment above
  exit 0
fi
export LC_ALL=C
script_start=$EPOCHREALTIME

kb_arg="${1:?usage: run.sh <KernelBench checkout> <out dir> [budget s] [configurations]}"
out_arg="${2:?usage: run.sh <KernelBench checkout> <out dir> [budget s] [configurations]}"
budget="${3:-150}"
configs="${4:-kb-fresh,kb-precompile,build,kbrl}"
grace="${KBT_GRACE:-60}"
seed="${KBT_SEED:-1}"
workers="${KBT_WORKERS:-$(nproc)}"
kbrl_limit="${KBT_KBRL_LIMIT:-540}"
deadline="${KBT_DEADLINE:-560}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
kb="$(cd "$kb_arg" && pwd)" || { echo "run.sh: cannot enter the KernelBench checkout $kb_arg" >&2; exit 2; }
if [[ ! -d "$kb/KernelBench/level1" ]]; then
  echo "run.sh: $kb has no KernelBench/level1: not a KernelBench checkout" >&2
  exit 2
fi
if [[ ",$configs," == *",kb-"* && ! -f "$kb/src/kernelbench/eval.py" ]]; then
  echo "run.sh: $kb has no src/kernelbench/eval.py, which the KernelBench configurations run" >&2
  exit 2
fi
mkdir -p "$out_arg" && out="$(cd "$out_arg" && pwd)" || { echo "run.sh: cannot create $out_arg" >&2; exit 2; }
scratch="${KBT_SCRATCH:-$(mktemp -d "${TMPDIR:-/tmp}/kbrl-eval-throughput.XXXXXX")}"
mkdir -p "$scratch"
scratch="$(cd "$scratch" && pwd)"
if [[ "$scratch" == *"'"* ]]; then
  # KernelBench writes the build directory into Python source between single quotes.
  echo "run.sh: the scratch folder $scratch must not contain a single quote" >&2
  exit 2
fi
logs="$scratch/logs"
mkdir -p "$logs"
workload="$here/workload"
python="${PYTHON:-python3}"

elapsed() { awk -v a="$script_start" -v b="$EPOCHREALTIME" 'BEGIN { printf "%d", b - a }'; }
# Seconds left before the script's own deadline, less a reserve for summarizing.
remaining() {
  if (( deadline <= 0 )); then echo 100000; else echo $(( deadline - $(elapsed) - 20 )); fi
}
note() { echo "[run.sh $(elapsed)s] $*" | tee -a "$logs/run.log"; }

# GPU utilization (gpu.csv) and the share of all cores busy (cpu.csv), every 500 ms, per configuration.
sampler_pids=()
start_samplers() {
  local name="$1" kind
  for kind in gpu cpu; do
    [[ -f "$out/$kind.csv" ]] && sed -i -e "/^$name,/d" "$out/$kind.csv"  # an earlier run of this configuration
  done
  nvidia-smi -i 0 --query-gpu=timestamp,utilization.gpu --format=csv,noheader,nounits -lms 500 \
    > "$scratch/gpu-$name.raw" 2>> "$logs/gpu-sampler.log" &
  sampler_pids=($!)
  "$python" "$here/kb_runner.py" cpu-sampler --interval 0.5 > "$scratch/cpu-$name.raw" 2>> "$logs/cpu-sampler.log" &
  sampler_pids+=($!)
}
stop_samplers() {
  local name="$1" kind
  if (( ${#sampler_pids[@]} )); then
    kill "${sampler_pids[@]}" 2> /dev/null
    wait "${sampler_pids[@]}" 2> /dev/null
    sampler_pids=()
  fi
  for kind in gpu cpu; do
    if [[ -f "$scratch/$kind-$name.raw" ]]; then
      sed -e "s/^/$name,/" "$scratch/$kind-$name.raw" >> "$out/$kind.csv"
      rm -f "$scratch/$kind-$name.raw"
    fi
  done
}

finish() {
  (( ${#sampler_pids[@]} )) && kill "${sampler_pids[@]}" 2> /dev/null
  note "summarizing"
  timeout 60 "$python" "$here/summarize.py" "$out" > "$logs/summarize.log" 2>&1 || note "summarize.py failed: see logs"
  tar -czf "$out/logs.tar.gz" -C "$scratch" logs 2> /dev/null
  note "done; results in $out, builds in $scratch"
}
trap finish EXIT

# KernelBench from the checkout; optional wheels (pydantic) where the machine lacks them.
kb_env=(env "KBT_CHECKOUT=$kb" "PYTHONUNBUFFERED=1")
if [[ -n "${KBT_WHEELS:-}" ]]; then
  if "$python" -m pip install -q --no-index --no-deps --no-compile --target "$scratch/site" "$KBT_WHEELS"/*.whl \
      > "$logs/wheels.log" 2>&1; then
    kb_env+=("PYTHONPATH=$scratch/site${PYTHONPATH:+:$PYTHONPATH}")
  else
    note "installing the wheels in $KBT_WHEELS failed (see logs/wheels.log): KernelBench runs without them"
  fi
fi

timeout 120 "$python" "$here/kb_runner.py" machine --checkout "$kb" --out "$out/machine.json" > "$logs/machine.log" 2>&1
note "machine: $(tr -d '\n' < "$out/machine.json" | head -c 400)"

run_kernelbench() {
  local name="$1" mode="$2"
  local left; left=$(remaining)
  local b=$budget
  # precompile: its budget starts when the parallel build ends; allow KBT_BUILD_ALLOWANCE for it.
  local build_s=0
  [[ "$mode" == precompile ]] && build_s="${KBT_BUILD_ALLOWANCE:-150}"
  if (( left < b + grace + 45 + build_s )); then
    b=$(( left - grace - 45 - build_s ))
    if (( b < 30 )); then
      note "$name skipped: $left s left before the deadline"
      return
    fi
  fi
  local extra=()
  [[ "$mode" == precompile ]] && extra=(--workers "$workers")
  rm -f "$out/$name.jsonl"
  rm -rf "$scratch/$name"  # no build of an earlier run may be found
  note "$name: budget $b s (+ $grace s grace)"
  start_samplers "$name"
  local limit=$(( b + grace + 40 + build_s ))
  [[ "$mode" == precompile ]] && limit=$(( left > limit ? left : limit ))  # a slower build may use what is left
  timeout --kill-after=15 "$limit" "${kb_env[@]}" "$python" "$here/kb_runner.py" "$mode" \
    --checkout "$kb" --workload "$workload" --seed "$seed" --budget "$b" --grace "$grace" \
    --scratch "$scratch/$name" --out "$out/$name.jsonl" --logs "$logs/$name" "${extra[@]}" \
    > "$logs/$name.log" 2>&1
  local rc=$?
  stop_samplers "$name"
  local n; n=$(grep -c '"type": "candidate"' "$out/$name.jsonl" 2> /dev/null)
  note "$name: exit $rc, ${n:-0} candidate records"
}

run_verdicts() {
  local limit=0 left
  if (( deadline > 0 )); then
    left=$(remaining)
    if (( left < 120 )); then
      note "kb-verdicts skipped: $left s left before the deadline"
      return
    fi
    limit=$left
  fi
  local extra=()
  if [[ -n "${KBT_RESUME:-}" ]]; then
    # Read before the file is replaced: it may be this folder's own kb-verdicts.jsonl.
    cp "$KBT_RESUME" "$scratch/kb-verdicts-earlier.jsonl" || { note "kb-verdicts: cannot read KBT_RESUME=$KBT_RESUME"; return; }
    extra+=(--resume "$scratch/kb-verdicts-earlier.jsonl")
  fi
  rm -f "$out/kb-verdicts.jsonl"
  rm -rf "$scratch/kb-verdicts"
  note "kb-verdicts: every candidate${KBT_CONCURRENCY:+, $KBT_CONCURRENCY at a time}$( (( limit > 0 )) && echo ", limit $limit s")"
  start_samplers kb-verdicts
  [[ -n "${KBT_CONCURRENCY:-}" ]] && extra+=(--concurrency "$KBT_CONCURRENCY")
  [[ -n "${KBT_KB_TIMEOUT:-}" ]] && extra+=(--kb-timeout "$KBT_KB_TIMEOUT")
  timeout --kill-after=15 "$limit" "${kb_env[@]}" "$python" "$here/kb_runner.py" verdicts \
    --checkout "$kb" --workload "$workload" --seed "$seed" --scratch "$scratch/kb-verdicts" \
    --out "$out/kb-verdicts.jsonl" --logs "$logs/kb-verdicts" --workers "$workers" "${extra[@]}" \
    > "$logs/kb-verdicts.log" 2>&1
  local rc=$?
  stop_samplers kb-verdicts
  note "kb-verdicts: exit $rc, $(grep -c '"type": "candidate"' "$out/kb-verdicts.jsonl" 2> /dev/null || echo 0) candidate records"
}

run_build() {
  local left; left=$(remaining)
  if [[ -n "${KBRL_EVAL:-}" ]]; then
    note "build skipped: KBRL_EVAL=$KBRL_EVAL"
    return
  fi
  if (( left < 60 )); then
    note "build skipped: $left s left before the deadline"
    return
  fi
  note "build: cmake --preset cuda, kbrl-eval"
  (cd "$repo" && timeout "$left" cmake --preset cuda > "$logs/configure.log" 2>&1 &&
    timeout "$left" cmake --build --preset cuda --target kbrl-eval -j "$(nproc)" > "$logs/build.log" 2>&1)
  note "build: exit $?"
}

run_kbrl() {
  local bin="${KBRL_EVAL:-$repo/build/cuda/apps/kbrl-eval}"
  if [[ ! -x "$bin" ]]; then
    note "kbrl skipped: no kbrl-eval at $bin (run the build configuration first)"
    return
  fi
  local left; left=$(remaining)
  local limit=$kbrl_limit
  (( left - 15 < limit )) && limit=$(( left - 15 ))  # kbrl-eval writes what it finished on SIGTERM
  if (( limit < 60 )); then
    note "kbrl skipped: $left s left before the deadline"
    return
  fi
  rm -rf "$scratch/kbrl_run" "$scratch/kbrl_work" "$scratch/kbrl_warmup"
  mkdir -p "$scratch/kbrl_run"
  cp "$workload"/level_1_problem_*_kernel.py "$scratch/kbrl_run/"
  local warmup=0 warmup_s=0
  if [[ "${KBT_KBRL_WARMUP:-0}" == 1 ]]; then
    mkdir -p "$scratch/kbrl_warmup"
    local f
    for f in "$workload"/level_1_problem_*_sample_0_kernel.py; do
      local b; b="$(basename "$f")"
      sed -e 's/name="\([A-Za-z0-9_]*\)"/name="\1_warmup"/' "$f" > "$scratch/kbrl_warmup/${b/_sample_0_/_sample_9_}"
    done
    warmup=$(ls "$scratch/kbrl_warmup" | wc -l)
    note "kbrl: warm-up on $warmup renamed copies of sample 0"
    local w0=$EPOCHREALTIME
    timeout --signal=TERM --kill-after=30 "$limit" "$bin" generations --problems "$kb" --level 1 \
      --run "$scratch/kbrl_warmup" --device cuda --gpus 0 --work-dir "$scratch/kbrl_work" ${KBT_KBRL_ARGS:-} > "$logs/kbrl_warmup.log" 2>&1
    warmup_s=$(awk -v a="$w0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
    note "kbrl: warm-up took $warmup_s s"
    left=$(remaining)
    (( left - 15 < limit )) && limit=$(( left - 15 ))
    if (( limit < 60 )); then
      note "kbrl skipped after its warm-up: $left s left before the deadline"
      return
    fi
  fi
  note "kbrl: kbrl-eval on $(ls "$scratch/kbrl_run" | wc -l) candidates, limit $limit s"
  start_samplers kbrl
  local t0=$EPOCHREALTIME
  printf '{"type": "meta", "config": "kbrl", "started": %s, "limit_s": %s, "compile_lanes": %s, "warmup_candidates": %s, "warmup_s": %s, "extra_args": "%s"}\n' \
    "$t0" "$limit" "$(nproc)" "$warmup" "$warmup_s" "${KBT_KBRL_ARGS:-}" > "$out/kbrl.jsonl"
  timeout --signal=TERM --kill-after=30 "$limit" "$bin" generations --problems "$kb" --level 1 \
    --run "$scratch/kbrl_run" --device cuda --gpus 0 --work-dir "$scratch/kbrl_work" ${KBT_KBRL_ARGS:-} > "$logs/kbrl.log" 2>&1
  local rc=$?
  local t1=$EPOCHREALTIME
  stop_samplers kbrl
  [[ -f "$scratch/kbrl_run/eval_results.jsonl" ]] && cat "$scratch/kbrl_run/eval_results.jsonl" >> "$out/kbrl.jsonl"
  printf '{"type": "end", "finished": %s, "wall_s": %s, "exit_code": %s}\n' \
    "$t1" "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" "$rc" >> "$out/kbrl.jsonl"
  cp "$scratch/kbrl_run/eval_summary.json" "$logs/kbrl_eval_summary.json" 2> /dev/null
  note "kbrl: exit $rc, $(( $(wc -l < "$out/kbrl.jsonl") - 2 )) results"
}

IFS=',' read -r -a config_list <<< "$configs"
for c in "${config_list[@]}"; do
  case "$c" in
    kb-fresh) run_kernelbench kb-fresh fresh ;;
    kb-precompile) run_kernelbench kb-precompile precompile ;;
    kb-verdicts) run_verdicts ;;
    build) run_build ;;
    kbrl) run_kbrl ;;
    *) note "unknown configuration '$c' (kb-fresh, kb-precompile, kb-verdicts, build, kbrl)" ;;
  esac
done
