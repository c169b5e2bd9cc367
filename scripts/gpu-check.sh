#!/usr/bin/env bash
# The GPU check of syncopt in ONE run of at most 9 minutes on a bare GPU
# machine (an H200 with the CUDA 13 toolkit, PyTorch and its nvidia-*
# wheels, compute-sanitizer; no package registry, maybe no Open MPI). It
# uses what scripts/gpu-pack.sh made here (.gpu-carry/: the binaries built
# for sm_90, a sysroot of the libraries they need, Fashion-MNIST) and builds
# nothing unless they do not run here (the fallback then builds from the
# packages of .gpu-carry/debs). In order of value, each step bounded by its
# own limit and by one overall deadline:
#   machine     nvidia-smi, driver, nvcc, PyTorch, compute-sanitizer, runtime
#   bundle      unpack, point the loader and Open MPI at the sysroot and at
#               the machine's CUDA libraries (toolkit, PyTorch's wheels), ldd
#   build       only when bundle failed (or SYNCOPT_GPU_CHECK_FORCE_BUILD=1)
#   launcher    the carried mpirun starts 4 ranks (--dry-run, no GPU needed)
#   cuda_logic  cuda/'s decisions that need no GPU
#   (no GPU: summary.json says so, exit 77)
#   cuda_tests  kernels, backend vs the CPU oracle (batch 512 too), pipelined
#               host path vs device path, CudaReplica vs host replica,
#               200-step repeatability, the stuck-stream deadline
#   memcheck    compute-sanitizer --tool memcheck on the kernel tests and on a
#               network + replica test
#   nccl        mpirun -np 1 (reducer vs MPI at the CNN's size, the replica's
#               NCCL step, the stuck-stream deadline) and -np 2 (SKIPs on a
#               one-GPU machine: two ranks would share the GPU)
#   bench       bench/cnn_cuda_vs_torch.py at batch 32/128/512/1024:
#               steady-state step times, first step (cuDNN search) apart
#   sync_fmnist mpirun -np 4: 1 PS + 3 GPU workers, sync N = 2, b = 1, one
#               epoch of the carried Fashion-MNIST: test accuracy >= MIN_ACC
#   allreduce_fmnist  mpirun -np 4 allreduce (4 ranks on one GPU: the UUID
#               check sends the reduction through MPI), same threshold
# OUT/summary.json is rewritten after every step (verdict, machine, steps
# with status passed | failed | skipped | unsupported | timeout, seconds and
# details); OUT/gpu-check.log holds everything; OUT/bench.json the figures.
# Exit: 0 all passed, 1 something failed, 77 no GPU.
#
# Usage: scripts/gpu-check.sh OUT_DIR
# Environment: SYNCOPT_GPU_CHECK_BUDGET_S (overall, default 530),
# SYNCOPT_GPU_CHECK_MIN_ACC (default 0.80), SYNCOPT_GPU_CHECK_WORK (scratch,
# default /tmp/syncopt-gpu-check), SYNCOPT_GPU_CHECK_FORCE_BUILD=1 (build
# here even when the carried binaries run), SYNCOPT_GPU_CHECK_BUILD_S (the
# build's limit, default 400).
set -uo pipefail

OUT="${1:?usage: scripts/gpu-check.sh OUT_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
T0=$(date +%s)
BUDGET_S="${SYNCOPT_GPU_CHECK_BUDGET_S:-530}"
DEADLINE=$((T0 + BUDGET_S))
MIN_ACC="${SYNCOPT_GPU_CHECK_MIN_ACC:-0.80}"
WORK="${SYNCOPT_GPU_CHECK_WORK:-/tmp/syncopt-gpu-check}"
CARRY="$ROOT/.gpu-carry"
rm -rf "$WORK"
mkdir -p "$WORK"
: >"$WORK/steps.jsonl"
: >"$WORK/machine.json"
VERDICT=running

