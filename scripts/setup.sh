#!/usr/bin/env bash
# Installs the Debian packages syncopt needs (only those missing), then
# configures and builds a Release build in build/ (or $SYNCOPT_BUILD_DIR).
# Usage: scripts/setup.sh [--tests] [extra cmake args...]
#   --tests            also what only the tests need (TEST_PACKAGES; scripts/test.sh)
#   --list-packages    print PACKAGES and exit (scripts/check-packages.py reads it)
#
# PACKAGES is everything the build and a run use, and nothing may be missing
# from it: apt installs with --no-install-recommends, so a package that is
# only a Recommends of one listed here must be listed itself. oneDNN 3 is not
# a Debian package (bookworm has 2.6): scripts/fetch-onednn.py puts PyPI's
# onednn-cpu-gomp wheels into .deps/ unless cmake is given -DDNNL_ROOT.
# ocl-icd-opencl-dev: CMake's FindCUDAToolkit records libOpenCL (CUDA::OpenCL)
# where it exists; listed so that fresh and used machines configure alike.
# clang and libclang-rt-14-dev (libFuzzer's runtime, only a Recommends of
# clang's): the fuzz tests (tests/fuzz, CTest label fuzz) build with them. scripts/test.sh checks this after every build
# (scripts/check-packages.py: every file the build used, mapped to its
# package, against this list and its Depends).
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(build-essential cmake pkg-config libopenmpi-dev openmpi-bin libcli11-dev libspdlog-dev
          catch2 libtomlplusplus-dev nlohmann-json3-dev ocl-icd-opencl-dev libopenblas-dev zlib1g-dev
          dataset-fashion-mnist python3 python3-matplotlib clang-format
          python3-pip libprotobuf-dev protobuf-compiler libhdf5-dev
          clang libclang-rt-14-dev)
# The SLURM tests (ctest -L slurm, root only) start a private single-node
# SLURM: scripts/slurm/local-cluster.sh, which installs the same list when run
# by itself. Installed here so that a test's time limit never pays for apt.
# The cluster tests (ctest -L cluster, root only) make hosts of network
# namespaces with iproute2's ip and tc (unshare is util-linux's, essential).
TEST_PACKAGES=(
  slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libpmix-dev iproute2)

tests=0
if [ "${1:-}" = --list-packages ]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi
if [ "${1:-}" = --tests ]; then
  tests=1
  shift
fi
wanted=("${PACKAGES[@]}")
if ((tests)) && [ "$(id -u)" -eq 0 ]; then wanted+=("${TEST_PACKAGES[@]}"); fi
missing=()
for p in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing missing packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python modules from PyPI for the python3 on PATH, which is the one CMake
# finds for CTest: the TensorBoard event-file test (ctest -L tensorboard)
# reads syncopt's files with the real reader, tensorboard (Debian packages
# none); the function-length check (ctest -L arch) measures with lizard.
pip_install() {  # MODULE PACKAGE
  if python3 -c "import $1" 2>/dev/null; then return; fi
  echo "setup: installing $2 from PyPI for $(command -v python3)"
  local pip_args=(--quiet --disable-pip-version-check --root-user-action=ignore)
  # Debian's own python3 refuses pip installs (PEP 668) unless told to.
  if python3 -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED")))'; then
    pip_args+=(--break-system-packages)
  fi
  python3 -m pip install "${pip_args[@]}" "$2"
}
pip_install tensorboard tensorboard
pip_install lizard lizard
# The own-data tests (tests/data/test_own_data.py) write HDF5 files with h5py
# (5 MB) and images with Pillow (Debian's python3 has it through matplotlib);
# tests/paper/test_syncopt_runs.py reads tables as pandas DataFrames and an
# export with MLflow's own client (mlflow-skinny: 4 MB, but about 120 MB with
# what it depends on, 3 minutes here).
if ((tests)); then
  pip_install h5py h5py
  pip_install PIL pillow
  pip_install pandas pandas
  pip_install mlflow mlflow-skinny
  # The safetensors round trip (tests/e2e/test_safetensors.py) loads an
  # export into PyTorch. PyPI's torch is the CUDA build: 3.0 GB downloaded
  # (torch 539 MB, the rest NVIDIA's libraries), 5.3 GB installed, 11 min
  # here; into .deps/torch (ignored by git, kept between runs), never into
  # the system's Python, and only once.
  if ! python3 -c "import sys; sys.path.insert(0, '.deps/torch'); import torch, safetensors" 2>/dev/null; then
    echo "setup: installing torch and safetensors from PyPI into .deps/torch (about 3 GB)"
    python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      --target .deps/torch torch safetensors
  fi
fi

# oneDNN 3 for the CPU backend, unless the caller names one (DNNL_ROOT, or
# -DDNNL_ROOT= among the cmake arguments).
if [ -z "${DNNL_ROOT:-}" ] && [[ " $* " != *" -DDNNL_ROOT="* ]]; then
  python3 scripts/fetch-onednn.py
fi

BUILD_DIR=${SYNCOPT_BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR" -j"$(nproc)"
