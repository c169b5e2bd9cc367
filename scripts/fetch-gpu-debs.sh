#!/usr/bin/env bash
# Downloads, into .debs/ (gitignored), the Debian packages that
# scripts/gpu-check.sh unpacks on a bare GPU machine that has the CUDA
# toolkit, cuDNN / NCCL (as PyTorch's wheels) and CMake, but neither a
# package registry nor syncopt's other dependencies: Open MPI with its
# runtime libraries, CLI11, spdlog + fmt, toml++, oneDNN, Catch2 v2,
# nlohmann-json and zlib's headers. Also copies Fashion-MNIST (30 MB of .gz)
# into .debs/fashion-mnist when it is installed here, for the distributed run.
#
# Usage: scripts/fetch-gpu-debs.sh   (from anywhere; needs apt-get, as root
# or any user that can run `apt-get download`). Total: about 16 MB of .deb.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEST="$ROOT/.debs"
mkdir -p "$DEST"

# Build-time packages (headers, CMake configs, the MPI wrappers) and the
# shared libraries that syncopt, mpirun and Open MPI's plugins load. The
# base system (libc6, libstdc++6, libgcc-s1, zlib1g, libgomp1, libudev1,
# libuuid1) is on every machine with a compiler and is not fetched.
PACKAGES=(
  # Open MPI 4.1 and what its libraries and plugins link to
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
  libhwloc15 libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libpmix2
  libucx0 libfabric1 libibverbs1 librdmacm1 libpsm2-2 libpsm-infinipath1
  libnl-3-200 libnl-route-3-200 libmunge2 libnuma1 ocl-icd-libopencl1 libatomic1
  # header-only and small libraries syncopt builds against
  libcli11-dev libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libtomlplusplus-dev libtomlplusplus3 nlohmann-json3-dev catch2 zlib1g-dev
  # oneDNN (the CPU backend, the CUDA tests' oracle)
  libdnnl-dev libdnnl2
  # oneDNN's CMake config requires OpenCL (headers and libOpenCL.so)
  ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
)

if ! apt-cache show "${PACKAGES[0]}" >/dev/null 2>&1; then
  echo "fetch-gpu-debs: apt-cache knows no ${PACKAGES[0]}; run 'apt-get update' first" >&2
  exit 1
fi
cd "$DEST"
rm -f ./*.deb
# apt-get download needs a writable cwd and fetches the candidate version.
apt-get download "${PACKAGES[@]}"
ls -1 ./*.deb | wc -l | xargs echo "fetch-gpu-debs: .deb files:"
du -sh "$DEST" | cut -f1 | xargs echo "fetch-gpu-debs: total size:"

DATA=/usr/share/datasets/fashion-mnist
if [[ -f "$DATA/train-images-idx3-ubyte.gz" ]]; then
  mkdir -p "$DEST/fashion-mnist"
  cp "$DATA"/*-ubyte.gz "$DEST/fashion-mnist/"
  echo "fetch-gpu-debs: copied Fashion-MNIST into $DEST/fashion-mnist"
else
  echo "fetch-gpu-debs: no Fashion-MNIST at $DATA (apt-get install dataset-fashion-mnist);" \
       "gpu-check.sh will skip the distributed Fashion-MNIST run" >&2
fi
