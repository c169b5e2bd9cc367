#!/usr/bin/env bash
# Runs a command on an emulated bare GPU-machine image: in a private mount
# namespace (start it under `unshare -m --propagation private`), every shared
# library of /usr/lib/x86_64-linux-gnu is hidden except the C and C++
# runtimes and what the shell tools and Python that scripts/gpu-check.sh
# uses need; the CUDA toolkit (/usr/local/cuda-13.0, /usr/local/lib,
# /usr/local/bin), Open MPI (libraries, plugins, help files, mpirun) and
# oneDNN with it. The CUDA libraries the binaries need (cudart, cuBLAS,
# cuDNN, NCCL) are offered as on such a machine, in the layout of PyTorch's
# nvidia-* wheels: SCRATCH/site/nvidia/{cu13,cudnn,nccl}/lib, on PYTHONPATH.
# So whatever the carried bundle lacks fails to load, as it would there.
#
# Usage (root): unshare -m --propagation private tests/gpu-pack/bare_image.sh SCRATCH CMD...
# SCRATCH: an empty folder (a tmpfs is mounted on it for the namespace's life).
set -euo pipefail
SCRATCH="$1"
shift
MULTI=/usr/lib/x86_64-linux-gnu
CUDA=/usr/local/cuda-13.0

# --- what stays -------------------------------------------------------------------
TOOLS=(bash dash sh env timeout stdbuf xz tar gzip grep sed mawk gawk awk find xargs sort uniq head
  tail cut tr wc cat cp mv rm mkdir ln ls date sleep basename dirname readlink realpath tee mktemp
  sha256sum du nproc getconf ldd id uname hostname touch chmod kill python3 ldconfig)
ELFS=()
for t in "${TOOLS[@]}"; do
  p="$(command -v "$t" 2>/dev/null)" || continue
  ELFS+=("$(readlink -f "$p")")
done
PY="$(readlink -f "$(command -v python3)")"
PYDYN="$(python3 -c 'import sysconfig; print(sysconfig.get_config_var("DESTSHARED"))')"
ELFS+=("$PYDYN"/*.so /usr/libexec/coreutils/libstdbuf.so)
declare -A keep=()
for f in "${ELFS[@]}"; do
  while read -r lib; do
    [[ -n "$lib" ]] && keep["$(readlink -f "$lib")"]=1
  done < <(ldd "$f" 2>/dev/null | awk '/=>/ && $3 ~ /^\// {print $3} /^\t\/lib64/ {print $1}')
done
# The C and C++ runtimes whole (libnss_*, gconv, the loader), as every image has them.
for pkg in libc6 libstdc++6 libgcc-s1; do
  while read -r f; do
    [[ -f "$f" ]] && keep["$(readlink -f "$f")"]=1
  done < <(dpkg -L "$pkg" | grep -E "^(/usr)?/lib/x86_64-linux-gnu/[^/]+$")
done

mount -t tmpfs syncopt-bare "$SCRATCH"
mkdir -p "$SCRATCH/lib"
for e in "$MULTI"/*; do
  [[ -n "${keep[$(readlink -f "$e")]:-}" ]] && cp -a "$e" "$SCRATCH/lib/"
done
cp -a "$MULTI/gconv" "$SCRATCH/lib/" 2>/dev/null || true
kept=$(ls "$SCRATCH/lib" | wc -l)

# --- the CUDA libraries, as PyTorch's wheels lay them out --------------------------------
offer() {  # $1 = wheel folder, $2... = sonames from the toolkit
  local dir="$SCRATCH/site/nvidia/$1/lib" so
  shift
  mkdir -p "$dir"
  for so in "$@"; do
    touch "$dir/$so"
    mount --bind "$(readlink -f "$CUDA/lib64/$so")" "$dir/$so"
  done
}
offer cu13 libcudart.so.13 libcublas.so.13 libcublasLt.so.13
offer cudnn $(cd "$CUDA/lib64" && ls libcudnn*.so.9)
offer nccl libnccl.so.2

# --- hide (the libraries last: mount itself needs them) ----------------------------------
for d in "$CUDA" /usr/local/lib /usr/local/bin /usr/share/openmpi /etc/openmpi; do
  [[ -d "$d" ]] && mount -t tmpfs syncopt-hidden "$d"
done
# Open MPI's programs (their libraries are gone already; this keeps `which
# mpirun` from finding them).
while read -r f; do
  [[ -f "$f" && ! -L "$f" ]] && mount --bind /dev/null "$f"
done < <(dpkg -L openmpi-bin 2>/dev/null | grep '^/usr/bin/' || true)
# BARE_HIDE_XZ=1: an image without xz (the check must unpack without it).
if [[ "${BARE_HIDE_XZ:-0}" == 1 ]] && command -v xz >/dev/null; then
  mount --bind /dev/null "$(readlink -f "$(command -v xz)")"
fi
mount --bind "$SCRATCH/lib" "$MULTI"

echo "bare image: $kept entries kept in $MULTI; toolkit, Open MPI and oneDNN hidden;" \
  "CUDA libraries under $SCRATCH/site/nvidia (PYTHONPATH)"
export PYTHONPATH="$SCRATCH/site${PYTHONPATH:+:$PYTHONPATH}"
exec "$@"
