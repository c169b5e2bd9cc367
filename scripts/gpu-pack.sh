#!/usr/bin/env bash
# Packs, into .gpu-carry/ (gitignored), what scripts/gpu-check.sh needs on a
# bare GPU machine (a driver; maybe a CUDA toolkit, PyTorch and its nvidia-*
# wheels; no package registry, maybe no Open MPI), so that one device run
# spends its minutes on the GPU, not on a build:
#   bundle.tar.xz   bin/: syncopt, the CUDA test binaries and
#                   syncopt_cuda_versions, built here with nvcc for sm_90
#                   (BUILD_DIR, default build-gpu);
#                   root/: a sysroot with the shared libraries they load
#                   (ldd) that a CUDA image may lack -- Open MPI 4.1 with its
#                   launcher, plugins, help files and PMIx, oneDNN, spdlog,
#                   fmt, toml++, protobuf, hwloc, libevent... -- copied from
#                   this machine's Debian packages. Never the CUDA libraries
#                   (cudart, cuBLAS, cuDNN, NCCL: hundreds of MB; the machine
#                   has them) nor the C/C++ runtime (glibc, libstdc++).
#   fashion-mnist/  Fashion-MNIST as IDX .gz: the first TRAIN_EXAMPLES
#                   training examples (default 20000) and the whole test set.
#   REQUIRES        what the machine must have, one line each, read by
#                   gpu-check.sh before anything runs: "glibc 2.36 FILE..."
#                   (the newest GLIBC_ symbol version each carried file
#                   needs), "glibcxx 3.4.30 FILE...", "cuda 13.0" (the
#                   runtime the binaries need: a driver that supports it).
#   MANIFEST        what is in it, from which commit, sizes, checksums.
# Then it prints the size that travels (the working tree plus .gpu-carry),
# which must stay under the device tool's 64 MiB.
#
# Usage: scripts/gpu-pack.sh          (from anywhere)
# Environment: BUILD_DIR (default build-gpu: configured here with
# -DCMAKE_CUDA_ARCHITECTURES=90 if it does not exist; an existing tree is
# used as it is, and must have sm_90), JOBS (default nproc),
# TRAIN_EXAMPLES (default 20000), DATA (default /usr/share/datasets/fashion-mnist),
# GPU_CARRY (the folder to fill, default .gpu-carry; tests/gpu-pack packs
# elsewhere), XZ_LEVEL (default 9).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BUILD="${BUILD_DIR:-build-gpu}"
JOBS="${JOBS:-$(nproc)}"
TRAIN_EXAMPLES="${TRAIN_EXAMPLES:-20000}"
DATA="${DATA:-/usr/share/datasets/fashion-mnist}"
CARRY="${GPU_CARRY:-$ROOT/.gpu-carry}"
XZ_LEVEL="${XZ_LEVEL:-9}"
# libsyncopt_cuda_backend.so: the CUDA backend, which syncopt loads from
# beside itself when compute.backend = "cuda".
BINARIES=(syncopt libsyncopt_cuda_backend.so tests/syncopt_cuda_tests tests/syncopt_nccl_mpi
  tests/syncopt_cuda_logic tests/syncopt_cuda_versions)
# The base system of any machine that runs CUDA programs, and the CUDA
# libraries the machine brings (toolkit, PyTorch's wheels): not carried.
SKIP_RE='^(linux-vdso|ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libgcc_s|libstdc\+\+|libcuda|libcudart|libcublas|libcublasLt|libcudnn[a-z_]*|libnccl|libnvidia-[a-z]*|libnvrtc[a-z.-]*|libnvJitLink)\.so'

say() { printf '== %s\n' "$*"; }
# Whether $1 is an ELF file (its magic number; `file` is not on every machine).
is_elf() {
  local magic=""
  IFS= read -r -n 4 magic <"$1" 2>/dev/null || true
  [[ "$magic" == $'\x7fELF' ]]
}

# --- 1. build -----------------------------------------------------------------
if [[ ! -f "$BUILD/CMakeCache.txt" ]]; then
  say "configure $BUILD (Release, CUDA on, sm_90)"
  cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DSYNCOPT_WITH_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90
fi
grep -Eq '^CMAKE_CUDA_ARCHITECTURES:[A-Z]+=.*\b90\b' "$BUILD/CMakeCache.txt" ||
  { echo "gpu-pack: $BUILD is not built for sm_90 (CMAKE_CUDA_ARCHITECTURES)" >&2; exit 1; }
