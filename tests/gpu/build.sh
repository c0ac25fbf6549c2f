#!/usr/bin/env bash
# Configures and builds the cuda preset on the GPU machine (through the device tool), from the
# repository root, with what travels in .deps (docs/building.md, "On the GPU machine"):
#   bash tests/gpu/build.sh [log dir ($OUT or build/gpu-results)] [cmake --build arguments]
# The machine lacks CLI11 and, on some images, OpenSSL's headers: their Debian 12 packages
# (.deps/debs/libcli11-dev_*.deb, libssl-dev_*.deb) are unpacked here and the build points at
# them (OpenSSL's headers over the machine's own libssl.so.3: the same 3.0 ABI).
set -uo pipefail
out="${1:-${OUT:-build/gpu-results}}"
shift $(( $# > 0 ? 1 : 0 ))  # the rest: passed to cmake --build (e.g. --target kbrl-evald)
mkdir -p "$out"
for deb in .deps/debs/libcli11-dev_*.deb; do
  [[ -f "$deb" && ! -f .deps/cli11/usr/include/CLI/CLI.hpp ]] && dpkg -x "$deb" .deps/cli11
done
extra=()
if [[ ! -f /usr/include/openssl/ssl.h ]]; then
  deb=$(ls .deps/debs/libssl-dev_*.deb 2>/dev/null | head -1)
  lib=/usr/lib/x86_64-linux-gnu
  if [[ -n "$deb" && -f $lib/libssl.so.3 ]]; then
    if [[ ! -f .deps/openssl/include/openssl/ssl.h ]]; then
      dpkg -x "$deb" .deps/openssl-deb
      mkdir -p .deps/openssl/include
      cp -r .deps/openssl-deb/usr/include/openssl .deps/openssl/include/
      cp .deps/openssl-deb/usr/include/x86_64-linux-gnu/openssl/* .deps/openssl/include/openssl/
    fi
    extra+=(-DOPENSSL_INCLUDE_DIR="$PWD/.deps/openssl/include" -DOPENSSL_SSL_LIBRARY=$lib/libssl.so.3
            -DOPENSSL_CRYPTO_LIBRARY=$lib/libcrypto.so.3)
  fi
fi
cmake --preset cuda "${extra[@]}" > "$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build --preset cuda -j "$(nproc)" "$@" > "$out/build.log" 2>&1 || { grep -E "error" -A5 "$out/build.log" | head -60; exit 1; }
echo "build: ok"
