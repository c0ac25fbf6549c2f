#!/usr/bin/env bash
# Installs what kbrl needs to build and test, and nothing else; safe to run again.
#   system packages: apt on Debian 12 or Ubuntu 24.04 (only the missing ones are installed)
#   Python: a virtual environment in .venv with the pinned torch wheel (its libtorch is what
#           the C++ side links) and the packages in scripts/requirements.txt
# Environment: KBRL_VENV (default <repo>/.venv), KBRL_PYTHON_BOOTSTRAP (default python3),
#              KBRL_SKIP_APT=1 / KBRL_SKIP_PIP=1 to skip a half,
#              KBRL_HIPCC=1 to add AMD's HIP compiler (Debian 12 only; .ci/run sets it).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${KBRL_VENV:-$repo/.venv}"
bootstrap="${KBRL_PYTHON_BOOTSTRAP:-python3}"

. /etc/os-release
case "${ID}:${VERSION_ID}" in
  debian:12)    boost=1.81 ;;
  ubuntu:24.04) boost=1.83 ;;
  *) echo "deps.sh: ${PRETTY_NAME:-this OS} is not supported (Debian 12 or Ubuntu 24.04)" >&2; exit 1 ;;
esac
packages=(build-essential cmake ninja-build pkg-config git
          "libboost${boost}-dev" "libboost-json${boost}-dev"
          libfmt-dev catch2 bubblewrap libpcre2-dev libyaml-cpp-dev libcli11-dev libssl-dev python3-dev)
# FAISS 1.7.3 for dense retrieval (optional: without it the build leaves rag::DenseIndex out).
# Debian 12 only so far: Ubuntu 24.04's (1.7.4, universe) has not been tried here.
if [[ "${ID}:${VERSION_ID}" == debian:12 ]]; then packages+=(libfaiss-dev); fi
# Opt-in: Debian 12's hipcc 5.2.3 (clang 15, ROCm's device libraries, the HIP runtime's headers),
# for integration:hip_compile, which is skipped without it (docs/building.md, "AMD GPUs"). About
# 66 MB to download and 350 MB installed; no AMD GPU is needed to compile.
if [[ "${KBRL_HIPCC:-0}" == 1 ]]; then
  case "${ID}:${VERSION_ID}" in
    debian:12) packages+=(hipcc libamdhip64-dev) ;;
    # Ubuntu 24.04 has packages of the same names (ROCm 5.7, in universe), which this project has
    # not tried: add them here once integration:hip_compile has passed with them.
    *) echo "deps.sh: KBRL_HIPCC=1: the HIP compiler is installed on Debian 12 only, not on ${PRETTY_NAME}" ;;
  esac
fi

if [[ "${KBRL_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "deps.sh: installing ${missing[*]}"
    sudo=""; [[ $(id -u) -ne 0 ]] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
  else
    echo "deps.sh: system packages present"
  fi
fi

if [[ "${KBRL_SKIP_PIP:-0}" != 1 ]]; then
  if [[ ! -x "$venv/bin/python" ]]; then
    echo "deps.sh: creating $venv"
    "$bootstrap" -m venv "$venv"
  fi
  req="$repo/scripts/requirements.txt"
  stamp="$venv/.kbrl-requirements"
  if [[ -f "$stamp" ]] && cmp -s "$req" "$stamp" && "$venv/bin/python" -c "import torch" 2>/dev/null; then
    echo "deps.sh: Python packages present ($venv)"
  else
    echo "deps.sh: installing Python packages into $venv"
    # No pip cache: it would hold a second copy of the wheels (about 3 GB with torch's CUDA libraries).
    "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-cache-dir -r "$req"
    cp "$req" "$stamp"
  fi
fi
