#!/usr/bin/env bash
# The GPU check of syncopt, in one go, on a bare GPU machine (e.g. an H200
# with the CUDA toolkit, PyTorch and CMake, but no package registry):
#   1. dependencies: unpacks the Debian packages of .debs/ (made here by
#      scripts/fetch-gpu-debs.sh: Open MPI, CLI11, spdlog, toml++, oneDNN,
#      Catch2, nlohmann-json) into a private sysroot and points CMake, the
#      loader and Open MPI at it; finds cuDNN and NCCL (toolkit folders or
#      PyTorch's nvidia-* wheels);
#   2. configures and builds Release with -DSYNCOPT_WITH_CUDA=ON for sm_90;
#   3. runs `ctest -L cuda` (the CUDA backend against the CPU oracle, NCCL
#      against MPI_Allreduce);
#   4. benchmarks the reference CNN: syncopt's CUDA backend vs PyTorch on the
#      same GPU, batch 128 and 512 (bench/cnn_cuda_vs_torch.py);
#   5. runs `mpirun -np 4` synchronous SGD with N = 2, b = 1 (1 PS, 3 GPU
#      workers sharing the GPU) on Fashion-MNIST with compute.backend = cuda.
# Writes OUT_DIR/gpu-check.log (everything), OUT_DIR/gpu-check.json (the
# figures and verdicts), OUT_DIR/bench.json, OUT_DIR/ctest-cuda.xml and
# OUT_DIR/sync-summary.json. Exit code: 0 when every step passed, else 1.
#
# Usage: scripts/gpu-check.sh OUT_DIR
# Environment: SYNCOPT_GPU_CHECK_STEPS (bench steps, default 200),
# SYNCOPT_GPU_CHECK_ROUNDS (bench rounds, default 2), SYNCOPT_GPU_CHECK_EPOCHS
# (Fashion-MNIST epochs, default 1), SYNCOPT_USE_SYSTEM_DEPS=1 (ignore .debs/),
# SYSROOT (default /tmp/syncopt-sysroot), BUILD_DIR (default build-gpu).
set -uo pipefail

OUT="${1:?usage: scripts/gpu-check.sh OUT_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/gpu-check.log"
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1

BUILD="${BUILD_DIR:-$ROOT/build-gpu}"
SYSROOT="${SYSROOT:-/tmp/syncopt-sysroot}"
STEPS="${SYNCOPT_GPU_CHECK_STEPS:-200}"
ROUNDS="${SYNCOPT_GPU_CHECK_ROUNDS:-2}"
EPOCHS="${SYNCOPT_GPU_CHECK_EPOCHS:-1}"
export PATH="/usr/local/cuda/bin:$PATH"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
T0=$(date +%s)
declare -A STATUS  # step -> ok | failed | skipped

