#!/usr/bin/env bash
# Downloads, into .gpu-carry/debs/ (gitignored, carried with .gpu-carry), the
# Debian packages that scripts/gpu-check.sh needs only for its FALLBACK: a
# build on the GPU machine when the binaries that scripts/gpu-pack.sh built
# here do not run there. They are the build-time halves (headers, CMake
# configs, the MPI compiler wrappers, protoc) of syncopt's dependencies; the
# run-time libraries come from gpu-pack.sh's sysroot, which gpu-check.sh
# unpacks first. cuDNN and NCCL headers and libraries come from the machine
# (PyTorch's nvidia-* wheels).
#
# Usage: scripts/fetch-gpu-debs.sh   (after scripts/gpu-pack.sh, which
# recreates .gpu-carry: run this again after it). Needs apt-get (run
# `apt-get update` first on a fresh machine). GPU_CARRY: the carry folder,
# as for gpu-pack.sh (default .gpu-carry).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARRY="${GPU_CARRY:-$ROOT/.gpu-carry}"
DEST="$CARRY/debs"

PACKAGES=(
  # Open MPI's headers and compiler wrappers (mpicxx.openmpi; the wrapper
  # data files are in openmpi-common, which the sysroot has)
  libopenmpi-dev
  # header-only and small libraries syncopt builds against
  libcli11-dev libspdlog-dev libfmt-dev libtomlplusplus-dev nlohmann-json3-dev catch2
  zlib1g-dev
  # oneDNN (the CPU backend, the CUDA tests' oracle); its CMake config
  # requires OpenCL
  libdnnl-dev ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
  # TensorBoard event files: protoc and libprotobuf (not in the sysroot)
  libprotobuf-dev libprotobuf32 protobuf-compiler libprotoc32
)

if ! apt-cache show "${PACKAGES[0]}" >/dev/null 2>&1; then
  echo "fetch-gpu-debs: apt-cache knows no ${PACKAGES[0]}; run 'apt-get update' first" >&2
  exit 1
fi
[[ -d "$CARRY" ]] || { echo "fetch-gpu-debs: no $CARRY: run scripts/gpu-pack.sh first" >&2; exit 1; }
rm -rf "$DEST"
mkdir -p "$DEST"
cd "$DEST"
# apt-get download fetches the candidate version into the current folder.
apt-get download "${PACKAGES[@]}"
echo "fetch-gpu-debs: $(ls -1 ./*.deb | wc -l) packages, $(du -sh . | cut -f1) in $DEST"
du -sh "$CARRY" | cut -f1 | xargs echo "fetch-gpu-debs: $CARRY now:"
