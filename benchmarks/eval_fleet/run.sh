#!/usr/bin/env bash
# Evaluation throughput of a fleet: the 64-candidate workload of benchmarks/eval_throughput,
# evaluated on a machine with two GPUs, several ways, one after another:
#   one    RemoteEvaluator (kbrl-eval --endpoints) over one kbrl-evald: GPU 0, half the cores
#   two    RemoteEvaluator over two kbrl-evald: GPU 0 + the first half of the cores, GPU 1 + the
#          second half (each pinned with taskset, as two hosts would be; cpu_halves.sh splits
#          the machine by physical core)
#   local  LocalEvaluator (kbrl-eval --gpus 0,1): both GPUs, all cores
#   shared one kbrl-evald (GPU 0, half A) timed while a second one (GPU 1, half B) evaluates its
#          own copy of the workload, untimed: one server's rate when the machine's other half is
#          as busy as it is in "two". Where the two halves share hardware (a virtual machine's
#          vCPUs may be threads of the same cores; cpu_halves.md measures it), "one" alone
#          borrows from the idle half and "shared" is the rate a host of its own would give.
# The servers are started and ready (/readyz) before the clock starts, as a standing fleet is;
# the local evaluator's worker start is inside its time (it is reported separately).
# Caches (KBT_WARM): with 1 (the default), every evaluator first evaluates sample 0 of each of the
# workload's problems, untimed, and the timed pass evaluates the whole workload with each
# load_inline extension renamed
# (name="x" -> name="x_steady"): new candidates that no compiled-extension cache holds, with the
# headers and flags whose precompiled headers the first pass built. That is a fleet in the
# middle of a long run, whose servers have seen candidates like these before. With 0, the timed
# pass is the first, on cold caches (each server then builds its own precompiled headers while
# its first candidates compile without them, a cost that two servers pay twice).
#
# usage: bash benchmarks/eval_fleet/run.sh <KernelBench checkout> <out dir> [configs (one,two,local,shared)]
# Environment: KBRL_BUILD (build/cuda), KBT_LIMIT (seconds per pass, 420), KBT_WARM (1), KBT_PASSES (1),
# KBT_EVAL_ARGS (evaluator flags added to every server and to the local evaluator, e.g.
# --no-compile-stagger for an A/B; results.md names them).
# Writes <out>/results.md and results.json (summarize.py), <config>.log, each run's
# eval_results.jsonl as <config>.jsonl and the GPUs' utilization during it as <config>.gpu.csv
# (nvidia-smi every 250 ms: when each GPU got its first work and how busy it was).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../tests/gpu/env.sh"  # a carried bubblewrap on PATH (the evaluator's sandbox)
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
  exit 0
fi
kb="${1:?usage: run.sh <KernelBench checkout> <out dir> [configs]}"
out="${2:?usage: run.sh <KernelBench checkout> <out dir> [configs]}"
configs="${3:-one,two,local,shared}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
build="${KBRL_BUILD:-$repo/build/cuda}"
limit="${KBT_LIMIT:-420}"
warm="${KBT_WARM:-1}"
passes="${KBT_PASSES:-1}"
read -ra extra <<< "${KBT_EVAL_ARGS:-}"
evald="$build/apps/kbrl-evald"
keval="$build/apps/kbrl-eval"
for p in "$evald" "$keval"; do [[ -x "$p" ]] || { echo "run.sh: $p is missing (build the cuda preset)" >&2; exit 2; }; done
[[ -d "$kb/KernelBench/level1" ]] || { echo "run.sh: $kb has no KernelBench/level1" >&2; exit 2; }
mkdir -p "$out" && out="$(cd "$out" && pwd)"
scratch="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-eval-fleet.XXXXXX")"
ncpu=$(nproc)
half=$((ncpu / 2))
# The two halves of the machine by physical core (hyperthreads of a core stay together, measured
# where the machine does not say), so that "half the cores" is half the machine's compute.
read -r cpus_a cpus_b < <(bash "$here/cpu_halves.sh" "$out/cpu_halves.md")
python="${PYTHON:-python3}"
servers=()
stop_servers() {
  for pid in "${servers[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${servers[@]}"; do wait "$pid" 2>/dev/null; done
  servers=()
}
trap 'stop_servers' EXIT

# start_server NAME GPU CPUS: a kbrl-evald on 127.0.0.1, ready before this returns; its URL in $url.
start_server() {
  local name=$1 gpu=$2 cpus=$3
  local dir="$scratch/$name"
  mkdir -p "$dir"
  taskset -c "$cpus" "$evald" --device cuda --gpus "$gpu" --compile-workers "$half" \
    --listen 127.0.0.1:0 --port-file "$dir/port" --work-dir "$dir/work" --journal "$dir/journal" "${extra[@]}" \
    > "$dir/server.log" 2>&1 &
  servers+=($!)
  for _ in $(seq 600); do [[ -s "$dir/port" ]] && break; sleep 0.2; done
  url="http://127.0.0.1:$(cat "$dir/port")"
  "$python" - "$url" <<'PY' || { echo "run.sh: $name never became ready" >&2; tail -20 "$dir/server.log" >&2; exit 1; }
import sys, time, urllib.request
url = sys.argv[1]
for _ in range(600):
    try:
        if urllib.request.urlopen(url + "/readyz", timeout=2).status == 200:
            sys.exit(0)
    except Exception:
        pass
    time.sleep(0.5)
sys.exit(1)
PY
}

