#!/usr/bin/env python3
"""Training throughput of the reference CNN: syncopt's CPU backend vs PyTorch.

Both train the same network (conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2,
fc(256)-relu, fc(10), weight normalisation on every layer, softmax
cross-entropy, SGD with momentum 0.9) on the same kind of in-memory data
(1x28x28, 10 classes), with the same batch and thread count, for a fixed
number of steps. The two are alternated round by round in one run, because
the machine is shared and noisy; the script prints images/s of each (median
over rounds) and the ratio syncopt / PyTorch.

What is timed, on both sides: the whole training loop of `--steps` steps
(batch gather, forward, backward, optimiser update), not start-up, data
loading or evaluation. syncopt's figure is `train_s` from its summary.json;
its EMA is switched off because the PyTorch loop keeps none.

PyTorch is the peer only: it is installed here when missing (pip) and never
used by syncopt itself.
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


def ensure_torch():
    try:
        import torch  # noqa: F401
    except ImportError:
        print("bench: installing the peer, PyTorch, from PyPI (pip install torch) ...", flush=True)
        subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "torch"])


TORCH_LOOP = r"""
import sys, time, torch
from torch import nn
from torch.nn.utils.parametrizations import weight_norm
batch, steps, threads, seed = (int(a) for a in sys.argv[1:5])
torch.set_num_threads(threads)
torch.manual_seed(seed)
model = nn.Sequential(
    weight_norm(nn.Conv2d(1, 32, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
    weight_norm(nn.Conv2d(32, 64, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
    nn.Flatten(), weight_norm(nn.Linear(64 * 7 * 7, 256)), nn.ReLU(),
    weight_norm(nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()
n = 4096
x = torch.randn(n, 1, 28, 28)
y = torch.randint(0, 10, (n,))
perm = torch.randperm(n)
t0 = time.perf_counter()
for s in range(steps):
    idx = perm[(s * batch) % (n - batch):(s * batch) % (n - batch) + batch]
    xb, yb = x[idx], y[idx]
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
print(f"TORCH {steps * batch / dt:.3f} {float(loss):.4f} {torch.__version__}")
"""


def run_torch(batch, steps, threads, seed):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", TORCH_LOOP, str(batch), str(steps), str(threads),
                          str(seed)], env=env, check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("TORCH ")][-1].split()
    return float(line[1]), line[3]


def run_syncopt(exe, batch, steps, threads, seed, tmp):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    name = f"bench-b{batch}-{time.monotonic_ns()}"
    cmd = [exe, "train", os.path.join(ROOT, "configs", "bench-cnn.toml"), "--quiet",
           "--set", f"run.dir={tmp}", "--set", f"run.name={name}",
           "--set", f"train.batch={batch}", "--set", f"train.steps={steps}",
           "--set", f"compute.threads={threads}", "--set", f"run.seed={seed}"]
    subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    with open(os.path.join(tmp, name, "summary.json")) as f:
        summary = json.load(f)
    return summary["steps"] * summary["batch"] / summary["train_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "syncopt"))
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if not os.path.exists(args.exe):
        sys.exit(f"bench: {args.exe} not found; build first (scripts/setup.sh)")
    ensure_torch()
    results = []
    with tempfile.TemporaryDirectory(prefix="syncopt-bench-") as tmp:
        for batch in (int(b) for b in args.batches.split(",")):
            ours, theirs, version = [], [], ""
            for r in range(args.rounds):
                ours.append(run_syncopt(args.exe, batch, args.steps, args.threads, r + 1, tmp))
                t, version = run_torch(batch, args.steps, args.threads, r + 1)
                theirs.append(t)
                print(f"  batch {batch} round {r + 1}: syncopt {ours[-1]:8.1f} img/s   "
                      f"torch {theirs[-1]:8.1f} img/s", flush=True)
            a, b = statistics.median(ours), statistics.median(theirs)
            results.append({"batch": batch, "threads": args.threads, "steps": args.steps,
                            "syncopt_img_s": a, "torch_img_s": b, "ratio": a / b,
                            "torch_version": version})
    print(f"\nreference CNN training, {args.threads} thread(s), {args.steps} steps, "
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
