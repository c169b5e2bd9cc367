#!/usr/bin/env bash
# The GPU check of syncopt: ONE run of at most 9 minutes on a bare GPU
# machine (a driver; maybe a CUDA toolkit, PyTorch and its nvidia-* wheels,
# compute-sanitizer; no package registry, maybe no Open MPI). It uses what
# scripts/gpu-pack.sh made here (.gpu-carry: the binaries built for sm_90, a
# sysroot of the libraries they need, Fashion-MNIST) and builds nothing
# unless those do not run there (the fallback builds from .gpu-carry/debs).
#
# The steps run in the order that tells the most if the run is cut short,
# each bounded by its own limit (seconds, below) and all by one deadline
# (SYNCOPT_GPU_CHECK_BUDGET_S, default 530, within the device tool's 600 s
# command):
#   env          60  versions of the machine first, every command under
#                    `timeout`: nvidia-smi, the driver's CUDA version, glibc
#                    and libstdc++ against .gpu-carry/REQUIRES, where the
#                    CUDA libraries are (toolkit, PyTorch's wheels), nvcc,
#                    compute-sanitizer, Python and PyTorch; prints at once
#                    what cannot work (an old glibc for the carried Open MPI,
#                    an old driver, a missing cuDNN...)
#   bundle       30  unpack; wrappers that give the carried libraries to
#                    syncopt's binaries only (never to Python); ldd of each
#   build       300  only when bundle failed (or SYNCOPT_GPU_CHECK_FORCE_BUILD=1)
#   versions     20  syncopt_cuda_versions: cudart, cuBLAS, cuDNN, NCCL and
#                    the driver as loaded, and from which files
#   launcher     30  the carried mpirun starts 4 ranks (--dry-run, no GPU)
#   cuda_logic   20  cuda/'s decisions that need no GPU
#   (no GPU: summary says so, exit 77)
#   cuda_*   30-60  syncopt_cuda_tests, one process per Catch2 tag so that a
#                    crash or hang hides nothing: cuda_kernels 30, cuda_model
#                    30 ([model],[errors]), cuda_graph 60 (every layer kind,
#                    a projection block, resnet20), cuda_replica 45,
#                    cuda_sync 20 (host waits), cuda_rest 20 (any other tag)
#   nccl_np1     45  NCCL vs MPI, the replica's NCCL step, the stuck stream
#   nccl_np2     60  the same with 2 and 4 ranks sharing the GPU (each its
#   nccl_np4     75  own NCCL host): multi-rank allreduce, a missing peer;
#                    NCCL_DEBUG=WARN NCCL_CUMEM_HOST_ENABLE=0, and a failed
#                    step is tried once more without the latter (both tries
#                    in its detail, the retry's verdict the step's)
#   sync_fmnist  75  mpirun -np 4: 1 PS + 3 GPU workers, sync N = 2, b = 1,
#                    one epoch of the carried data, test accuracy >= MIN_ACC
#   allreduce_fmnist 75  mpirun -np 4 allreduce, the same threshold
#   bench       150  bench/cnn_cuda_vs_torch.py, largest batch first
#                    (1024, 512, 128, 32), OUT/bench.json rewritten after each;
#                    a failed batch is recorded and the next one runs
#   memcheck  3x45  compute-sanitizer memcheck, last (the kernels, a
#                    residual block through cuDNN, a replica test, each in
#                    what is left); a timeout is "inconclusive", not a failure
# Every step's output goes to OUT/gpu-check.log as it comes, each line
# stamped with the seconds since the start; OUT/summary.json and
# OUT/summary.txt are rewritten after every step (verdict, machine, steps
# with status passed | failed | skipped | unsupported | timeout |
# inconclusive, seconds, details). Every step runs with cuDNN's log on
# (CUDNN_LOGLEVEL_DBG=2, errors and warnings), gathered step by step into
# OUT/cudnn.log. Five files in all. Without xz the bundle is unpacked with
# python3's lzma module.
# Exit: 0 passed (an inconclusive memcheck included), 1 something failed,
# 77 no GPU.
#
# Usage: scripts/gpu-check.sh OUT_DIR
# Environment: SYNCOPT_GPU_CHECK_BUDGET_S (overall, default 530),
# SYNCOPT_GPU_CHECK_MIN_ACC (default 0.80), SYNCOPT_GPU_CHECK_WORK (scratch,
# default /tmp/syncopt-gpu-check), SYNCOPT_GPU_CHECK_CARRY (default
# .gpu-carry), SYNCOPT_GPU_CHECK_CUDA_LIBS (folders to search first for the
# CUDA libraries, colon-separated), SYNCOPT_GPU_CHECK_SANITIZER (the
# compute-sanitizer to use), SYNCOPT_GPU_CHECK_FORCE_BUILD=1 (build even
# when the carried binaries run), SYNCOPT_GPU_CHECK_DRY_RUN=1 (a machine
# without a GPU, tests/gpu-pack: past the GPU gate each GPU step runs what
# it can without one and must report SKIP, training and the benchmark use
# the CPU backend at a small size, the bench with a batch 0 that must fail
# while the others run; the verdict is "dry-run-passed"),
# SYNCOPT_GPU_CHECK_FAIL_FIRST=NAME (dry run only: the first try of NCCL
# step NAME fails, to walk the retry).
set -uo pipefail

