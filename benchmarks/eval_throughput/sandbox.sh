#!/usr/bin/env bash
# What the sandbox costs: kbrl-eval on the 64-candidate workload (run.sh's "kbrl" configuration,
# cold caches, --gpus 0) with the sandbox off and on (the default: bubblewrap, carried in .deps),
# one after the other on the same machine, in the order KBT_ORDER gives (default off,on).
#
# usage: bash benchmarks/eval_throughput/sandbox.sh <KernelBench checkout> <out dir>
# Environment: KBT_ORDER (off,on), KBT_KBRL_LIMIT (seconds per run, 270), and run.sh's.
# Writes <out>/<off|on>/ (run.sh's files for each run) and <out>/sandbox.md: candidates per
# minute of each, their ratio, and whether every candidate got the same verdict and ran as
# its configuration says (result metadata "sandbox": "bubblewrap" or "off").
set -uo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
  exit 0
fi
kb="${1:?usage: sandbox.sh <KernelBench checkout> <out dir>}"
out="${2:?usage: sandbox.sh <KernelBench checkout> <out dir>}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
limit="${KBT_KBRL_LIMIT:-270}"
mkdir -p "$out"
IFS=, read -ra order <<< "${KBT_ORDER:-off,on}"
for mode in "${order[@]}"; do
  case "$mode" in
    off) args="--sandbox off" ;;
    on) args="" ;;
    *) echo "sandbox.sh: KBT_ORDER takes off and on, not '$mode'" >&2; exit 2 ;;
  esac
  KBT_KBRL_ARGS="$args" KBT_KBRL_LIMIT="$limit" KBT_DEADLINE=$((limit + 60)) \
    bash "$here/run.sh" "$kb" "$out/$mode" 0 kbrl > "$out/$mode.log" 2>&1
  echo "sandbox $mode: exit $?"
done
python3 - "$out" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
runs = {}
for mode in ("off", "on"):
    path = out / mode / "kbrl.jsonl"
    if not path.exists():
        continue
    rows = [json.loads(l) for l in path.read_text().splitlines() if l.strip()]
    end = next((r for r in rows if r.get("type") == "end"), None)
    results = {r["file"]: r["result"] for r in rows if "result" in r and "type" not in r}
    if end is None or not results:
        continue
    runs[mode] = {"wall_s": end["wall_s"], "n": len(results), "results": results,
                  "per_minute": 60.0 * len(results) / end["wall_s"]}
lines = ["# What the sandbox costs: kbrl-eval on the throughput workload, sandbox off and on\n",
         "| sandbox | candidates | wall s | candidates / min | correct | ran as configured |",
         "|---|---|---|---|---|---|"]
for mode, r in runs.items():
    want = "off" if mode == "off" else "bubblewrap"
    as_configured = sum(1 for x in r["results"].values() if (x.get("metadata") or {}).get("sandbox") == want)
    correct = sum(1 for x in r["results"].values() if x.get("correctness"))
    lines.append("| {} | {} | {:.1f} | {:.2f} | {} | {} of {} |".format(
        mode, r["n"], r["wall_s"], r["per_minute"], correct, as_configured, r["n"]))
if len(runs) == 2:
    ratio = runs["on"]["per_minute"] / runs["off"]["per_minute"]
    off, on = runs["off"]["results"], runs["on"]["results"]
    same = [f for f in off if f in on and off[f].get("error_category") == on[f].get("error_category")
            and bool(off[f].get("correctness")) == bool(on[f].get("correctness"))]
    differ = sorted(f for f in off if f in on and f not in same)
    lines.append("\n**Sandboxed / unsandboxed: {:.3f}x candidates per minute** ({}).".format(
        ratio, "within 5%" if ratio >= 0.95 else "more than 5% slower"))
    lines.append("Verdicts: {} of {} candidates evaluated by both agree{}.".format(
        len(same), len(same) + len(differ), "; differ: " + ", ".join(differ) if differ else ""))
else:
    lines.append("\nOnly {} finished: no ratio.".format(", ".join(runs) or "neither run"))
(out / "sandbox.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