say "build ${BINARIES[*]} in $BUILD"
cmake --build "$BUILD" -j "$JOBS" --target syncopt syncopt_cuda_module syncopt_cuda_tests \
  syncopt_nccl_mpi syncopt_cuda_logic syncopt_cuda_versions

# --- 2. stage -----------------------------------------------------------------
STAGE="$(mktemp -d)"
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/root"
for b in "${BINARIES[@]}"; do
  cp "$BUILD/$b" "$STAGE/bin/"
  strip --strip-unneeded "$STAGE/bin/$(basename "$b")"
done
# Copies a file into the sysroot at its own path, with the links that lead
# to it (libfoo.so.1 -> libfoo.so.1.2.3).
put() {
  local f="$1"
  [[ "$f" == /lib/* || "$f" == /lib64/* ]] && f="/usr$f"  # Debian merged /usr
  while [[ -L "$f" ]]; do
    mkdir -p "$STAGE/root$(dirname "$f")"
    cp -P "$f" "$STAGE/root$f"
    local t
    t="$(readlink "$f")"
    [[ "$t" == /* ]] || t="$(dirname "$f")/$t"
    f="$t"
  done
  mkdir -p "$STAGE/root$(dirname "$f")"
  cp -p "$f" "$STAGE/root$f"
}
# Open MPI's runtime whole (mpirun/orterun, orted, the MCA plugins, help
# texts, the default MCA parameters) and PMIx's, from the installed
# packages' own file lists. Plugins for fabrics the machine does not have
# (UCX, OFI, verbs, PSM) pull large libraries and fail to load harmlessly:
# they stay behind.
say "Open MPI runtime from the installed packages"
for pkg in openmpi-bin openmpi-common libopenmpi3 libpmix2; do
  while IFS= read -r f; do
    [[ -f "$f" || -L "$f" ]] || continue
    case "$f" in
      */include/* | */man/* | */doc/* | */lintian/* | *.a | *.la) continue ;;
      *mca_*ucx* | *mca_*ofi* | *mca_*openib* | *mca_*psm* | *mca_btl_usnic* | *mca_*verbs*) continue ;;
    esac
    put "$f"
  done < <(dpkg -L "$pkg")
done
# Debian's alternatives (mpirun -> orterun) are made by maintainer scripts.
ln -sf orterun "$STAGE/root/usr/bin/mpirun"
# The shared libraries of the binaries and of the staged Open MPI pieces,
# to a fixed point.
say "shared libraries (ldd closure)"
declare -A seen
scan() {  # $1 = an ELF file; puts what it needs from this system
  local lib path
  while read -r lib path; do
    [[ -n "$path" && "$path" != "not" ]] || continue
    [[ "$lib" =~ $SKIP_RE ]] && continue
    [[ -n "${seen[$path]:-}" ]] && continue
    seen[$path]=1
    put "$path"
    scan "$path"
  done < <(ldd "$1" 2>/dev/null | awk '/=>/ {print $1, $3}')
}
for f in "$STAGE"/bin/* $(find "$STAGE/root" -type f \( -name '*.so*' -o -perm -u+x \)); do
  if is_elf "$f"; then scan "$f"; fi
done
# What each carried ELF file needs of the machine's C and C++ runtimes: the
# newest symbol versions it references (gpu-check.sh compares them with the
# machine's before it starts anything, and says which files cannot load).
need_versions() {  # $1 = GLIBC or GLIBCXX; prints "VERSION FILE" per file that needs one
  local f v
  while IFS= read -r f; do
    v="$(objdump -T "$f" 2>/dev/null | { grep -o "${1}_[0-9][0-9.]*" || true; } |
      sed "s/^${1}_//" | sort -uV | tail -1)"
    if [[ -n "$v" ]]; then echo "$v ${f#"$STAGE"/}"; fi
  done < <(find "$STAGE/bin" "$STAGE/root" -type f \( -name '*.so*' -o -perm -u+x \) -print |
    while IFS= read -r f; do if is_elf "$f"; then echo "$f"; fi; done)
}
{
  # One line per version, newest first, listing the files that need it.
  for sym in GLIBC GLIBCXX; do
    need_versions "$sym" | sort -k1,1Vr | awk -v s="$(echo "$sym" | tr 'A-Z' 'a-z')" '
      $1 != v { if (v != "") print s, v, files; v = $1; files = "" }
      { files = files (files == "" ? "" : " ") $2 }
      END { if (v != "") print s, v, files }'
  done
  echo "cuda $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
} >"$STAGE/REQUIRES"
tar -C "$STAGE" -cf - bin root | xz -T0 "-$XZ_LEVEL" >"$STAGE/bundle.tar.xz"

# --- 3. data ------------------------------------------------------------------
say "Fashion-MNIST: first $TRAIN_EXAMPLES training examples, all test examples"
mkdir -p "$STAGE/fashion-mnist"
python3 - "$DATA" "$STAGE/fashion-mnist" "$TRAIN_EXAMPLES" <<'PY'
import gzip, struct, sys
src, dst, n_train = sys.argv[1], sys.argv[2], int(sys.argv[3])
for name in ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"):
    with gzip.open(f"{src}/{name}.gz", "rb") as f:
        data = f.read()
    magic, count = struct.unpack(">II", data[:8])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * (dims - 1), data[8:4 + 4 * dims])
    per = 1
    for d in shape:
        per *= d
    keep = min(count, n_train) if name.startswith("train") else count
    head = struct.pack(">II", magic, keep) + data[8:4 + 4 * dims]
    body = data[4 + 4 * dims:4 + 4 * dims + keep * per]
    with gzip.open(f"{dst}/{name}.gz", "wb", compresslevel=9) as f:
        f.write(head + body)
    print(f"  {name}: {keep} of {count}")
PY

# --- 4. swap in, manifest, size --------------------------------------------------
rm -rf "$CARRY"
mkdir -p "$CARRY"
mv "$STAGE/bundle.tar.xz" "$STAGE/fashion-mnist" "$STAGE/REQUIRES" "$CARRY/"
{
  echo "syncopt GPU carry, made by scripts/gpu-pack.sh on $(hostname) at $(date -u +%FT%TZ)"
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD -- . ':!.gpu-carry' 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "nvcc $(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), sm_90"
  echo "cuDNN $(grep -E '#define CUDNN_(MAJOR|MINOR|PATCHLEVEL) ' /usr/local/cuda/include/cudnn_version.h | awk '{print $3}' | paste -sd.)," \
       "NCCL $(grep -E '#define NCCL_(MAJOR|MINOR|PATCH) ' /usr/local/cuda/include/nccl.h | awk '{print $3}' | paste -sd.) (headers built against; the machine brings the libraries)"
  echo "needs glibc $(awk '$1 == "glibc" {print $2; exit}' "$CARRY/REQUIRES")," \
       "libstdc++ GLIBCXX $(awk '$1 == "glibcxx" {print $2; exit}' "$CARRY/REQUIRES")" \
       "(the machine's own; built here on $(. /etc/os-release && echo "$PRETTY_NAME"); REQUIRES says which file needs what)"
  echo "train examples: $TRAIN_EXAMPLES"
  echo
  (cd "$CARRY" && find . -type f ! -name MANIFEST -exec sha256sum {} + | sort -k2)
  echo
  echo "bundle contents:"
  xz -dc "$CARRY/bundle.tar.xz" | tar -tvf - | awk '{print $3, $6}' | sort -k2
} >"$CARRY/MANIFEST"
tree_b=$(git ls-files -co --exclude-standard -z | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1)
python3 - "$CARRY" "$tree_b" <<'PY'
import os, sys
carry, tree = sys.argv[1], int(sys.argv[2])
def size(p):
    return os.path.getsize(p) if os.path.isfile(p) else sum(
        os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)
mib = 1 << 20
total = size(carry)
print(f"gpu-pack: .gpu-carry {total / mib:.1f} MiB (bundle {size(carry + '/bundle.tar.xz') / mib:.1f}"
      f" MiB, data {size(carry + '/fashion-mnist') / mib:.1f} MiB) + working tree {tree / mib:.1f}"
      f" MiB = {(total + tree) / mib:.1f} MiB of the 64 MiB that travel")
PY
echo "gpu-pack: carry it with the device tool: run(command='scripts/gpu-check.sh \$OUT', carry=['.gpu-carry'], timeout_s=600)"