say() { printf '\n== [%4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
left() { echo $((DEADLINE - $(date +%s))); }

# summary.json from the machine facts and the steps so far.
write_summary() {
  VERDICT="$VERDICT" T0="$T0" BUDGET_S="$BUDGET_S" ROOT="$ROOT" python3 - "$WORK" "$OUT" <<'PY'
import json, os, subprocess, sys, time
work, out = sys.argv[1], sys.argv[2]
steps = []
with open(os.path.join(work, "steps.jsonl")) as f:
    for line in f:
        if line.strip():
            steps.append(json.loads(line))
try:
    with open(os.path.join(work, "machine.json")) as f:
        machine = json.load(f)
except Exception:
    machine = {}
try:
    commit = subprocess.run(["git", "-C", os.environ["ROOT"], "rev-parse", "HEAD"],
                            capture_output=True, text=True).stdout.strip() or None
except Exception:
    commit = None
try:
    with open(os.path.join(os.environ["ROOT"], ".gpu-carry", "MANIFEST")) as f:
        manifest = f.read().split("\n\n")[0].splitlines()
except Exception:
    manifest = None
summary = {"script": "scripts/gpu-check.sh", "commit": commit, "carry_manifest": manifest,
           "verdict": os.environ["VERDICT"], "elapsed_s": round(time.time() - int(os.environ["T0"])),
           "budget_s": int(os.environ["BUDGET_S"]), "machine": machine, "steps": steps}
tmp = os.path.join(out, "summary.json.tmp")
with open(tmp, "w") as f:
    json.dump(summary, f, indent=2)
os.replace(tmp, os.path.join(out, "summary.json"))
PY
}

# record NAME STATUS SECONDS DETAIL [DATA_JSON_FILE]
record() {
  python3 - "$WORK/steps.jsonl" "$@" <<'PY'
import json, sys
path, name, status, seconds, detail = sys.argv[1:6]
data = None
if len(sys.argv) > 6 and sys.argv[6]:
    try:
        with open(sys.argv[6]) as f:
            data = json.load(f)
    except Exception as e:
        data = f"unreadable: {e}"
rec = {"name": name, "status": status, "seconds": float(seconds), "detail": detail}
if data is not None:
    rec["data"] = data
with open(path, "a") as f:
    f.write(json.dumps(rec) + "\n")
PY
  printf '   -> %s: %s (%ss) %s\n' "$1" "$2" "$3" "$4"
  [[ "$2" == failed || "$2" == timeout ]] && FAILED=1
  write_summary
}

# run NAME LIMIT_S CMD...: runs CMD with a limit (its own, and what is left
# of the budget minus a reserve for the summary); sets RC, SECS, TAIL (the
# last lines of its output).
run() {
  local name="$1" limit="$2"
  shift 2
  local budget=$(($(left) - 10))
  ((budget < limit)) && limit=$budget
  if ((limit < 5)); then
    RC=124 SECS=0 TAIL="no time left in the budget"
    return
  fi
  say "$name (limit ${limit}s): $*"
  local t=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$WORK/$name.out" 2>&1
  RC=$?
  SECS=$(($(date +%s) - t))
  cat "$WORK/$name.out"
  # The verdict lines of the test programs and syncopt's errors say more
  # than mpirun's closing words.
  TAIL="$(grep -E '^(PASS|FAIL|SKIP)|FAILED|error|rror:|^test cases' "$WORK/$name.out" | tail -n 3 | tr '\n' ' ')"
  [[ -n "$TAIL" ]] || TAIL="$(tail -n 4 "$WORK/$name.out" | tr '\n' ' ')"
  TAIL="$(echo "$TAIL" | cut -c1-600)"
  ((RC == 124 || RC == 137)) && TAIL="timed out after ${limit}s; $TAIL"
}

finish() {
  VERDICT="$1"
  say "verdict: $VERDICT"
  write_summary
  sleep 1  # let tee write the end of the log
  exit "$2"
}

FAILED=0  # record() sets it for a failed or timed-out step
status_of() {  # exit code -> status
  case "$1" in
    0) echo passed ;;
    124 | 137) echo timeout ;;
    *) echo failed ;;
  esac
}