say() { printf '\n== [%4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }

# --- 0. the machine --------------------------------------------------------
say "machine"
GPU_NAME="$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
DRIVER="$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -1)"
NVCC_VERSION="$(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
echo "gpu: ${GPU_NAME:-none}  driver: ${DRIVER:-none}  nvcc: ${NVCC_VERSION:-none}  cores: $(nproc)"
command -v cmake >/dev/null || { echo "gpu-check: no cmake on the PATH"; exit 1; }
cmake --version | head -1
g++ --version | head -1
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' || true

# --- 1. dependencies -------------------------------------------------------
say "dependencies"
unpack_deb() {  # $1 = .deb, $2 = destination
  if command -v dpkg-deb >/dev/null; then
    dpkg-deb -x "$1" "$2"
  else  # ar + tar: a .deb is an ar archive holding data.tar.*
    local tmp
    tmp="$(mktemp -d)"
    (cd "$tmp" && ar x "$1" && tar -xf data.tar.* -C "$2")
    rm -rf "$tmp"
  fi
}
CMAKE_EXTRA=()
if [[ "${SYNCOPT_USE_SYSTEM_DEPS:-0}" != 1 ]] && compgen -G "$ROOT/.debs/*.deb" >/dev/null; then
  rm -rf "$SYSROOT"
  mkdir -p "$SYSROOT"
  for deb in "$ROOT"/.debs/*.deb; do unpack_deb "$deb" "$SYSROOT" || exit 1; done
  U="$SYSROOT/usr"
  L="$U/lib/x86_64-linux-gnu"
  # Debian's alternatives (mpirun, mpicxx) are made by maintainer scripts,
  # which dpkg -x does not run: name the .openmpi binaries.
  export PATH="$U/bin:$PATH"
  export LD_LIBRARY_PATH="$L:$L/openmpi/lib:$L/pmix2/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Open MPI and PMIx were built for /usr: these relocate them to the sysroot.
  export OPAL_PREFIX="$U"
  export PMIX_INSTALL_PREFIX="$L/pmix2"
  export PMIX_MCA_mca_base_component_path="$L/pmix2/lib/pmix"
  export OMPI_MCA_mca_base_component_show_load_errors=0
  CMAKE_EXTRA+=("-DCMAKE_PREFIX_PATH=$U"
                "-DMPI_CXX_COMPILER=$U/bin/mpicxx.openmpi"
                "-DMPI_C_COMPILER=$U/bin/mpicc.openmpi"
                "-DMPIEXEC_EXECUTABLE=$U/bin/mpirun.openmpi")
  MPIRUN="$U/bin/mpirun.openmpi"
  echo "unpacked $(ls "$ROOT"/.debs/*.deb | wc -l) packages into $SYSROOT"
else
  MPIRUN="$(command -v mpirun || true)"
  echo "using the system's packages (no .debs/ or SYNCOPT_USE_SYSTEM_DEPS=1)"
fi
# cuDNN and NCCL: the toolkit's folders, else PyTorch's nvidia-* wheels.
find_root() {  # $1 = header name; prints the folder above include/
  local d h
  for d in /usr/local/cuda /usr/local/cuda-13.0 /usr \
           $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
    [[ -d "$d" ]] || continue
    h="$(find "$d" -maxdepth 5 -name "$1" -path '*include*' 2>/dev/null | head -1)"
    if [[ -n "$h" ]]; then dirname "$(dirname "$h")"; return 0; fi
  done
  return 1
}
CUDNN_ROOT="${CUDNN_ROOT:-$(find_root cudnn.h || true)}"
NCCL_ROOT="${NCCL_ROOT:-$(find_root nccl.h || true)}"
echo "cuDNN: ${CUDNN_ROOT:-not found}   NCCL: ${NCCL_ROOT:-not found}"
for r in "$CUDNN_ROOT" "$NCCL_ROOT"; do
  [[ -n "$r" ]] && export LD_LIBRARY_PATH="$r/lib:$r/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export CUDNN_ROOT NCCL_ROOT

# --- 2. configure and build --------------------------------------------------
say "configure + build (Release, CUDA on, sm_90)"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
if cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSYNCOPT_WITH_CUDA=ON \
     -DCMAKE_CUDA_ARCHITECTURES=90 "-DCUDNN_ROOT=$CUDNN_ROOT" "-DNCCL_ROOT=$NCCL_ROOT" \
     "${CMAKE_EXTRA[@]}" &&
   cmake --build "$BUILD" -j "$(nproc)"; then
  STATUS[build]=ok
else
  STATUS[build]=failed
fi

# --- 3. the CUDA tests -------------------------------------------------------
if [[ "${STATUS[build]}" == ok ]]; then
  say "ctest -L cuda"
  if (cd "$BUILD" && timeout 400 ctest -L cuda --output-on-failure --output-junit "$OUT/ctest-cuda.xml"); then
    STATUS[ctest_cuda]=ok
    # On a GPU the backend test must run: a skip there is a failure.
    if [[ -n "$GPU_NAME" ]] && python3 - "$OUT/ctest-cuda.xml" <<'PY'
import sys, xml.etree.ElementTree as ET
cases = [c for c in ET.parse(sys.argv[1]).getroot().iter("testcase") if c.get("name") == "cuda_backend"]
sys.exit(0 if not cases or any(c.find("skipped") is not None or c.get("status") == "notrun" for c in cases) else 1)
PY
    then
      echo "gpu-check: cuda_backend was skipped (or missing) on a machine with a GPU"
      STATUS[ctest_cuda]=failed
    fi
  else
    STATUS[ctest_cuda]=failed
  fi
else
  STATUS[ctest_cuda]=skipped
fi

# --- 4. throughput vs PyTorch ------------------------------------------------
if [[ "${STATUS[build]}" == ok ]]; then
  say "benchmark: reference CNN, syncopt cuda vs PyTorch, batch 128 and 512"
  if timeout 300 python3 "$ROOT/bench/cnn_cuda_vs_torch.py" --exe "$BUILD/syncopt" \
       --batches 128,512 --steps "$STEPS" --rounds "$ROUNDS" --json "$OUT/bench.json"; then
    STATUS[bench]=ok
  else
    STATUS[bench]=failed
  fi
else
  STATUS[bench]=skipped
fi

# --- 5. distributed sync SGD on Fashion-MNIST, 3 GPU workers -----------------
DATA=/usr/share/datasets/fashion-mnist
[[ -f "$DATA/train-images-idx3-ubyte.gz" ]] || DATA="$ROOT/.debs/fashion-mnist"
if [[ "${STATUS[build]}" != ok ]]; then
  STATUS[sync_fmnist]=skipped
elif [[ ! -f "$DATA/train-images-idx3-ubyte.gz" ]]; then
  echo "no Fashion-MNIST (neither /usr/share/datasets/fashion-mnist nor .debs/fashion-mnist)"
  STATUS[sync_fmnist]=skipped
else
  say "mpirun -np 4: sync, N = 2, b = 1, 3 workers on the GPU, Fashion-MNIST, $EPOCHS epoch(s)"
  RUNS="$BUILD/gpu-check-runs"
  rm -rf "$RUNS/fmnist-sync-cuda"
  if timeout 300 "$MPIRUN" -np 4 "$BUILD/syncopt" train "$ROOT/configs/fmnist-sync.toml" \
       --set run.dir="$RUNS" --set run.name=fmnist-sync-cuda --set run.overwrite=true \
       --set data.path="$DATA" --set compute.backend=cuda --set cluster.evaluator=false \
       --set train.mode=sync --set train.backups=1 --set train.epochs="$EPOCHS" \
       --set eval.every_s=0 --set eval.every_steps=0; then
    STATUS[sync_fmnist]=ok
    cp "$RUNS/fmnist-sync-cuda/summary.json" "$OUT/sync-summary.json"
  else
    STATUS[sync_fmnist]=failed
  fi
fi

# --- the figures -------------------------------------------------------------
say "summary"
STATUS_LINE=""
for k in "${!STATUS[@]}"; do STATUS_LINE+="$k=${STATUS[$k]} "; done
echo "$STATUS_LINE"
GPU_NAME="$GPU_NAME" DRIVER="$DRIVER" NVCC_VERSION="$NVCC_VERSION" STATUS_LINE="$STATUS_LINE" \
SECONDS_TOTAL="$(($(date +%s) - T0))" python3 - "$OUT" <<'PY'
import json, os, sys
import xml.etree.ElementTree as ET
out = sys.argv[1]
fig = {"gpu": os.environ["GPU_NAME"], "driver": os.environ["DRIVER"],
       "nvcc": os.environ["NVCC_VERSION"], "seconds": int(os.environ["SECONDS_TOTAL"]),
       "status": dict(kv.split("=", 1) for kv in os.environ["STATUS_LINE"].split())}
try:
    tests = []
    for case in ET.parse(os.path.join(out, "ctest-cuda.xml")).getroot().iter("testcase"):
        status = case.get("status") or ("failed" if case.find("failure") is not None else "run")
        if case.find("skipped") is not None:
            status = "skipped"
        tests.append({"name": case.get("name"), "status": status, "time_s": float(case.get("time", 0))})
    fig["ctest_cuda"] = tests
except Exception as e:  # no XML: the tests did not run
    fig["ctest_cuda"] = f"unavailable: {e}"
for name, key in (("bench.json", "bench"), ("sync-summary.json", "sync_fmnist")):
    try:
        with open(os.path.join(out, name)) as f:
            data = json.load(f)
        if key == "sync_fmnist":
            data = {k: data.get(k) for k in ("mode", "N", "b", "backend", "steps", "epochs",
                                              "examples_per_s", "test_acc", "test_acc_ema",
                                              "test_loss", "train_s")}
        fig[key] = data
    except Exception as e:
        fig[key] = f"unavailable: {e}"
with open(os.path.join(out, "gpu-check.json"), "w") as f:
    json.dump(fig, f, indent=2)
print(json.dumps(fig, indent=2))
PY
RC=0
for k in "${!STATUS[@]}"; do [[ "${STATUS[$k]}" == ok ]] || RC=1; done
sleep 1  # let tee write the end of the log
exit "$RC"
