#!/usr/bin/env bash
# The long fuzz runs (docs/fuzzing.md): builds the fuzz targets under the `fuzz` preset (clang,
# libFuzzer, ASan + UBSan) and runs each with libFuzzer for a given time, growing a corpus kept
# outside the repository, then prints one line per target (executions, corpus, coverage, verdict).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
all_targets=(answer_parser python_lexer static_check problem_loader safetensors tokenizer run_config worker_protocol
             evaluation_api tokenizer_encode)

usage() {
  cat <<EOF
usage: scripts/fuzz.sh [options] [TARGET...]
Builds the fuzz preset (build/fuzz) and runs each TARGET (default: all) with libFuzzer.
  --minutes N      minutes per target (default 10)
  --parallel N     targets run at once (default 1; each uses one core)
  --corpus DIR     corpus root, one folder per target (default \${XDG_CACHE_HOME:-~/.cache}/kbrl-fuzz)
  --timeout S      seconds one input may run before it counts as a hang (default 10)
  --rss-limit MB   memory limit of a run (default 2048)
  --no-build       use the existing build/fuzz
  -h, --help       this text
Targets: ${all_targets[*]}
Crashes, hangs and leaks are written to <corpus>/artifacts/ with libFuzzer's replay line; a
fixed one goes to tests/data/fuzz/<target>/regressions/ so that CI replays it.
EOF
}

minutes=10 parallel=1 timeout=10 rss=2048 build=1
corpus="${XDG_CACHE_HOME:-$HOME/.cache}/kbrl-fuzz"
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --parallel) parallel="$2"; shift 2 ;;
    --corpus) corpus="$2"; shift 2 ;;
    --timeout) timeout="$2"; shift 2 ;;
    --rss-limit) rss="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    -*) usage >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
  [[ " ${all_targets[*]} " == *" $t "* ]] || { echo "unknown target '$t' (targets: ${all_targets[*]})" >&2; exit 2; }
done

cd "$repo"
bin="$repo/build/fuzz/tests/fuzz"
if [[ $build == 1 ]]; then
  [[ -f build/fuzz/CMakeCache.txt ]] || cmake --preset fuzz
  cmake --build build/fuzz --target kbrl_fuzzers
fi
mkdir -p "$corpus/artifacts"
seconds=$(( minutes * 60 ))

# One target: libFuzzer, niced so that a shared machine keeps its other work going.
run_target() {
  local t="$1" log="$corpus/$t.log"
  mkdir -p "$corpus/$t"
  local rc=0
  nice -n 19 "$bin/${t}_fuzz" "$corpus/$t" -max_total_time="$seconds" -timeout="$timeout" \
    -rss_limit_mb="$rss" -dict="$repo/tests/fuzz/$t.dict" -seed_inputs=@"$bin/$t.seeds" \
    -artifact_prefix="$corpus/artifacts/$t-" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  echo "$rc" >"$corpus/$t.rc"
}

echo "fuzzing ${targets[*]} for $minutes min each, $parallel at a time; corpus and logs in $corpus"
running=0
for t in "${targets[@]}"; do
  run_target "$t" &
  running=$(( running + 1 ))
  if [[ $running -ge $parallel ]]; then wait -n || true; running=$(( running - 1 )); fi
done
wait || true

status=0
printf '%-16s %12s %8s %8s %10s %s\n' target executions exec/s corpus coverage result
for t in "${targets[@]}"; do
  log="$corpus/$t.log" rc="$(cat "$corpus/$t.rc")"
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  files=$(find "$corpus/$t" -type f | wc -l)
  result=ok
  if [[ $rc != 0 ]]; then
    result="FAILED (exit $rc): $(grep -m1 -E '^==[0-9]+== ?ERROR' "$log" || true); see $log"
    status=1
  fi
  printf '%-16s %12s %8s %8s %10s %s\n' "$t" "${execs:-?}" "${rate:-?}" "$files" "${cov:-?}" "$result"
done
exit $status
