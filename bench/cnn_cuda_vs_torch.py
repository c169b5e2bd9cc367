#!/usr/bin/env python3
"""Training throughput of the reference CNN on one GPU: syncopt's CUDA backend vs PyTorch.

Both train the same network (conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2,
fc(256)-relu, fc(10), weight normalisation on every layer, softmax
cross-entropy, SGD with momentum 0.9) on in-memory data of the same shape
(1x28x28, 10 classes), with the same batch, for a fixed number of steps, on
the same GPU. The two alternate round by round; the script prints images/s
of each (median over rounds) and the ratio syncopt / PyTorch.

What is timed: the whole training loop of `--steps` steps, start-up and
evaluation excluded. syncopt's figure is `train_s` from its summary.json
(`configs/bench-cnn.toml`, EMA off); it includes what syncopt's design does
per step: the host-side batch gather, the parameter upload and gradient
download through pinned buffers, and the optimiser on the host. PyTorch keeps
data, parameters and optimiser on the GPU. Both run in plain FP32: syncopt's
convolutions use CUDNN_FMA_MATH, and PyTorch's TF32 is switched off
(torch.backends.cudnn.allow_tf32 = False; matmul TF32 is off by default).
Neither side excludes its first steps (cuDNN algorithm search for syncopt).
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
batch, steps, seed = (int(a) for a in sys.argv[1:4])
torch.backends.cudnn.allow_tf32 = False
torch.backends.cuda.matmul.allow_tf32 = False
torch.manual_seed(seed)
dev = torch.device("cuda")
model = nn.Sequential(
    weight_norm(nn.Conv2d(1, 32, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
    weight_norm(nn.Conv2d(32, 64, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), weight_norm(nn.Linear(64 * 7 * 7, 256)), nn.ReLU(),
    weight_norm(nn.Linear(256, 10))).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
n = 4096
x = torch.randn(n, 1, 28, 28, device=dev)
y = torch.randint(0, 10, (n,), device=dev)
perm = torch.randperm(n, device=dev)
torch.cuda.synchronize()
t0 = time.perf_counter()
for s in range(steps):
    start = (s * batch) % (n - batch)
    idx = perm[start:start + batch]
    xb, yb = x[idx], y[idx]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
dt = time.perf_counter() - t0
print(f"TORCH {steps * batch / dt:.3f} {float(loss):.4f} {torch.__version__} "
      f"{torch.cuda.get_device_name(0).replace(' ', '_')}")
"""


def run_torch(batch, steps, seed):
    out = subprocess.run([sys.executable, "-c", TORCH_LOOP, str(batch), str(steps), str(seed)],
                         check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("TORCH ")][-1].split()
    return float(line[1]), line[3], line[4]


def run_syncopt(exe, batch, steps, seed, tmp):
    name = f"bench-cuda-b{batch}-{time.monotonic_ns()}"
    cmd = [exe, "train", os.path.join(ROOT, "configs", "bench-cnn.toml"), "--quiet",
           "--set", f"run.dir={tmp}", "--set", f"run.name={name}",
           "--set", "compute.backend=cuda", "--set", "compute.threads=1",
           "--set", f"train.batch={batch}", "--set", f"train.steps={steps}",
           "--set", f"run.seed={seed}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench: syncopt failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    with open(os.path.join(tmp, name, "summary.json")) as f:
        summary = json.load(f)
    return summary["steps"] * summary["batch"] / summary["train_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "syncopt"))
    ap.add_argument("--batches", default="128,512")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if not os.path.exists(args.exe):
        sys.exit(f"bench: {args.exe} not found; build with -DSYNCOPT_WITH_CUDA=ON first")
    try:
        import torch
        if not torch.cuda.is_available():
            sys.exit("bench: PyTorch sees no GPU")
    except ImportError:
        sys.exit("bench: the peer, PyTorch with CUDA, is not installed")
    results = []
    with tempfile.TemporaryDirectory(prefix="syncopt-bench-cuda-") as tmp:
        for batch in (int(b) for b in args.batches.split(",")):
            ours, theirs, version, gpu = [], [], "", ""
            for r in range(args.rounds):
                ours.append(run_syncopt(args.exe, batch, args.steps, r + 1, tmp))
                t, version, gpu = run_torch(batch, args.steps, r + 1)
                theirs.append(t)
                print(f"  batch {batch} round {r + 1}: syncopt {ours[-1]:10.1f} img/s   "
                      f"torch {theirs[-1]:10.1f} img/s", flush=True)
            a, b = statistics.median(ours), statistics.median(theirs)
            results.append({"batch": batch, "steps": args.steps, "syncopt_img_s": a,
                            "torch_img_s": b, "ratio": a / b, "torch_version": version,
                            "gpu": gpu, "precision": "fp32 (no TF32)"})
    print(f"\nreference CNN training on {results[0]['gpu']}, {args.steps} steps, "
          f"median of {args.rounds} alternating rounds")
    print(f"{'batch':>6} {'syncopt img/s':>14} {'torch img/s':>12} {'syncopt/torch':>14}")
    for r in results:
        print(f"{r['batch']:>6} {r['syncopt_img_s']:>14.1f} {r['torch_img_s']:>12.1f} "
              f"{r['ratio']:>14.2f}")
    print(f"(PyTorch {results[0]['torch_version']})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
