#!/usr/bin/env bash
# Decode speed of kbrl's sampler next to transformers' generate (static cache, and its default
# dynamic cache for reference) and the HBM roofline, on the GPU machine, in one run: the same
# random bf16 checkpoint with Qwen2.5-Coder-1.5B's shapes, batches 1, 16 and 64.
#
# usage: bash benchmarks/sampler/run.sh [build dir (build/cuda)] [out dir (benchmarks/sampler/out)]
#
# Needs the cuda preset's kbrl_bench_sampler (cmake --build --preset cuda --target
# kbrl_bench_sampler), python3 with torch and transformers, ~4 GB of disk. Writes kbrl.json,
# transformers-static.json, transformers-dynamic.json, machine.json and results.md into the out
# dir. SAMPLER_ARGS passes options to every side (e.g. "--batches 16 --new-tokens 128");
# SAMPLER_CACHES="static" skips the dynamic cache (then its column reads "-");
# SAMPLER_DYNAMIC_ARGS passes options to the dynamic cache's side only (e.g. "--repeats 1": it is
# the slowest by far). About 8 minutes on an H100, 5 with "--repeats 1" for the dynamic cache, 4
# without it.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"  # the comment above
  exit 0
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="${1:-$here/../../build/cuda}"
out="${2:-$here/out}"
python="${PYTHON:-python3}"
bench="$build/benchmarks/sampler/kbrl_bench_sampler"
[[ -x "$bench" ]] || { echo "run.sh: $bench is missing: build the cuda preset's kbrl_bench_sampler" >&2; exit 2; }
mkdir -p "$out"
work="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-sampler-bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
"$python" "$here/sampler_bench.py" make "$work/model"
# shellcheck disable=SC2086
"$bench" "$work/model" --json "$out/kbrl.json" --profile ${SAMPLER_ARGS:-}
for cache in ${SAMPLER_CACHES:-static dynamic}; do
  extra=""
  [[ $cache == dynamic ]] && extra="${SAMPLER_DYNAMIC_ARGS:-}"
  # shellcheck disable=SC2086
  "$python" "$here/sampler_bench.py" transformers "$work/model" --cache $cache --json "$out/transformers-$cache.json" \
    ${SAMPLER_ARGS:-} $extra
done
"$python" - "$work/model" "$out/machine.json" <<'PY'
import datetime, glob, json, os, subprocess, sys
from safetensors import safe_open
d, path = sys.argv[1], sys.argv[2]
nbytes = 0
for f in glob.glob(os.path.join(d, "*.safetensors")):
    with safe_open(f, "pt") as s:
        for k in s.keys():
            t = s.get_slice(k)
            n = 1
            for x in t.get_shape():
                n *= x
            nbytes += 2 * n
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"], capture_output=True,
                     text=True).stdout.strip().split(", ")
config = json.load(open(os.path.join(d, "config.json")))
json.dump(dict(gpu=smi[0], driver=smi[1] if len(smi) > 1 else "?", weight_bytes=nbytes, config=config,
               date=datetime.date.today().isoformat()), open(path, "w"), indent=2)
PY
"$python" "$here/sampler_bench.py" summarize "$out"
