# Sourced by the GPU scripts (tests/gpu, benchmarks): puts the tools carried in .deps on PATH.
# The evaluator sandboxes candidates with bubblewrap and refuses to start without it; the GPU
# machine has none, so Debian 12's package travels in .deps/debs (docs/building.md, "Carrying
# bubblewrap") and is unpacked here on first use.
kbrl_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for kbrl_deb in "$kbrl_root"/.deps/debs/bubblewrap_*.deb; do
  if [[ -f "$kbrl_deb" && ! -x "$kbrl_root/.deps/bubblewrap/usr/bin/bwrap" ]]; then
    dpkg -x "$kbrl_deb" "$kbrl_root/.deps/bubblewrap"
  fi
done
if [[ -x "$kbrl_root/.deps/bubblewrap/usr/bin/bwrap" ]]; then
  export PATH="$kbrl_root/.deps/bubblewrap/usr/bin:$PATH"
fi
unset kbrl_root kbrl_deb
