#!/usr/bin/env python3
"""Training step time of the reference CNN on one GPU: syncopt's CUDA backend vs PyTorch.

Both train the same network (conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2,
fc(256)-relu, fc(10), weight normalisation on every layer, softmax
cross-entropy, SGD with momentum 0.9, no EMA) on in-memory data of the same
shape (1x28x28, 10 classes), with the same batch, on the same GPU, in plain
FP32: TF32 is off on both sides (syncopt: cuDNN convolutions in
CUDNN_FMA_MATH, cuBLAS in CUBLAS_DEFAULT_MATH, which keeps FP32 sgemm in FP32;
PyTorch: torch.backends.cuda.matmul.allow_tf32 = False and
torch.backends.cudnn.allow_tf32 = False). Both pick their cuDNN algorithms by
timing them (syncopt: cudnnFind; PyTorch: cudnn.benchmark = True).

What is timed: only steady-state steps. Each run trains --warmup + --steps
steps; the first --warmup (algorithm search, allocation, clocks ramping up)
are left out, and the step time is the mean over the --steps after them.
syncopt's steps come from its steps.jsonl (local mode: `t_start` of step
k+1 minus that of step k is one whole loop iteration: the host batch
gather, the image upload, forward/backward with θ and the gradient on the
device (CudaReplica), the finite check, the optimiser, the record);
PyTorch's from the wall clock between two torch.cuda.synchronize() calls
around the timed steps. The first step, which holds cuDNN's algorithm
search, is reported apart ("first step").

The two alternate round by round; the script prints the median over rounds
of each and the ratio syncopt / PyTorch of the step times (below 1: syncopt
is faster). Without PyTorch (or without a GPU for it, or when importing it
fails in any way) it reports syncopt's figures alone and says why.

Batches run in the order given, largest first by default, and --json is
rewritten after each one, so a run cut short by a time limit keeps what it
measured (scripts/gpu-check.sh relies on both). A batch that fails (syncopt
exits non-zero, its records are unreadable) is recorded with its error and
the next batch runs; the script then exits 1, naming the failed batches.
The file also records the LD_LIBRARY_PATH this script and its PyTorch
processes ran with: --exe may be a wrapper that gives syncopt its own
libraries, which must not reach Python.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCH_LOOP = r"""
import sys, time, torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm
batch, warmup, steps, seed = (int(a) for a in sys.argv[1:5])
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True
torch.manual_seed(seed)
dev = torch.device("cuda")
model = nn.Sequential(
    weight_norm(nn.Conv2d(1, 32, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
    weight_norm(nn.Conv2d(32, 64, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), weight_norm(nn.Linear(64 * 7 * 7, 256)), nn.ReLU(),
    weight_norm(nn.Linear(256, 10))).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
n = max(4096, 2 * batch)
x = torch.randn(n, 1, 28, 28, device=dev)
y = torch.randint(0, 10, (n,), device=dev)
perm = torch.randperm(n, device=dev)
def step(s):
    start = (s * batch) % (n - batch)
    idx = perm[start:start + batch]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x[idx]), y[idx])
    loss.backward()
    opt.step()
    return loss
torch.cuda.synchronize()
t0 = time.perf_counter()
step(0)
torch.cuda.synchronize()
first = time.perf_counter() - t0
for s in range(1, warmup):
    step(s)
torch.cuda.synchronize()
t0 = time.perf_counter()
for s in range(warmup, warmup + steps):
    loss = step(s)
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"TORCH {dt / steps:.9f} {first:.6f} {float(loss):.4f} {torch.__version__} "
      f"{torch.cuda.get_device_name(0).replace(' ', '_')}")
