#!/usr/bin/env bash
# Installs the Debian packages syncopt needs (only those missing), then
# configures and builds a Release build in build/ (or $SYNCOPT_BUILD_DIR).
# Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libcli11-dev libspdlog-dev
          catch2 libtomlplusplus-dev nlohmann-json3-dev libdnnl-dev ocl-icd-opencl-dev libopenblas-dev zlib1g-dev
          dataset-fashion-mnist python3 python3-matplotlib
          libprotobuf-dev protobuf-compiler)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing missing packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

BUILD_DIR=${SYNCOPT_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR" -j"$(nproc)"
