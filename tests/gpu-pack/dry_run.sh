#!/usr/bin/env bash
# The dry run of the GPU check (CTest gpu_pack_dry_run, label gpu-pack): packs
# the carry from BUILD_DIR (scripts/gpu-pack.sh, small data), then runs
# scripts/gpu-check.sh in dry-run mode on an emulated bare image
# (bare_image.sh: no system Open MPI, oneDNN or CUDA toolkit; the CUDA
# libraries laid out as PyTorch's wheels) and checks what it reports
# (check_dry_run.py): every step in its order, the carried libraries loaded
# from the carry, the CUDA ones from the "wheels", Python untouched by the
# carried LD_LIBRARY_PATH, the GPU steps skipped as they must be, training
# and the benchmark run on the CPU, the memory check's timeout counted as
# inconclusive, the log streamed. Then it removes one library from the
# bundle and checks that the same run fails, naming it.
#
# Usage: tests/gpu-pack/dry_run.sh BUILD_DIR WORK_DIR
# Exit 0 pass, 1 fail, 77 skip (not root, no private mount namespaces here,
# or a build without sm_90).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="$(cd "${1:?usage: dry_run.sh BUILD_DIR WORK_DIR}" && pwd)"
WORKDIR="${2:?usage: dry_run.sh BUILD_DIR WORK_DIR}"

if [[ "$(id -u)" != 0 ]] || ! unshare -m --propagation private true 2>/dev/null; then
  echo "SKIP: the dry run needs root and private mount namespaces (unshare -m) to hide the system's libraries"
  exit 77
fi
if ! grep -Eq '^CMAKE_CUDA_ARCHITECTURES:[A-Z]+=.*\b90\b' "$BUILD/CMakeCache.txt"; then
  echo "SKIP: $BUILD is not built for sm_90 (CMAKE_CUDA_ARCHITECTURES), which the carry is for"
  exit 77
fi
rm -rf "$WORKDIR"
mkdir -p "$WORKDIR"
WORKDIR="$(cd "$WORKDIR" && pwd)"

echo "== pack ($BUILD, 2000 training examples)"
if ! GPU_CARRY="$WORKDIR/carry" BUILD_DIR="$BUILD" TRAIN_EXAMPLES=2000 XZ_LEVEL=1 JOBS=2 \
  "$ROOT/scripts/gpu-pack.sh" >"$WORKDIR/pack.log" 2>&1; then
  tail -n 30 "$WORKDIR/pack.log"
  echo "FAIL: scripts/gpu-pack.sh failed"
  exit 1
fi
tail -n 2 "$WORKDIR/pack.log"

# check NAME CARRY EXPECT...: the dry run of the check on CARRY, then its verdict.
check() {
  local name="$1" carry="$2"
  shift 2
  mkdir -p "$WORKDIR/$name.scratch"
  echo "== dry run: $name"
  SYNCOPT_GPU_CHECK_DRY_RUN=1 SYNCOPT_GPU_CHECK_CARRY="$carry" \
    SYNCOPT_GPU_CHECK_WORK="$WORKDIR/$name.work" SYNCOPT_GPU_CHECK_MIN_ACC=0.25 \
    SYNCOPT_GPU_CHECK_SANITIZER="$HERE/stuck_sanitizer.sh" SYNCOPT_GPU_CHECK_MEMCHECK_S=2 \
    SYNCOPT_GPU_CHECK_BUDGET_S=400 SYNCOPT_GPU_CHECK_FAIL_FIRST=nccl_np2 \
    unshare -m --propagation private "$HERE/bare_image.sh" "$WORKDIR/$name.scratch" \
    "$ROOT/scripts/gpu-check.sh" "$WORKDIR/$name.out" >"$WORKDIR/$name.console" 2>&1
  local rc=$?
  cat "$WORKDIR/$name.out/summary.txt" 2>/dev/null || tail -n 40 "$WORKDIR/$name.console"
  python3 "$HERE/check_dry_run.py" --out "$WORKDIR/$name.out" --rc "$rc" \
    --scratch "$WORKDIR/$name.scratch" --work "$WORKDIR/$name.work" "$@"
}

check clean "$WORKDIR/carry" --expect pass || exit 1

# The same carry without one library Open MPI needs, on an image without xz:
# the check must unpack with python3's lzma, fail at the bundle step and
# name the library.
cp -r "$WORKDIR/carry" "$WORKDIR/carry-broken"
mkdir "$WORKDIR/unpacked"
tar -xJf "$WORKDIR/carry/bundle.tar.xz" -C "$WORKDIR/unpacked"
rm -f "$WORKDIR"/unpacked/root/usr/lib/x86_64-linux-gnu/libevent_core-2.1.so.7*
tar -C "$WORKDIR/unpacked" -cf - bin root | xz -T0 -1 >"$WORKDIR/carry-broken/bundle.tar.xz"
BARE_HIDE_XZ=1 check missing_lib "$WORKDIR/carry-broken" --expect missing-lib=libevent_core-2.1.so.7 || exit 1
echo "PASS: the dry run of scripts/gpu-check.sh passes on a bare image and fails without a carried library"
