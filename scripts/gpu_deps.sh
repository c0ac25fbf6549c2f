#!/usr/bin/env bash
# Fills .deps/ (ignored by git) with what the GPU machine lacks, from this Debian 12 machine, so
# that the device tool can carry it (`carry: [".deps"]`; docs/building.md, "On the GPU machine"):
#   .deps/debs/     bubblewrap (the evaluator's sandbox), libcli11-dev, libssl-dev as .deb files,
#                   unpacked there by tests/gpu/build.sh and tests/gpu/env.sh
#   .deps/pcre2/    pcre2.h (the machine has PCRE2's library, not its header)
#   .deps/yaml-cpp/ yaml-cpp's headers and library (the machine has none)
#   .deps/KernelBench  a KernelBench checkout, with a path (a checkout or a git directory) given
#   scripts/gpu_deps.sh [KernelBench checkout or git dir]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
deps="$repo/.deps"
mkdir -p "$deps/debs" "$deps/pcre2" "$deps/yaml-cpp/include" "$deps/yaml-cpp/lib"
for pkg in bubblewrap libcli11-dev libssl-dev; do
  ls "$deps/debs/${pkg}"_*.deb > /dev/null 2>&1 || (cd "$deps/debs" && apt-get download "$pkg")
done
cp /usr/include/pcre2.h "$deps/pcre2/"
cp -r /usr/include/yaml-cpp "$deps/yaml-cpp/include/"
lib=$(ls /usr/lib/x86_64-linux-gnu/libyaml-cpp.so.0.7.* | head -1)
cp "$lib" "$deps/yaml-cpp/lib/libyaml-cpp.so"
cp "$lib" "$deps/yaml-cpp/lib/libyaml-cpp.so.0.7"
if [[ -n "${1:-}" ]]; then
  rm -rf "$deps/KernelBench"
  if [[ -d "$1/KernelBench/level1" ]]; then
    cp -r "$1" "$deps/KernelBench"
  else  # a git directory (a bare mirror): its newest commit
    mkdir -p "$deps/KernelBench"
    git --git-dir "$1" archive HEAD | tar -x -C "$deps/KernelBench"
  fi
  [[ -d "$deps/KernelBench/KernelBench/level1" ]] || { echo "gpu_deps.sh: $1 holds no KernelBench/level1" >&2; exit 1; }
fi
du -sh "$deps"