OUT="${1:?usage: scripts/gpu-check.sh OUT_DIR}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
: >"$OUT/gpu-check.log"
echo "cuDNN's log of the steps (CUDNN_LOGLEVEL_DBG=2: errors and warnings), step by step" >"$OUT/cudnn.log"
exec > >(tee -a "$OUT/gpu-check.log") 2>&1
T0=$EPOCHSECONDS
BUDGET_S="${SYNCOPT_GPU_CHECK_BUDGET_S:-530}"
DEADLINE=$((T0 + BUDGET_S))
MIN_ACC="${SYNCOPT_GPU_CHECK_MIN_ACC:-0.80}"
WORK="${SYNCOPT_GPU_CHECK_WORK:-/tmp/syncopt-gpu-check}"
CARRY="${SYNCOPT_GPU_CHECK_CARRY:-$ROOT/.gpu-carry}"
DRY="${SYNCOPT_GPU_CHECK_DRY_RUN:-0}"
export PYTHONUNBUFFERED=1
rm -rf "$WORK"
mkdir -p "$WORK"
: >"$WORK/steps.jsonl"
echo '{}' >"$WORK/machine.json"
VERDICT=running
FAILED=0
STDBUF=()
command -v stdbuf >/dev/null && STDBUF=(stdbuf -oL -eL)  # line-buffered C stdio in the steps

say() { printf '\n== [%4ss] %s\n' "$((EPOCHSECONDS - T0))" "$*"; }
left() { echo $((DEADLINE - EPOCHSECONDS)); }

# The JSON work of this script, in one Python file: `summary` rewrites
# OUT/summary.json and OUT/summary.txt (each to a temporary name, renamed);
# `record` appends a step; `get KEY FILE` prints a field; `detail-env`,
# `detail-versions` and `train-verdict` make the lines the steps record.
cat >"$WORK/helpers.py" <<'PY'
import json, os, sys, time

def load(path, default=None):
    try:
        with open(path) as f:
            return json.load(f)
    except Exception:
        return default

def summary(work, out):
    steps = [json.loads(l) for l in open(os.path.join(work, "steps.jsonl")) if l.strip()]
    machine = load(os.path.join(work, "machine.json"), {})
    try:
        with open(os.path.join(os.environ["CARRY"], "MANIFEST")) as f:
            manifest = f.read().split("\n\n")[0].splitlines()
    except Exception:
        manifest = None
    s = {"script": "scripts/gpu-check.sh", "dry_run": os.environ["DRY"] == "1",
         "carry_manifest": manifest, "verdict": os.environ["VERDICT"],
         "elapsed_s": round(time.time() - int(os.environ["T0"])),
         "budget_s": int(os.environ["BUDGET_S"]), "machine": machine, "steps": steps}
    def put(name, text):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out, name))
    put("summary.json", json.dumps(s, indent=2) + "\n")
    m = machine
    lines = [f"syncopt GPU check: {s['verdict']} after {s['elapsed_s']} s of {s['budget_s']} s"
             + (" (dry run, no GPU)" if s["dry_run"] else "")]
    if manifest and len(manifest) > 1:
        lines.append("  " + manifest[1])
    lines.append(f"  machine: {m.get('gpu') or 'no GPU'}, driver {m.get('driver')} (CUDA "
                 f"{m.get('driver_cuda')}), glibc {m.get('glibc')}, {m.get('os')}")
    for p in m.get("cannot_work") or []:
        lines.append(f"  CANNOT WORK: {p}")
    for st in steps:
        lines.append(f"  {st['name']:<17} {st['status']:<12} {st['seconds']:6.0f} s  "
                     f"{st['detail'][:400]}")
    put("summary.txt", "\n".join(lines) + "\n")

def record(path, name, status, seconds, detail, data_path=""):
    rec = {"name": name, "status": status, "seconds": float(seconds), "detail": detail}
    if data_path:
        data = load(data_path, "unreadable")
        rec["data"] = data
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")

def detail_env(path):
    m = load(path, {})
    problems = "; ".join("CANNOT WORK: " + c for c in m.get("cannot_work", []))
    print(f"{m.get('gpu') or 'no GPU'}, driver {m.get('driver')} (CUDA {m.get('driver_cuda')}), "
          f"glibc {m.get('glibc')}, GLIBCXX {m.get('glibcxx')}, torch {m.get('torch')}; "
          + (problems or "nothing known to fail"))

def detail_versions(path):
    v = load(path)
    if not v:
        print("syncopt_cuda_versions printed no JSON")
        return
    keys = ("libcudart", "libcublas", "libcudnn", "libnccl", "libcuda.")
    cuda = [p for p in v["loaded"] if any(k in p for k in keys)]
    print(f"cudart {v['cuda_runtime']}, cuBLAS {v['cublas']}, cuDNN {v['cudnn']}, NCCL {v['nccl']}, "
          f"driver {v['driver_release']} (CUDA {v['driver_cuda']}); loaded: {' '.join(cuda)}"
          + ("; notes: " + "; ".join(v.get("notes", [])) if v.get("notes") else "")
          + ("; PROBLEMS: " + "; ".join(v["problems"]) if v["problems"] else ""))

def train_verdict(path, min_acc):
    s = load(path)
    if s is None:
        print(f"failed no readable {path}")
        return
    acc = s.get("test_acc")
    ok = s.get("status") == "completed" and acc is not None and acc >= float(min_acc)
    print(("passed" if ok else "failed") + f" status {s.get('status')}, test_acc {acc} "
          f"(ema {s.get('test_acc_ema')}), {s.get('steps')} steps in {s.get('wall_s')} s, "
          f"need >= {min_acc}")

cmd, args = sys.argv[1], sys.argv[2:]
if cmd == "summary":
    summary(*args)
elif cmd == "record":
    record(*args)
elif cmd == "get":
    v = (load(args[1], {}) or {}).get(args[0])
    print(":".join(map(str, v)) if isinstance(v, list) else ("" if v is None else v))
elif cmd == "detail-env":
    detail_env(*args)
elif cmd == "detail-versions":
    detail_versions(*args)
elif cmd == "train-verdict":
    train_verdict(*args)
PY
helper() { timeout 20 python3 "$WORK/helpers.py" "$@"; }

