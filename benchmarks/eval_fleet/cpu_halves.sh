#!/usr/bin/env bash
# Splits this machine's CPUs into two halves of equal compute for two servers, keeping the
# hardware threads of a core in the same half, and prints them: "<cpus of A> <cpus of B>" (comma
# lists). Where lscpu reports several threads per core, its core ids are used. Virtual machines
# often report one thread per core while their vCPUs are in fact pairs of hyperthreads; there
# the pairs are measured (cpu_spin.c: a CPU whose work rate drops when another one works shares
# its core) and the measurements written to <report>.
# usage: bash benchmarks/eval_fleet/cpu_halves.sh <report.md>
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^[^#]/s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"
  exit 0
fi
report="${1:?usage: cpu_halves.sh <report.md>}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mapfile -t pairs < <(lscpu -p=CPU,CORE | grep -v '^#' | sort -t, -k2,2n -k1,1n)
n=${#pairs[@]}
cores=$(printf '%s\n' "${pairs[@]}" | cut -d, -f2 | sort -u | wc -l)
# halves_by_core: stdin "cpu,core" lines; the first half of the cores (with all their threads)
# goes to A.
halves_by_core() {
  awk -F, '{ core[NR] = $2; cpu[NR] = $1; if (!($2 in seen)) { seen[$2] = n++ } }
    END { for (i = 1; i <= NR; i++) { if (seen[core[i]] < n / 2) a = a (a ? "," : "") cpu[i]; else b = b (b ? "," : "") cpu[i] }
          print a, b }'
}
if (( cores < n )); then
  echo "lscpu: $n CPUs on $cores cores; halves by lscpu's core ids" > "$report"
  printf '%s\n' "${pairs[@]}" | halves_by_core
  exit 0
fi
scratch="$(mktemp -d "${TMPDIR:-/tmp}/kbrl-cpu-halves.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
cc -O2 -o "$scratch/cpu_spin" "$here/cpu_spin.c"
spin() { "$scratch/cpu_spin" 0.3 "$@"; }
rate_of() { awk -v c="$1" '$1 == c { print $2 }'; }
cpus=($(printf '%s\n' "${pairs[@]}" | cut -d, -f1))
first=${cpus[0]}
alone=$(spin "$first" | rate_of "$first")
{ echo "lscpu: $n CPUs, one thread per core; measured which CPUs share a core (cpu_spin.c, 0.3 s each)"
  echo
  echo "| CPU $first with | its work rate, relative to alone |"
  echo "|---|---|"; } > "$report"
partner="" lowest=1
for c in "${cpus[@]:1}"; do
  r=$(spin "$first" "$c" | rate_of "$first")
  ratio=$(awk -v r="$r" -v a="$alone" 'BEGIN { printf "%.2f", r / a }')
  echo "| $c | $ratio |" >> "$report"
  if awk -v x="$ratio" -v l="$lowest" 'BEGIN { exit !(x < 0.8 && x < l) }'; then partner=$c lowest=$ratio; fi
done
sibling() { echo $(( $1 ^ (partner ^ first) )); }
confirmed=0
if [[ -n "$partner" ]]; then
  # The pattern CPU 0's partner suggests (i XOR d), checked on four more CPUs.
  confirmed=1
  for k in 1 2 3 4; do
    c=${cpus[$(( k * n / 5 ))]}
    s=$(sibling "$c")
    (( s < n && s != c )) || { confirmed=0; break; }
    r=$(spin "$c" "$s" | rate_of "$c")
    a=$(spin "$c" | rate_of "$c")
    ratio=$(awk -v r="$r" -v a="$a" 'BEGIN { printf "%.2f", r / a }')
    echo "| (check) CPU $c with $s | $ratio |" >> "$report"
    awk -v x="$ratio" 'BEGIN { exit !(x < 0.8) }' || { confirmed=0; break; }
  done
fi
if (( confirmed )); then
  split=$(for c in "${cpus[@]}"; do s=$(sibling "$c"); echo "$c,$(( c < s ? c : s ))"; done | sort -t, -k2,2n -k1,1n | halves_by_core)
  echo -e "\nCPUs pair up as i and i XOR $((partner ^ first)) (hyperthreads of one core); halves keep pairs together" >> "$report"
else
  split=$(printf '%s\n' "${pairs[@]}" | halves_by_core)
  echo -e "\nNo consistent pairs: every CPU is taken as a core of its own" >> "$report"
fi
read -r a b <<< "$split"
# What the machine gives when both halves work, against one half alone (per-CPU work rates).
sum() { awk '{ s += $2 } END { printf "%.1f", s }'; }
one=$(spin ${a//,/ } | sum)
both=$(spin ${a//,/ } ${b//,/ } | sum)
echo -e "\nWork rate of all CPUs of half A alone: $one; of both halves at once: $both ($(awk -v x="$both" -v y="$one" 'BEGIN { printf "%.2f", x / y }')x)" >> "$report"
echo "$a $b"
