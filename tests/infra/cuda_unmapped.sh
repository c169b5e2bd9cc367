#!/usr/bin/env bash
# A CPU run maps none of the CUDA libraries (issue "Keep going", point 5):
# the binary links none of them (ldd), and a running CPU trainer's
# /proc/PID/maps holds no CUDA runtime, cuBLAS, cuDNN or NCCL. In a build
# with the CUDA backend, compute.backend = "cuda" loads its module (next to
# the binary): without a GPU it says so (as it did when linked in), and
# with the module gone the message names it. SKIP (77): a build without CUDA.
#   tests/infra/cuda_unmapped.sh SYNCOPT_BINARY
set -uo pipefail
BIN=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/syncopt-cudamap-XXXXXX)
trap 'pkill -KILL -f "run.dir=$WORK" 2>/dev/null; rm -rf "$WORK"' EXIT
CUDA_RE='libcudart|libcublas|libcudnn|libnccl|libcuda\.so'
fail() { echo "FAIL: $*" >&2; exit 1; }
MODULE=$(dirname "$BIN")/libsyncopt_cuda_backend.so

if ldd "$BIN" | grep -E "$CUDA_RE"; then fail "the binary links CUDA libraries (above)"; fi
echo "ldd $BIN: no CUDA library"
"$BIN" train "$SRC/configs/smoke.toml" --quiet --set run.dir="$WORK" --set run.name=cpu \
  --set model.name=mlp --set train.steps=100000 >"$WORK/log" 2>&1 &
P=$!
for _ in $(seq 300); do [ -s "$WORK/cpu/steps.jsonl" ] && break; sleep 0.1; done
[ -s "$WORK/cpu/steps.jsonl" ] || fail "the CPU run never trained: $(cat "$WORK/log")"
MAPS=$(cat "/proc/$P/maps")
kill -KILL $P
wait $P 2>/dev/null
if grep -E "$CUDA_RE" <<<"$MAPS"; then fail "a CPU run maps CUDA libraries (above)"; fi
echo "a CPU run (pid $P) maps $(awk '{print $6}' <<<"$MAPS" | grep -c '\.so') shared-object regions, none of CUDA"

[ -f "$MODULE" ] || { echo "SKIP: no CUDA module next to the binary (a build without CUDA)"; exit 77; }
ldd "$MODULE" | grep -qE 'libcudnn|libnccl' || fail "the module links no cuDNN or NCCL: $(ldd "$MODULE")"
"$BIN" train "$SRC/configs/smoke.toml" --quiet --set run.dir="$WORK" --set run.name=gpu \
  --set model.name=mlp --set compute.backend=cuda >"$WORK/log-cuda" 2>&1
RC=$?
echo "compute.backend = cuda: exit $RC: $(grep -m1 syncopt: "$WORK/log-cuda")"
grep -q "module could not be loaded" "$WORK/log-cuda" && fail "the module did not load: $(cat "$WORK/log-cuda")"
if [ $RC = 0 ]; then
  echo "(a GPU is here: the run trained on it through the module)"
else
  grep -qiE "GPU|CUDA|device|driver" "$WORK/log-cuda" || fail "exit $RC without a word of the GPU: $(cat "$WORK/log-cuda")"
fi
SYNCOPT_CUDA_MODULE=$WORK/none.so "$BIN" train "$SRC/configs/smoke.toml" --quiet --set run.dir="$WORK" \
  --set run.name=nomod --set model.name=mlp --set compute.backend=cuda >"$WORK/log-nomod" 2>&1
RC=$?
echo "module missing: exit $RC: $(grep -m1 -o 'module could not be loaded' "$WORK/log-nomod")"
[ $RC = 78 ] || fail "module missing: exit $RC, expected 78: $(cat "$WORK/log-nomod")"
grep -q "none.so" "$WORK/log-nomod" || fail "the message does not name the path tried"
echo PASS
