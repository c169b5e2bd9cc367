#!/usr/bin/env bash
# Installs the Debian packages syncopt needs (only those missing), then
# configures and builds a Release build in build/ (or $SYNCOPT_BUILD_DIR).
# Usage: scripts/setup.sh [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libcli11-dev libspdlog-dev
          catch2 libtomlplusplus-dev nlohmann-json3-dev libdnnl-dev ocl-icd-opencl-dev libopenblas-dev zlib1g-dev
          dataset-fashion-mnist python3 python3-matplotlib clang-format
          python3-pip libprotobuf-dev protobuf-compiler)
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

# The TensorBoard event-file test (ctest -L tensorboard) reads syncopt's files
# with the real reader, PyPI's tensorboard (Debian packages none), run by the
# python3 on PATH, which is the one CMake finds for CTest.
if ! python3 -c 'import tensorboard' 2>/dev/null; then
  echo "setup: installing tensorboard from PyPI for $(command -v python3)"
  pip_args=(--quiet --disable-pip-version-check --root-user-action=ignore)
  # Debian's own python3 refuses pip installs (PEP 668) unless told to.
  if python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_args+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_args[@]}" tensorboard
fi

BUILD_DIR=${SYNCOPT_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR" -j"$(nproc)"