write_summary() {
  VERDICT="$VERDICT" T0="$T0" BUDGET_S="$BUDGET_S" CARRY="$CARRY" DRY="$DRY" \
    helper summary "$WORK" "$OUT" || echo "gpu-check: the summary could not be written"
}

# record NAME STATUS SECONDS DETAIL [DATA_JSON_FILE]
record() {
  helper record "$WORK/steps.jsonl" "$@" || echo "gpu-check: step $1 could not be recorded"
  printf '   -> %s: %s (%ss) %s\n' "$1" "$2" "$3" "$4"
  [[ "$2" == failed || "$2" == timeout ]] && FAILED=1
  write_summary
}

# Kills what a step left behind: processes running a carried (or built)
# binary, found by their executable, each by its id.
reap() {
  local p exe
  for p in /proc/[0-9]*; do
    exe="$(readlink "$p/exe" 2>/dev/null)" || continue
    [[ "$exe" == "$WORK/bundle/"* ]] && kill -9 "${p#/proc/}" 2>/dev/null
  done
  return 0
}

# run NAME LIMIT_S CMD...: CMD under `timeout` with its own limit, cut to
# what is left of the budget less 10 s for the summary. Its output goes to
# the log line by line as it comes, stamped with the seconds since the
# start, and unstamped to WORK/NAME.out. Sets RC, SECS and TAIL (the lines
# that say the most: verdicts and errors, else the last ones).
run() {
  local name="$1" limit="$2"
  shift 2
  local budget=$(($(left) - 10))
  ((budget < limit)) && limit=$budget
  if ((limit < 5)); then
    RC=124 SECS=0 TAIL="not started: no time left in the budget"
    say "$name: $TAIL"
    return
  fi
  say "$name (limit ${limit}s): $*"
  local t=$EPOCHSECONDS line
  {
    timeout -k 5 "$limit" env CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG="$WORK/$name.cudnn.log" \
      "${STDBUF[@]}" "$@" </dev/null 2>&1
    echo "$?" >"$WORK/$name.rc"
  } | while IFS= read -r line || [[ -n "$line" ]]; do
    printf '%s\n' "$line" >>"$WORK/$name.out"
    printf '[%4ds] %s\n' "$((EPOCHSECONDS - T0))" "$line"
  done
  RC="$(cat "$WORK/$name.rc" 2>/dev/null || echo 1)"
  SECS=$((EPOCHSECONDS - t))
  if [[ -s "$WORK/$name.cudnn.log" ]]; then  # what cuDNN said in this step, kept in OUT
    printf '== step %s (rc %s)\n' "$name" "$RC" >>"$OUT/cudnn.log"
    tail -c 200000 "$WORK/$name.cudnn.log" >>"$OUT/cudnn.log"
  fi
  rm -f "$WORK/$name.cudnn.log"
  touch "$WORK/$name.out"
  TAIL="$(grep -E '^(PASS|FAIL|SKIP)|FAILED|[Ee]rror|^test cases|^rank [0-9]+: ' "$WORK/$name.out" | tail -n 3 | tr '\n' ' ')"
  [[ -n "$TAIL" ]] || TAIL="$(tail -n 4 "$WORK/$name.out" | tr '\n' ' ')"
  TAIL="$(echo "$TAIL" | cut -c1-600)"
  if ((RC == 124 || RC == 137)); then
    TAIL="timed out after ${limit}s; $TAIL"
    reap
  fi
}

finish() {
  VERDICT="$1"
  say "verdict: $VERDICT"
  write_summary
  cat "$OUT/summary.txt" 2>/dev/null
  sleep 1  # let tee write the end of the log
  exit "$2"
}

status_of() {  # exit code -> status
  case "$1" in
    0) echo passed ;;
    124 | 137) echo timeout ;;
    *) echo failed ;;
  esac
}

# expect_skip NAME: a GPU step in the dry run must load, run and say SKIP (77).
expect_skip() {
  if ((RC == 77)); then
    record "$1" skipped "$SECS" "SKIP (77) without a GPU, as it must: $TAIL"
  else
    record "$1" "$( ((RC == 0)) && echo failed || status_of "$RC")" "$SECS" \
      "rc $RC where a machine without a GPU must give 77 (SKIP): $TAIL"
  fi
}

# --- env: the machine, before anything of ours runs -------------------------------
say "env: the machine, its driver, its C runtime and CUDA libraries against .gpu-carry/REQUIRES"
t=$EPOCHSECONDS
CARRY="$CARRY" DRY="$DRY" timeout 60 python3 - "$WORK/machine.json" <<'PY'
import glob, importlib.util, json, os, platform, re, shutil, subprocess, sys

timed_out = []