# workload DIR [renamed|warm-up]: a copy of the workload in DIR; renamed: each extension renamed
# (KBT_WARM); warm-up: each problem's sample 0 only (the untimed pass).
# With KBT_PASSES=k (1) the timed workload is k renamed copies (samples S + 4p, extensions
# renamed per copy): k x 64 candidates in one batch, e.g. 2 for an RL step of 8 problems x 16.
workload() {
  mkdir -p "$1"
  if [[ "${2:-}" == warm-up ]]; then
    cp "$repo"/benchmarks/eval_throughput/workload/level_1_problem_*_sample_0_kernel.py "$1/"
    return 0
  fi
  local f base pass
  for ((pass = 0; pass < passes; ++pass)); do
    for f in "$repo"/benchmarks/eval_throughput/workload/level_1_problem_*_kernel.py; do
      base=$(basename "$f")
      local sample=${base##*_sample_}; sample=${sample%_kernel.py}
      local to="$1/${base%_sample_*}_sample_$((sample + 4 * pass))_kernel.py"
      cp "$f" "$to"
      [[ "${2:-}" == renamed ]] && sed -i -E "s/\bname=\"([A-Za-z0-9_]+)\"/name=\"\1_steady$pass\"/" "$to"
    done
  done
  return 0
}

# generations NAME ARGS...: kbrl-eval generations on the workload copy in $scratch/NAME.
generations() {
  local name=$1; shift
  timeout "$limit" "$keval" generations --problems "$kb" --level 1 --run "$scratch/$name" --device cuda "$@"
}

# warm_up NAME ARGS...: with KBT_WARM=1, an untimed pass of the workload through the evaluator
# that ARGS name.
warm_up() {
  local name=$1; shift
  (( warm )) || return 0
  workload "$scratch/$name-warm-up" warm-up
  generations "$name-warm-up" "$@" > "$out/$name-warm-up.log" 2>&1
}

# evaluate CONFIG ARGS...: the timed pass, on a fresh copy of the workload (renamed when warm).
evaluate() {
  local config=$1; shift
  local run="$scratch/$config-run"
  workload "$run" "$( (( warm )) && echo renamed)"
  nvidia-smi --query-gpu=timestamp,index,utilization.gpu --format=csv,noheader,nounits -lms 250 \
    > "$out/$config.gpu.csv" 2>/dev/null &
  local smi=$!
  local start=$EPOCHREALTIME
  generations "$config-run" "$@" > "$out/$config.log" 2>&1
  local rc=$?
  local end=$EPOCHREALTIME
  kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
  cp "$run/eval_results.jsonl" "$out/$config.jsonl" 2>/dev/null
  echo "{\"config\": \"$config\", \"start\": $start, \"end\": $end, \"exit_code\": $rc}" >> "$out/runs.jsonl"
  echo "$config: exit $rc, $(awk "BEGIN {print $end - $start}") s"
}

rm -f "$out/runs.jsonl"
IFS=, read -ra wanted <<< "$configs"
for config in "${wanted[@]}"; do
  case "$config" in
    one)
      start_server one-a 0 "$cpus_a"
      warm_up one --endpoints "$url"
      evaluate one --endpoints "$url"
      stop_servers ;;
    two)
      start_server two-a 0 "$cpus_a"
      a=$url
      start_server two-b 1 "$cpus_b"
      warm_up two-a --endpoints "$a" & w=$!; warm_up two-b --endpoints "$url"; wait "$w"
      evaluate two --endpoints "$a,$url"
      stop_servers ;;
    shared)
      start_server shared-a 0 "$cpus_a"
      a=$url
      start_server shared-b 1 "$cpus_b"
      warm_up shared-a --endpoints "$a" & w=$!; warm_up shared-b --endpoints "$url"; wait "$w"
      workload "$scratch/shared-load" "$( (( warm )) && echo renamed)"
      generations shared-load --endpoints "$url" > "$out/shared-load.log" 2>&1 &
      load=$!
      evaluate shared --endpoints "$a"
      wait "$load"
      stop_servers ;;
    local)
      warm_up local --gpus 0,1 --compile-workers "$ncpu" --work-dir "$scratch/local-work" "${extra[@]}"
      evaluate local --gpus 0,1 --compile-workers "$ncpu" --work-dir "$scratch/local-work" "${extra[@]}" ;;
    *) echo "run.sh: unknown configuration $config" >&2; exit 2 ;;
  esac
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$out/gpus.txt" 2>&1
{ echo "cpus: $ncpu ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))";
  echo "halves by physical core: $cpus_a | $cpus_b (how they were found: cpu_halves.md)"
  if (( warm )); then echo "caches: warm (KBT_WARM=1: an untimed pass of each problem's sample 0 first; the timed pass renames each extension)"
  else echo "caches: cold (KBT_WARM=0: the timed pass is each evaluator's first)"; fi
  echo "evaluator flags added: ${KBT_EVAL_ARGS:-none}; workload copies: $passes"
  echo "kbrl: $(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"; } > "$out/machine.txt"
"$python" "$here/summarize.py" "$out"