# --- machine -------------------------------------------------------------------
say "machine"
GPU_LINE="$(nvidia-smi --query-gpu=name,driver_version,memory.total,pci.bus_id --format=csv,noheader 2>/dev/null | head -1)"
NGPU="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
echo "nvidia-smi: ${GPU_LINE:-none} (${NGPU:-0} GPU(s))"
TORCH_LINE="$(timeout 60 python3 -c 'import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available())' 2>/dev/null || true)"
SANITIZER="$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)"
GPU_LINE="$GPU_LINE" NGPU="${NGPU:-0}" TORCH_LINE="$TORCH_LINE" SANITIZER="$SANITIZER" python3 - "$WORK/machine.json" <<'PY'
import json, os, platform, shutil, subprocess, sys
def out(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:
        return ""
gpu = [s.strip() for s in os.environ["GPU_LINE"].split(",")] if os.environ["GPU_LINE"] else []
nvcc = out(["bash", "-c", "nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version"])
m = {"gpu": gpu[0] if gpu else None, "driver": gpu[1] if len(gpu) > 1 else None,
     "gpu_memory": gpu[2] if len(gpu) > 2 else None, "pci": gpu[3] if len(gpu) > 3 else None,
     "gpus": int(os.environ["NGPU"] or 0),
     "nvcc": (nvcc.split("release ")[1].split(",")[0] if "release " in nvcc else None),
     "cores": os.cpu_count(), "kernel": platform.release(),
     "os": out(["bash", "-c", ". /etc/os-release && echo $PRETTY_NAME"]),
     "glibc": platform.libc_ver()[1], "python": platform.python_version(),
     "torch": os.environ["TORCH_LINE"] or None,
     "compute_sanitizer": os.environ["SANITIZER"] or None,
     "system_mpirun": shutil.which("mpirun")}
with open(sys.argv[1], "w") as f:
    json.dump(m, f, indent=2)
print(json.dumps(m, indent=2))
PY
record machine passed 0 "${GPU_LINE:-no GPU visible to nvidia-smi}"

# --- bundle ---------------------------------------------------------------------
say "bundle: unpack .gpu-carry/bundle.tar.xz, libraries"
t=$(date +%s)
B="$WORK/bundle"
mkdir -p "$B"
if [[ ! -f "$CARRY/bundle.tar.xz" ]]; then
  record bundle failed 0 "no .gpu-carry/bundle.tar.xz: run scripts/gpu-pack.sh here and carry .gpu-carry"
  finish failed 1
fi
xz -dc "$CARRY/bundle.tar.xz" | tar -xf - -C "$B" || { record bundle failed $(($(date +%s) - t)) "unpack failed"; finish failed 1; }
BIN="$B/bin"
U="$B/root/usr"
L="$U/lib/x86_64-linux-gnu"
# The machine's CUDA libraries: the toolkit's, PyTorch's nvidia-* wheels
# (cuDNN and NCCL are not in the toolkit), the driver's folder.
CUDA_DIRS=()
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/nvidia/lib64; do
  [[ -d "$d" ]] && CUDA_DIRS+=("$d")
done
while IFS= read -r d; do [[ -n "$d" ]] && CUDA_DIRS+=("$d"); done < <(python3 - <<'PY' 2>/dev/null
import glob, site, sys
dirs = []
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    dirs += sorted(glob.glob(f"{sp}/nvidia/*/lib"))
print("\n".join(dirs))
PY
)
CUDA_PATH_LIST="$(IFS=:; echo "${CUDA_DIRS[*]}")"
export LD_LIBRARY_PATH="$L:$L/openmpi/lib:$L/pmix2/lib${CUDA_PATH_LIST:+:$CUDA_PATH_LIST}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$U/bin:$PATH"
# Open MPI and PMIx were built for /usr: these move them to the sysroot.
export OPAL_PREFIX="$U" PMIX_INSTALL_PREFIX="$L/pmix2"
export PMIX_MCA_mca_base_component_path="$L/pmix2/lib/pmix"
export OMPI_MCA_mca_base_component_show_load_errors=0
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
# One node, shared memory; no cross-memory attach (VMs, sandboxes refuse it).
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_ess_singleton_isolated=1  # a lone process needs no orted
MPIRUN="$U/bin/orterun"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
MISSING=""
for b in "$BIN"/*; do
  m="$(ldd "$b" 2>&1 | grep -E 'not found|version .* not found' | tr -s ' \t' ' ')"
  [[ -n "$m" ]] && MISSING+="$(basename "$b"):$m; "
done
for lib in libcudnn.so.9 libnccl.so.2 libcublas.so.13 libcudart.so.13; do
  echo "$lib -> $(ldd "$BIN/syncopt" | awk -v l="$lib" '$1 == l {print $3}')"
done
if [[ -n "$MISSING" ]]; then
  record bundle failed $(($(date +%s) - t)) "unresolved libraries: $MISSING"
  BUNDLE_OK=0
else
  record bundle passed $(($(date +%s) - t)) "binaries and libraries resolve (CUDA libraries from: ${CUDA_PATH_LIST:-the system})"
  BUNDLE_OK=1
fi

# --- fallback: build here ----------------------------------------------------------------
# Only when the carried binaries do not run here (or when asked, to test
# this path): the build-time packages of .gpu-carry/debs (scripts/
# fetch-gpu-debs.sh) go into the sysroot, cuDNN and NCCL headers come from
# the machine (toolkit or PyTorch's wheels), and the four binaries are
# built for sm_90 and replace the carried ones.
if ((!BUNDLE_OK)) || [[ "${SYNCOPT_GPU_CHECK_FORCE_BUILD:-0}" == 1 ]]; then
  t=$(date +%s)
  find_root() {  # $1 = a header; prints the folder above its include/
    local d h
    for d in /usr/local/cuda /usr $(python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
      [[ -d "$d" ]] || continue
      h="$(find "$d" -maxdepth 5 -name "$1" -path '*include*' 2>/dev/null | head -1)"
      if [[ -n "$h" ]]; then dirname "$(dirname "$h")"; return 0; fi
    done
    return 1
  }
  CUDNN_ROOT="$(find_root cudnn.h || true)"
  NCCL_ROOT="$(find_root nccl.h || true)"
  NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  WHY=""
  compgen -G "$CARRY/debs/*.deb" >/dev/null || WHY+="no .gpu-carry/debs (scripts/fetch-gpu-debs.sh); "
  command -v cmake >/dev/null || WHY+="no cmake; "
  [[ -x "$NVCC" ]] || WHY+="no nvcc; "
  [[ -n "$CUDNN_ROOT" ]] || WHY+="no cudnn.h; "
  [[ -n "$NCCL_ROOT" ]] || WHY+="no nccl.h; "
  if [[ -n "$WHY" ]]; then
    record build failed 0 "cannot build here: $WHY"
  else
    for deb in "$CARRY"/debs/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$B/root"
      else  # a .deb is an ar archive holding data.tar.*
        (d="$(mktemp -d)" && cd "$d" && ar x "$deb" && tar -xf data.tar.* -C "$B/root" && rm -rf "$d")
      fi
    done
    GEN=()
    command -v ninja >/dev/null && GEN=(-G Ninja)
    run build "${SYNCOPT_GPU_CHECK_BUILD_S:-400}" bash -c "cmake -S '$ROOT' -B '$WORK/build' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release \
        -DSYNCOPT_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER='$NVCC' \
        -DCMAKE_PREFIX_PATH='$U' -DCUDNN_ROOT='$CUDNN_ROOT' -DNCCL_ROOT='$NCCL_ROOT' \
        -DMPI_CXX_COMPILER='$U/bin/mpicxx.openmpi' -DMPI_C_COMPILER='$U/bin/mpicc.openmpi' \
        -DProtobuf_PROTOC_EXECUTABLE='$U/bin/protoc' -DProtobuf_INCLUDE_DIR='$U/include' \
        -DProtobuf_LIBRARY='$L/libprotobuf.so' -DMPIEXEC_EXECUTABLE='$MPIRUN' &&
      cmake --build '$WORK/build' -j $(nproc) --target syncopt syncopt_cuda_tests \
        syncopt_nccl_mpi syncopt_cuda_logic"
    if ((RC == 0)); then
      cp "$WORK/build/syncopt" "$WORK/build/tests/syncopt_cuda_tests" \
        "$WORK/build/tests/syncopt_nccl_mpi" "$WORK/build/tests/syncopt_cuda_logic" "$BIN/"
      MISSING=""
      for b in "$BIN"/*; do
        m="$(ldd "$b" 2>&1 | grep -E 'not found' | tr -s ' \t' ' ')"
        [[ -n "$m" ]] && MISSING+="$(basename "$b"):$m; "
      done
      if [[ -z "$MISSING" ]]; then
        BUNDLE_OK=1
        record build passed $(($(date +%s) - t)) "built here (cuDNN $CUDNN_ROOT, NCCL $NCCL_ROOT)"
      else
        record build failed $(($(date +%s) - t)) "built, but unresolved: $MISSING"
      fi
    else
      record build "$(status_of "$RC")" $(($(date +%s) - t)) "$TAIL"
    fi
  fi
fi

# --- launcher (no GPU needed) --------------------------------------------------------
MPI_OK=0
if ((BUNDLE_OK)); then
  run launcher 60 "$MPIRUN" -np 4 "$BIN/syncopt" train "$ROOT/configs/fmnist-sync.toml" --dry-run \
    --set compute.backend=cpu --set cluster.evaluator=false
  if ((RC == 0)) && grep -q "rank 3" "$WORK/launcher.out"; then
    MPI_OK=1
    record launcher passed "$SECS" "the carried mpirun started 4 ranks"
  else
    record launcher failed "$SECS" "rc $RC: $TAIL"
  fi
  run cuda_logic 60 "$BIN/syncopt_cuda_logic"
  record cuda_logic "$(status_of "$RC")" "$SECS" \
    "$(grep -E '^(All tests passed|test cases)' "$WORK/cuda_logic.out" | tail -1)"
fi

# --- a GPU? -----------------------------------------------------------------------
if [[ -z "$GPU_LINE" ]]; then
  record gpu skipped 0 "nvidia-smi sees no GPU: nothing below can run here"
  finish no-gpu 77
fi
((BUNDLE_OK)) || finish failed 1

# --- the CUDA tests ------------------------------------------------------------------
run cuda_tests 240 "$BIN/syncopt_cuda_tests" --durations yes
DETAIL="$(grep -E '^(test cases|All tests passed)' "$WORK/cuda_tests.out" | tail -1)"
if ((RC == 77)); then
  record cuda_tests failed "$SECS" "SKIPPED on a machine with a GPU: $TAIL"
else
  record cuda_tests "$(status_of "$RC")" "$SECS" "${DETAIL:-$TAIL}"
fi

# --- compute-sanitizer memcheck ---------------------------------------------------------
if [[ -z "$SANITIZER" ]]; then
  record memcheck skipped 0 "no compute-sanitizer on this machine"
else
  DETAILS=""
  ST=passed
  MEMCHECK_S=0
  for filter in "[kernels]" "cuda backend: errors,cuda replica: a non-finite gradient is seen"; do
    run memcheck 150 "$SANITIZER" --tool memcheck --error-exitcode 9 --leak-check no \
      "$BIN/syncopt_cuda_tests" "$filter"
    if grep -qiE 'device not supported|not supported on this|unable to|LibraryNotLoaded' "$WORK/memcheck.out" &&
       ((RC != 0 && RC != 9)); then
      ST=unsupported
      DETAILS+="$filter: compute-sanitizer cannot run here (rc $RC: $TAIL); "
      break
    fi
    MEMCHECK_S=$((MEMCHECK_S + SECS))
    S="$(status_of "$RC")"
    [[ "$S" != passed ]] && ST="$S"
    DETAILS+="$filter: rc $RC $(grep -E 'ERROR SUMMARY' "$WORK/memcheck.out" | tail -1); "
  done
  record memcheck "$ST" "$MEMCHECK_S" "$DETAILS"
fi

# --- NCCL -----------------------------------------------------------------------------
if ((MPI_OK)); then
  run nccl_np1 120 "$MPIRUN" -np 1 "$BIN/syncopt_nccl_mpi"
  record nccl_np1 "$(status_of "$RC")" "$SECS" "$TAIL"
  run nccl_np2 120 "$MPIRUN" -np 2 "$BIN/syncopt_nccl_mpi"
  if ((RC == 77 && NGPU < 2)); then
    record nccl_np2 skipped "$SECS" "expected on a one-GPU machine (NCCL needs a GPU per rank): $TAIL"
  else
    record nccl_np2 "$(status_of "$RC")" "$SECS" "$TAIL"
  fi
else
  run nccl_np1 120 "$BIN/syncopt_nccl_mpi"  # a singleton MPI process
  record nccl_np1 "$(status_of "$RC")" "$SECS" "without mpirun (singleton): $TAIL"
  record nccl_np2 skipped 0 "the carried mpirun does not work here"
fi

# --- benchmark against PyTorch --------------------------------------------------------------
# What is left, less about two minutes for the two training runs.
BENCH_LIMIT=$(($(left) - 130))
((BENCH_LIMIT > 240)) && BENCH_LIMIT=240
run bench "$BENCH_LIMIT" python3 "$ROOT/bench/cnn_cuda_vs_torch.py" --exe "$BIN/syncopt" \
  --batches 32,128,512,1024 --warmup 30 --steps 200 --rounds 2 --json "$OUT/bench.json"
if ((RC == 0)); then
  DETAIL="batch, syncopt ms, torch ms, ratio, first steps: $(grep -E '^ +[0-9]+ ' "$WORK/bench.out" | tr -s ' ' | tr '\n' ';')"
else
  DETAIL="$TAIL"
fi
record bench "$(status_of "$RC")" "$SECS" "$DETAIL" "$OUT/bench.json"

# --- training runs on Fashion-MNIST ---------------------------------------------------------------
# train_run NAME ARGS...: mpirun -np 4 syncopt train on the carried data;
# passes when it completes with test accuracy >= MIN_ACC.
train_run() {
  local name="$1"
  shift
  if ((!MPI_OK)); then
    record "$name" skipped 0 "the carried mpirun does not work here"
    return
  fi
  run "$name" 120 "$MPIRUN" -np 4 "$BIN/syncopt" train "$ROOT/configs/fmnist-sync.toml" \
    --set run.dir="$WORK/runs" --set run.name="$name" --set data.path="$CARRY/fashion-mnist" \
    --set compute.backend=cuda --set cluster.evaluator=false --set train.epochs=1 \
    --set eval.every_s=0 --set eval.every_steps=0 "$@"
  local summary="$WORK/runs/$name/summary.json"
  local verdict
  verdict="$(python3 - "$summary" "$MIN_ACC" <<'PY'
import json, sys
try:
    s = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"failed no summary.json ({e})"); sys.exit()
acc = s.get("test_acc")
ok = s.get("status") == "completed" and acc is not None and acc >= float(sys.argv[2])
print(("passed" if ok else "failed") + f" status {s.get('status')}, test_acc {acc} "
      f"(ema {s.get('test_acc_ema')}), {s.get('steps')} steps in {s.get('wall_s')} s, "
      f"need >= {sys.argv[2]}")
PY
)"
  ((RC == 124 || RC == 137)) && verdict="timeout ${verdict#* }"
  record "$name" "${verdict%% *}" "$SECS" "${verdict#* }; rc $RC; $TAIL" "$summary"
}
train_run sync_fmnist --set train.mode=sync --set train.backups=1
train_run allreduce_fmnist --set train.mode=allreduce
grep -h "allreduce through MPI" "$WORK/allreduce_fmnist.out" 2>/dev/null | head -1

((FAILED)) && finish failed 1
finish passed 0