"""


def run_torch(batch, warmup, steps, seed):
    proc = subprocess.run([sys.executable, "-c", TORCH_LOOP, str(batch), str(warmup), str(steps),
                           str(seed)], capture_output=True, text=True)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("TORCH ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"the PyTorch loop failed ({proc.returncode}): {proc.stderr[-2000:]}")
    f = lines[-1].split()
    return {"step_s": float(f[1]), "first_step_s": float(f[2]), "version": f[4], "gpu": f[5]}


def run_syncopt(exe, backend, batch, warmup, steps, seed, tmp):
    name = f"bench-{backend}-b{batch}-{time.monotonic_ns()}"
    cmd = [exe, "train", os.path.join(ROOT, "configs", "bench-cnn.toml"), "--quiet",
           "--set", f"run.dir={tmp}", "--set", f"run.name={name}",
           "--set", f"compute.backend={backend}", "--set", "compute.threads=1",
           "--set", f"data.synthetic_train={max(4096, 2 * batch)}",
           "--set", f"train.batch={batch}", "--set", f"train.steps={warmup + steps + 1}",
           "--set", f"run.seed={seed}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"syncopt failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n"
                           f"{proc.stderr[-2000:]}")
    t = {}
    with open(os.path.join(tmp, name, "steps.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            t[rec["step"]] = rec["t_start"]
    # Steps are numbered from 1; step k's loop iteration ends when k+1 starts.
    first = t[2] - t[1]
    window = (t[warmup + steps + 1] - t[warmup + 1]) / steps
    per_step = sorted(t[k + 1] - t[k] for k in range(warmup + 1, warmup + steps + 1))
    return {"step_s": window, "first_step_s": first,
            "median_step_s": per_step[len(per_step) // 2]}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "syncopt"))
    ap.add_argument("--batches", default="1024,512,128,32")
    ap.add_argument("--warmup", type=int, default=30, help="steps left out before timing")
    ap.add_argument("--steps", type=int, default=200, help="steps timed after the warm-up")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", help="also write the figures here")
    ap.add_argument("--backend", default="cuda",
                    help="syncopt's compute.backend; cpu only exercises the script without a GPU")
    args = ap.parse_args()
    if args.warmup < 2:
        sys.exit("bench: --warmup must be at least 2 (the first step searches algorithms)")
    if not os.path.exists(args.exe):
        sys.exit(f"bench: {args.exe} not found; build with -DSYNCOPT_WITH_CUDA=ON first")
    peer_note = ""
    try:
        import torch
        if not torch.cuda.is_available():
            peer_note = "PyTorch sees no GPU"
    except ModuleNotFoundError as e:
        peer_note = ("PyTorch is not installed" if e.name == "torch" else
                     f"importing PyTorch failed: {type(e).__name__}: {str(e)[:300]}")
    except Exception as e:  # a library clash, a driver problem: no peer, but a report
        peer_note = f"importing PyTorch failed: {type(e).__name__}: {str(e)[:300]}"
    if peer_note:
        print(f"bench: {peer_note}: reporting syncopt's figures alone, no ratio", flush=True)
    results, failed = [], []
    env_note = {"python_ld_library_path": os.environ.get("LD_LIBRARY_PATH"), "exe": args.exe}

    def write_json():
        if not args.json:
            return
        tmp_path = args.json + ".tmp"
        with open(tmp_path, "w") as f:
            json.dump({"results": results, "failed_batches": failed, "peer_note": peer_note,
                       **env_note}, f, indent=2)
        os.replace(tmp_path, args.json)

    write_json()
    with tempfile.TemporaryDirectory(prefix="syncopt-bench-cuda-") as tmp:
        for batch in (int(b) for b in args.batches.split(",")):
            ours, theirs, first_ours, first_theirs, peer = [], [], [], [], {}
            error = None
            for r in range(args.rounds):
                try:
                    o = run_syncopt(args.exe, args.backend, batch, args.warmup, args.steps,
                                    r + 1, tmp)
                except Exception as e:  # this batch failed; the next ones still run
                    error = f"round {r + 1}: {type(e).__name__}: {str(e)[-1500:]}"
                    print(f"bench: batch {batch} failed, going on with the next: {error}",
                          flush=True)
                    break
                ours.append(o["step_s"])
                first_ours.append(o["first_step_s"])
                line = f"  batch {batch} round {r + 1}: syncopt {1e3 * o['step_s']:8.3f} ms/step"
                if not peer_note:
                    try:
                        peer = run_torch(batch, args.warmup, args.steps, r + 1)
                    except RuntimeError as e:
                        peer_note = f"the PyTorch loop failed: {e}"
                        print(f"bench: {peer_note}", flush=True)
                    else:
                        theirs.append(peer["step_s"])
                        first_theirs.append(peer["first_step_s"])
                        line += f"   torch {1e3 * peer['step_s']:8.3f} ms/step"
                print(line, flush=True)
            if error is not None:
                failed.append(batch)
                results.append({"batch": batch, "backend": args.backend, "error": error})
                write_json()
                continue
            res = {"batch": batch, "backend": args.backend, "warmup": args.warmup, "steps": args.steps,
                   "rounds": args.rounds, "precision": "fp32 (no TF32 on either side)",
                   "syncopt_step_ms": 1e3 * statistics.median(ours),
                   "syncopt_img_s": batch / statistics.median(ours),
                   "syncopt_first_step_ms": 1e3 * statistics.median(first_ours)}
            if theirs:
                res.update({"torch_step_ms": 1e3 * statistics.median(theirs),
                            "torch_img_s": batch / statistics.median(theirs),
                            "torch_first_step_ms": 1e3 * statistics.median(first_theirs),
                            "ratio_syncopt_over_torch": statistics.median(ours) /
                            statistics.median(theirs),
                            "torch_version": peer.get("version"), "gpu": peer.get("gpu")})
            results.append(res)
            write_json()
    print(f"\nreference CNN training, {args.warmup} warm-up + {args.steps} timed steps, "
          f"median of {args.rounds} alternating rounds, FP32 without TF32")
    print(f"{'batch':>6} {'syncopt ms':>11} {'torch ms':>9} {'syncopt/torch':>14} "
          f"{'1st step syncopt':>17} {'1st step torch':>15}")
    for r in results:
        if "error" in r:
            print(f"{r['batch']:>6} failed: {r['error'][:200]}".replace("\n", " "))
            continue
        tm = f"{r['torch_step_ms']:9.3f}" if "torch_step_ms" in r else f"{'-':>9}"
        ratio = f"{r['ratio_syncopt_over_torch']:14.2f}" if "torch_step_ms" in r else f"{'-':>14}"
        tf = f"{r['torch_first_step_ms']:15.1f}" if "torch_step_ms" in r else f"{'-':>15}"
        print(f"{r['batch']:>6} {r['syncopt_step_ms']:11.3f} {tm} {ratio} "
              f"{r['syncopt_first_step_ms']:17.1f} {tf}")
    print("(step times in ms; ratio < 1: syncopt's step is shorter; the first step holds the "
          "cuDNN algorithm search and is not in the step times)")
    if peer_note:
        print(f"note: no PyTorch figures: {peer_note}")
    write_json()
    if failed:
        sys.exit(f"bench: batch(es) {', '.join(map(str, failed))} failed (see above); "
                 "the others are reported")


if __name__ == "__main__":
    main()