def out(cmd, limit=15):
    """stdout of cmd, '' if it fails or outlasts `limit` seconds."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=limit).stdout.strip()
    except subprocess.TimeoutExpired:
        timed_out.append(f"{os.path.basename(cmd[0])} ({limit} s)")
        print(f"  ({' '.join(cmd)}: no answer within {limit} s)", flush=True)
        return ""
    except Exception as e:
        print(f"  ({' '.join(cmd)}: {type(e).__name__})", flush=True)
        return ""

def vkey(v):
    return tuple(int(x) for x in re.findall(r"\d+", v))

m = {}
smi = shutil.which("nvidia-smi")
gpu = out([smi, "--query-gpu=name,driver_version,memory.total,pci.bus_id,compute_cap",
           "--format=csv,noheader"]).splitlines() if smi else []
fields = [s.strip() for s in gpu[0].split(",")] if gpu else []
m["gpu"] = fields[0] if fields else None
m["driver"] = fields[1] if len(fields) > 1 else None
m["gpu_memory"] = fields[2] if len(fields) > 2 else None
m["pci"] = fields[3] if len(fields) > 3 else None
m["compute_capability"] = fields[4] if len(fields) > 4 else None
m["gpus"] = len(gpu)
# The CUDA version the driver supports, from libcuda itself, in a child
# process (a broken driver can hang the loader).
drv = out([sys.executable, "-c", "import ctypes; c = ctypes.CDLL('libcuda.so.1'); v = ctypes.c_int(); "
           "c.cuDriverGetVersion(ctypes.byref(v)); print(v.value)"], 15)
m["driver_cuda"] = f"{int(drv) // 1000}.{int(drv) % 1000 // 10}" if drv.isdigit() else None
m["glibc"] = os.confstr("CS_GNU_LIBC_VERSION").split()[-1] if hasattr(os, "confstr") else platform.libc_ver()[1]
# The newest GLIBCXX_ version the machine's libstdc++ offers.
libstdcxx = None
for line in out(["ldconfig", "-p"]).splitlines():
    if "libstdc++.so.6 " in line and "x86-64" in line:
        libstdcxx = line.split("=>")[-1].strip()
        break
libstdcxx = libstdcxx or next(iter(glob.glob("/usr/lib/x86_64-linux-gnu/libstdc++.so.6")), None)
glibcxx = None
if libstdcxx:
    with open(libstdcxx, "rb") as f:
        found = set(re.findall(rb"GLIBCXX_(\d+\.\d+(?:\.\d+)?)", f.read()))
    glibcxx = max((v.decode() for v in found), key=vkey, default=None)
m["libstdcxx"], m["glibcxx"] = libstdcxx, glibcxx
m["kernel"], m["cores"] = platform.release(), os.cpu_count()
m["os"] = out(["bash", "-c", ". /etc/os-release && echo $PRETTY_NAME"])
m["python"] = f"{platform.python_version()} ({sys.executable})"
nvcc = out(["bash", "-c", "nvcc --version 2>/dev/null || /usr/local/cuda/bin/nvcc --version"])
m["nvcc"] = nvcc.split("release ")[1].split(",")[0] if "release " in nvcc else None
san = os.environ.get("SYNCOPT_GPU_CHECK_SANITIZER") or shutil.which("compute-sanitizer") or \
    next(iter(glob.glob("/usr/local/cuda*/bin/compute-sanitizer")), None)
m["compute_sanitizer"] = san
m["system_mpirun"] = shutil.which("mpirun")
# PyTorch, in a child: any failure of the import (a library clash, a driver
# problem) is reported, not only ImportError.
m["torch"] = out([sys.executable, "-c", "try:\n import torch\n print(torch.__version__, "
                  "torch.version.cuda, torch.cuda.is_available())\nexcept BaseException as e:\n"
                  " print('import failed:', type(e).__name__, str(e)[:200])"], 45) or None

# The CUDA libraries the binaries load: the first folder that has each, in
# this order: SYNCOPT_GPU_CHECK_CUDA_LIBS, PyTorch's nvidia-* wheels (the
# `nvidia` namespace package, wherever Python finds it), the toolkit, the
# driver's folder, the system.
dirs = [d for d in os.environ.get("SYNCOPT_GPU_CHECK_CUDA_LIBS", "").split(":") if d]
try:
    spec = importlib.util.find_spec("nvidia")
    for p in (spec.submodule_search_locations or []) if spec else []:
        dirs += sorted(glob.glob(os.path.join(p, "*", "lib")))
except Exception as e:
    print(f"  (looking for PyTorch's nvidia wheels: {type(e).__name__}: {e})")
dirs += sorted(glob.glob("/usr/local/cuda*/lib64")) + sorted(glob.glob("/usr/local/cuda*/lib"))
dirs += sorted(glob.glob("/usr/local/cuda*/targets/x86_64-linux/lib"))
dirs += ["/usr/local/nvidia/lib64", "/usr/local/nvidia/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"]
cache = {}  # the loader's cache, last
for line in out(["ldconfig", "-p"]).splitlines():
    if "=>" in line and "x86-64" in line:
        cache.setdefault(line.split()[0], line.split("=>")[-1].strip())
libs = {}
for so in ["libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13", "libcudnn.so.9",
           "libnccl.so.2", "libcuda.so.1"]:
    libs[so] = next((os.path.join(d, so) for d in dirs if os.path.exists(os.path.join(d, so))),
                    cache.get(so))
m["cuda_libraries"] = libs
system = {"/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/lib/x86_64-linux-gnu"}
# For the wrappers: the folders of the libraries found off the loader's
# default path (libcuda's too, when the driver's folder is not in its cache).
m["cuda_lib_dirs"] = list(dict.fromkeys(os.path.dirname(p) for p in libs.values()
                                        if p and os.path.dirname(p) not in system))

# What cannot work, at once.
cannot = []
carry = os.environ["CARRY"]
req = {}
try:
    with open(os.path.join(carry, "REQUIRES")) as f:
        for line in f:
            w = line.split()
            if w:
                req.setdefault(w[0], []).append((w[1], w[2:]))
except OSError:
    cannot.append(f"no {carry}/REQUIRES: run scripts/gpu-pack.sh here and carry .gpu-carry")
def too_new(kind, have):
    out = []
    for v, files in req.get(kind, []):
        if have is not None and vkey(v) <= vkey(have):
            continue
        names = [os.path.basename(x) for x in files]
        text = (f"{len(files)} carried file(s) need {kind} {v}, this machine has {have}: "
                + ", ".join(names[:6]) + (" ..." if len(names) > 6 else ""))
        if any(n.startswith(("libevent", "libopen-", "libmpi", "libpmix", "orterun")) for n in names):
            text += "; the carried Open MPI cannot start, so no mpirun step can run"
        # The fallback build replaces bin/ only; it links the same carried libraries.
        if all(x.startswith("bin/") for x in files):
            text += "; the fallback build (.gpu-carry/debs) may replace these binaries"
        else:
            text += "; the fallback build cannot help (it links the same carried libraries)"
        out.append(text)
    return out
cannot += too_new("glibc", m["glibc"]) + too_new("glibcxx", m["glibcxx"])
m["timed_out"] = timed_out
for t in timed_out:
    cannot.append(f"{t} did not answer in time: a hung driver? (the CUDA runtime decides below)")
if m["gpu"] is None and smi and not timed_out and os.environ["DRY"] != "1":
    cannot.append("nvidia-smi sees no GPU: only the steps before the GPU gate can run")
need_cuda = (req.get("cuda") or [("13.0", [])])[0][0]
if m["gpu"] is not None and (m["driver_cuda"] is None or vkey(m["driver_cuda"]) < vkey(need_cuda)):
    cannot.append(f"the driver {m['driver']} supports CUDA {m['driver_cuda']}, the binaries need "
                  f"{need_cuda}: every CUDA step fails until the driver is updated")
for so, path in libs.items():
    if path is None and (so != "libcuda.so.1" or m["gpu"] is not None):
        cannot.append(f"no {so} on this machine (toolkit, PyTorch's nvidia-* wheels, "
                      "SYNCOPT_GPU_CHECK_CUDA_LIBS): the carried binaries cannot load")
m["cannot_work"] = cannot
with open(sys.argv[1], "w") as f:
    json.dump(m, f, indent=2)
print(json.dumps(m, indent=2))
for c in cannot:
    print(f"CANNOT WORK: {c}")
PY
ENV_RC=$?
DETAIL="$(helper detail-env "$WORK/machine.json" 2>&1)"
if ((ENV_RC != 0)); then
  record env failed $((EPOCHSECONDS - t)) "the machine survey failed (rc $ENV_RC): $DETAIL"
elif grep -q '"cannot_work": \[\]' "$WORK/machine.json"; then
  record env passed $((EPOCHSECONDS - t)) "$DETAIL"
else
  record env failed $((EPOCHSECONDS - t)) "$DETAIL"
fi
GPU_NAME="$(helper get gpu "$WORK/machine.json" 2>/dev/null)"
SANITIZER="$(helper get compute_sanitizer "$WORK/machine.json" 2>/dev/null)"
CUDA_PATH_LIST="$(helper get cuda_lib_dirs "$WORK/machine.json" 2>/dev/null)"

# --- bundle ---------------------------------------------------------------------------
say "bundle: unpack, wrappers, libraries"
t=$EPOCHSECONDS
B="$WORK/bundle"
mkdir -p "$B"
if [[ ! -f "$CARRY/bundle.tar.xz" ]]; then
  record bundle failed 0 "no $CARRY/bundle.tar.xz: run scripts/gpu-pack.sh here and carry .gpu-carry"
  finish failed 1
fi
# Without a working xz (a bare image may lack it), Python's lzma module unpacks.
if command -v xz >/dev/null && xz --version >/dev/null 2>&1; then
  UNPACK="xz"
  timeout 60 tar -xJf "$CARRY/bundle.tar.xz" -C "$B"
  UNPACK_RC=("${PIPESTATUS[@]}")
else
  UNPACK="python3's lzma (no xz here)"
  timeout 90 python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)' \
    "$CARRY/bundle.tar.xz" | timeout 90 tar -xf - -C "$B"
  UNPACK_RC=("${PIPESTATUS[@]}")
fi
if [[ "${UNPACK_RC[*]}" =~ [1-9] ]]; then
  record bundle failed $((EPOCHSECONDS - t)) "unpacking $CARRY/bundle.tar.xz with $UNPACK failed (rc ${UNPACK_RC[*]})"
  finish failed 1
fi
echo "unpacked with $UNPACK"
BIN="$B/bin"
U="$B/root/usr"
L="$U/lib/x86_64-linux-gnu"
W="$WORK/wrap"  # what the steps run: BIN's programs with their libraries
mkdir -p "$W"
LIB_PATH="$L:$L/openmpi/lib:$L/pmix2/lib${CUDA_PATH_LIST:+:$CUDA_PATH_LIST}"
echo "carried libraries (for syncopt's binaries only): $LIB_PATH"
# make_wrapper NAME TARGET: W/NAME runs TARGET with the carried libraries and
# Open MPI moved to the sysroot (it was built for /usr). Python and the
# tools of this script never see this environment.
make_wrapper() {
  cat >"$W/$1" <<EOF
#!/bin/sh
# Made by scripts/gpu-check.sh: $2 with the carried libraries.
LD_LIBRARY_PATH='$LIB_PATH'\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
OPAL_PREFIX='$U' PMIX_INSTALL_PREFIX='$L/pmix2'
PMIX_MCA_mca_base_component_path='$L/pmix2/lib/pmix'
OMPI_MCA_mca_base_component_show_load_errors=0
OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_hwloc_base_binding_policy=none
# One node, shared memory, no cross-memory attach (VMs and sandboxes refuse it).
OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
OMPI_MCA_ess_singleton_isolated=1
export LD_LIBRARY_PATH OPAL_PREFIX PMIX_INSTALL_PREFIX PMIX_MCA_mca_base_component_path \\
  OMPI_MCA_mca_base_component_show_load_errors OMPI_ALLOW_RUN_AS_ROOT \\
  OMPI_ALLOW_RUN_AS_ROOT_CONFIRM OMPI_MCA_rmaps_base_oversubscribe \\
  OMPI_MCA_hwloc_base_binding_policy OMPI_MCA_btl OMPI_MCA_btl_vader_single_copy_mechanism \\
  OMPI_MCA_ess_singleton_isolated
exec '$2' "\$@"
EOF
  chmod +x "$W/$1"
}
make_wrappers() {
  local b
  for b in "$BIN"/*; do [[ "$b" == *.so ]] || make_wrapper "$(basename "$b")" "$b"; done
  make_wrapper mpirun "$U/bin/orterun"
}
make_wrappers
MPIRUN="$W/mpirun"
# ldd_all: the libraries each binary cannot resolve, through its wrapper's
# environment; prints "binary: lib; ..." (empty when all resolve).
ldd_all() {
  local b m out
  for b in "$BIN"/* "$U/bin/orterun"; do
    out="$(LD_LIBRARY_PATH="$LIB_PATH" timeout 10 ldd "$b" 2>&1)" || true
    m="$(grep -E 'not found' <<<"$out" | awk '{print $1}' | sort -u | tr '\n' ' ')"
    [[ -n "$m" ]] && printf '%s: %s; ' "$(basename "$b")" "$m"
  done
}
MISSING="$(ldd_all)"
echo "syncopt's CUDA module resolves the CUDA libraries to:"
LD_LIBRARY_PATH="$LIB_PATH" timeout 10 ldd "$BIN/libsyncopt_cuda_backend.so" | grep -E 'libcud|libcublas|libnccl|libmpi\.|libdnnl' | sed 's/^/  /'
if [[ -n "$MISSING" ]]; then
  record bundle failed $((EPOCHSECONDS - t)) "unpacked with $UNPACK; unresolved libraries: $MISSING"
  BUNDLE_OK=0
else
  record bundle passed $((EPOCHSECONDS - t)) \
    "unpacked with $UNPACK; binaries and libraries resolve (CUDA libraries from: ${CUDA_PATH_LIST:-the default path of the loader})"
  BUNDLE_OK=1
fi

# --- fallback: build here ---------------------------------------------------------------
# Only when the carried binaries do not load here (or when asked, to test
# this path): the build-time packages of .gpu-carry/debs (scripts/
# fetch-gpu-debs.sh) go into the sysroot, cuDNN and NCCL headers come from
# the machine (toolkit or PyTorch's wheels), and the binaries are built for
# sm_90 and replace the carried ones.
if ((!BUNDLE_OK)) || [[ "${SYNCOPT_GPU_CHECK_FORCE_BUILD:-0}" == 1 ]]; then
  t=$EPOCHSECONDS
  find_root() {  # $1 = a header; prints the folder above its include/
    local d h
    for d in /usr/local/cuda /usr $(timeout 10 python3 -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null); do
      [[ -d "$d" ]] || continue
      h="$(timeout 20 find "$d" -maxdepth 5 -name "$1" -path '*include*' 2>/dev/null | head -1)"
      if [[ -n "$h" ]]; then dirname "$(dirname "$h")"; return 0; fi
    done
    return 1
  }
  CUDNN_ROOT="$(find_root cudnn.h || true)"
  NCCL_ROOT="$(find_root nccl.h || true)"
  NVCC="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
  WHY=""
  compgen -G "$CARRY/debs/*.deb" >/dev/null || WHY+="no $CARRY/debs (scripts/fetch-gpu-debs.sh); "
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
    # The sysroot's compiler wrappers (mpicxx.openmpi) and protoc need its libraries
    # and Open MPI's relocation, as the wrappers give them.
    run build 300 env LD_LIBRARY_PATH="$LIB_PATH" OPAL_PREFIX="$U" PATH="$U/bin:$PATH" bash -c "cmake -S '$ROOT' -B '$WORK/build' ${GEN[*]} -DCMAKE_BUILD_TYPE=Release \
        -DSYNCOPT_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER='$NVCC' \
        -DCMAKE_PREFIX_PATH='$U' -DCUDNN_ROOT='$CUDNN_ROOT' -DNCCL_ROOT='$NCCL_ROOT' \
        -DMPI_CXX_COMPILER='$U/bin/mpicxx.openmpi' -DMPI_C_COMPILER='$U/bin/mpicc.openmpi' \
        -DProtobuf_PROTOC_EXECUTABLE='$U/bin/protoc' -DProtobuf_INCLUDE_DIR='$U/include' \
        -DProtobuf_LIBRARY='$L/libprotobuf.so' -DMPIEXEC_EXECUTABLE='$MPIRUN' &&
      cmake --build '$WORK/build' -j $(nproc) --target syncopt syncopt_cuda_module \
        syncopt_cuda_tests syncopt_nccl_mpi syncopt_cuda_logic syncopt_cuda_versions"
    if ((RC == 0)); then
      for b in syncopt libsyncopt_cuda_backend.so tests/syncopt_cuda_tests tests/syncopt_nccl_mpi \
        tests/syncopt_cuda_logic tests/syncopt_cuda_versions; do
        cp "$WORK/build/$b" "$BIN/"
      done
      make_wrappers
      MISSING="$(ldd_all)"
      if [[ -z "$MISSING" ]]; then
        BUNDLE_OK=1
        record build passed $((EPOCHSECONDS - t)) "built here (cuDNN $CUDNN_ROOT, NCCL $NCCL_ROOT)"
      else
        record build failed $((EPOCHSECONDS - t)) "built, but unresolved: $MISSING"
      fi
    else
      record build "$(status_of "$RC")" $((EPOCHSECONDS - t)) "$TAIL"
    fi
  fi
fi
((BUNDLE_OK)) || finish failed 1

# --- versions, launcher, cuda_logic (no GPU needed) ----------------------------------------
run versions 20 "$W/syncopt_cuda_versions"
grep -E '^\{' "$WORK/versions.out" | tail -1 >"$WORK/versions.json"
DETAIL="$(helper detail-versions "$WORK/versions.json" 2>&1)"
record versions "$(status_of "$RC")" "$SECS" "$DETAIL" "$WORK/versions.json"

MPI_OK=0
run launcher 30 "$MPIRUN" -np 4 "$W/syncopt" train "$ROOT/configs/fmnist-sync.toml" --dry-run \
  --set compute.backend=cpu --set cluster.evaluator=false
if ((RC == 0)) && grep -q "rank 3" "$WORK/launcher.out"; then
  MPI_OK=1
  record launcher passed "$SECS" "the carried mpirun started 4 ranks"
else
  record launcher "$( ((RC == 0)) && echo failed || status_of "$RC")" "$SECS" "rc $RC: $TAIL"
fi
run cuda_logic 20 "$W/syncopt_cuda_logic"
record cuda_logic "$(status_of "$RC")" "$SECS" \
  "$(grep -E '^(All tests passed|test cases)' "$WORK/cuda_logic.out" | tail -1)"

# --- the GPU gate ------------------------------------------------------------------------------
# A GPU is there when nvidia-smi lists one or the CUDA runtime counts one
# (nvidia-smi may be missing or hung where the runtime works).
DEVICES="$(helper get devices "$WORK/versions.json" 2>/dev/null)"
if [[ -z "$GPU_NAME" && "${DEVICES:-0}" == 0 && "$DRY" != 1 ]]; then
  record gpu skipped 0 "neither nvidia-smi nor the CUDA runtime sees a GPU: nothing below can run here"
  finish no-gpu 77
fi

# --- the CUDA tests, one step per Catch2 tag --------------------------------------------------
# Each group in its own process and under its own limit, so that a crash or a
# hang in one hides none of the others; cuda_rest runs whatever no group
# names (normally nothing).
cuda_group() {  # NAME LIMIT FILTER
  run "$1" "$2" "$W/syncopt_cuda_tests" --durations yes "$3"
  if [[ "$DRY" == 1 ]]; then
    expect_skip "$1"
  elif ((RC == 77)); then
    record "$1" failed "$SECS" "SKIPPED on a machine with a GPU: $TAIL"
  elif grep -q "No test cases matched" "$WORK/$1.out"; then
    record "$1" passed "$SECS" "no test case is tagged $3"
  else
    record "$1" "$(status_of "$RC")" "$SECS" \
      "$3: $(grep -E '^(test cases|All tests passed)' "$WORK/$1.out" | tail -1) $TAIL"
  fi
}
cuda_group cuda_kernels 30 "[kernels]"
cuda_group cuda_model 30 "[model],[errors]"
cuda_group cuda_graph 60 "[graph]"
cuda_group cuda_replica 45 "[replica]"
cuda_group cuda_sync 20 "[sync]"
cuda_group cuda_rest 20 "~[kernels]~[model]~[errors]~[graph]~[replica]~[sync]"

# --- NCCL: 1 rank, then 2 and 4 ranks sharing the GPU -------------------------------------
# NCCL_DEBUG=WARN says why NCCL fails; NCCL_CUMEM_HOST_ENABLE=0 avoids its
# host-memory probe, known to crash on drivers before 595. A step that fails
# so is tried once more without NCCL_CUMEM_HOST_ENABLE=0 and records both
# tries; the retry's verdict is the step's. SYNCOPT_GPU_CHECK_FAIL_FIRST=NAME
# (dry run only) makes step NAME's first try fail, to walk the retry path.
nccl_try() {  # NAME NP LIMIT ENV...
  local name="$1" np="$2" limit="$3"
  shift 3
  if [[ "$DRY" == 1 && "${SYNCOPT_GPU_CHECK_FAIL_FIRST:-}" == "${name%_retry}" && "$name" != *_retry ]]; then
    run "$name" "$limit" sh -c 'echo "FAIL: the first try fails on purpose (SYNCOPT_GPU_CHECK_FAIL_FIRST)"; exit 1'
  elif ((!MPI_OK)); then
    run "$name" "$limit" env "$@" "$W/syncopt_nccl_mpi"  # a singleton MPI process
  else
    local x=() kv
    for kv in "$@"; do x+=(-x "${kv%%=*}"); done
    run "$name" "$limit" env "$@" "$MPIRUN" -np "$np" "${x[@]}" "$W/syncopt_nccl_mpi"
  fi
}
nccl_verdict() {  # NAME: the status of the last try
  if [[ "$DRY" == 1 ]]; then
    ((RC == 77)) && echo skipped || echo failed
  else
    status_of "$RC"
  fi
}
nccl_step() {  # NAME NP LIMIT
  if ((!MPI_OK && $2 != 1)); then
    record "$1" skipped 0 "the carried mpirun does not work here"
    return
  fi
  nccl_try "$1" "$2" "$3" NCCL_DEBUG=WARN NCCL_CUMEM_HOST_ENABLE=0
  local st first
  st="$(nccl_verdict)"
  if [[ "$st" != failed && "$st" != timeout ]]; then
    if [[ "$DRY" == 1 ]]; then
      expect_skip "$1"
    else
      record "$1" "$st" "$SECS" "NCCL_CUMEM_HOST_ENABLE=0: $TAIL"
    fi
    return
  fi
  first="first try (NCCL_CUMEM_HOST_ENABLE=0) $st, rc $RC: $TAIL"
  local secs1=$SECS
  nccl_try "$1_retry" "$2" "$3" NCCL_DEBUG=WARN
  st="$(nccl_verdict)"
  local note="the retry also $st"
  [[ "$st" == skipped ]] && note="the retry skipped (77)"
  [[ "$st" == passed ]] && note="the retry passed: NCCL_CUMEM_HOST_ENABLE=0 was what failed"
  record "$1" "$st" $((secs1 + SECS)) "$note; retry without NCCL_CUMEM_HOST_ENABLE=0, rc $RC: $TAIL; $first"
}
nccl_step nccl_np1 1 45
nccl_step nccl_np2 2 60
nccl_step nccl_np4 4 75

# --- training runs on the carried Fashion-MNIST -----------------------------------------------
# train_run NAME ARGS...: mpirun -np 4 syncopt train; passes when it
# completes with test accuracy >= MIN_ACC.
BACKEND=cuda
[[ "$DRY" == 1 ]] && BACKEND=cpu  # what the GPU run does, on the CPU
train_run() {
  local name="$1"
  shift
  if ((!MPI_OK)); then
    record "$name" skipped 0 "the carried mpirun does not work here"
    return
  fi
  run "$name" 75 "$MPIRUN" -np 4 "$W/syncopt" train "$ROOT/configs/fmnist-sync.toml" \
    --set run.dir="$WORK/runs" --set run.name="$name" --set data.path="$CARRY/fashion-mnist" \
    --set compute.backend="$BACKEND" --set cluster.evaluator=false --set train.epochs=1 \
    --set eval.every_s=0 --set eval.every_steps=0 "$@"
  local summary="$WORK/runs/$name/summary.json"
  local verdict
  verdict="$(helper train-verdict "$summary" "$MIN_ACC" 2>&1)"
  ((RC == 124 || RC == 137)) && verdict="timeout ${verdict#* }"
  record "$name" "${verdict%% *}" "$SECS" "${verdict#* }; rc $RC; $TAIL" "$summary"
}
train_run sync_fmnist --set train.mode=sync --set train.backups=1
train_run allreduce_fmnist --set train.mode=allreduce
grep -h "allreduce through MPI" "$WORK/allreduce_fmnist.out" 2>/dev/null | head -1

# --- the benchmark against PyTorch, largest batch first ------------------------------------
# Python runs with this script's environment: the carried libraries reach
# syncopt through its wrapper only.
MEMCHECK_RESERVE=45
BENCH_LIMIT=$(($(left) - 10 - MEMCHECK_RESERVE))
((BENCH_LIMIT > 150)) && BENCH_LIMIT=150
if [[ "$DRY" == 1 ]]; then
  # Batch 0 is refused by syncopt's config: the bench must record it and go on.
  BENCH_ARGS=(--backend cpu --batches "64,0,16" --warmup 3 --steps 12 --rounds 2)
else
  BENCH_ARGS=(--batches "1024,512,128,32" --warmup 20 --steps 100 --rounds 2)
fi
run bench "$BENCH_LIMIT" python3 "$ROOT/bench/cnn_cuda_vs_torch.py" --exe "$W/syncopt" \
  "${BENCH_ARGS[@]}" --json "$OUT/bench.json"
DETAIL="batch, syncopt ms, torch ms, ratio, first steps: $(grep -E '^ +[0-9]+ ' "$WORK/bench.out" | tr -s ' ' | tr '\n' ';')"
FAILED_BATCHES="$(helper get failed_batches "$OUT/bench.json" 2>/dev/null)"
ST="$(status_of "$RC")"
((RC == 0)) || DETAIL="rc $RC, failed batches: ${FAILED_BATCHES:-none}; $DETAIL; $TAIL"
if [[ "$DRY" == 1 && "$RC" == 1 && "$FAILED_BATCHES" == 0 ]]; then
  ST=passed DETAIL="the planted batch 0 failed and the bench went on; $DETAIL"
fi
record bench "$ST" "$SECS" "$DETAIL" "$OUT/bench.json"

# --- compute-sanitizer memcheck, last ------------------------------------------------------
# A timeout says nothing about the memory accesses: inconclusive, not failed.
if [[ -z "$SANITIZER" ]]; then
  record memcheck skipped 0 "no compute-sanitizer on this machine"
else
  DETAILS=""
  ST=passed
  MEMCHECK_S=0
  # The kernels first, then a layer graph through cuDNN (conv with stride and
  # projection, batch norm, add, pooling, fc, the statistics pass), then the
  # replica; each gets what is left of its limit.
  for filter in "[kernels]" "cuda graph: a residual block*" "cuda replica: a non-finite gradient is seen"; do
    run memcheck "${SYNCOPT_GPU_CHECK_MEMCHECK_S:-45}" "$SANITIZER" --tool memcheck \
      --error-exitcode 9 --leak-check no "$W/syncopt_cuda_tests" "$filter"
    MEMCHECK_S=$((MEMCHECK_S + SECS))
    if grep -qiE 'device not supported|not supported on this|unable to|LibraryNotLoaded' "$WORK/memcheck.out" &&
      ((RC != 0 && RC != 9)); then
      ST=unsupported
      DETAILS+="$filter: compute-sanitizer cannot run here (rc $RC: $TAIL); "
      break
    fi
    case "$RC" in
      0) DETAILS+="$filter: clean, $(grep -E 'ERROR SUMMARY' "$WORK/memcheck.out" | tail -1); " ;;
      124 | 137)
        [[ "$ST" == passed ]] && ST=inconclusive
        DETAILS+="$filter: inconclusive, $TAIL; "
        ;;
      77)
        [[ "$DRY" == 1 && "$ST" == passed ]] || ST=failed
        DETAILS+="$filter: SKIP (77, no GPU); "
        ;;
      *)
        ST=failed
        DETAILS+="$filter: rc $RC $(grep -E 'ERROR SUMMARY' "$WORK/memcheck.out" | tail -1) $TAIL; "
        ;;
    esac
    rm -f "$WORK/memcheck.out"
  done
  record memcheck "$ST" "$MEMCHECK_S" "$DETAILS"
fi

if [[ "$DRY" == 1 ]]; then
  ((FAILED)) && finish dry-run-failed 1
  finish dry-run-passed 0
fi
((FAILED)) && finish failed 1
finish passed 0
