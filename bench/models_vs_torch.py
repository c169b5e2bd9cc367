#!/usr/bin/env python3
"""Training throughput of syncopt's CPU backend vs PyTorch eager, model by model,
in FP32 and in bf16 (syncopt's compute.precision = bf16 against PyTorch under
torch.autocast("cpu", dtype=torch.bfloat16)).

Models: the reference CNN (conv3x3(32)-relu-pool2, conv3x3(64)-relu-pool2,
fc(256)-relu, fc(10), weight normalisation on every layer) and ResNet-20 (He
et al. 2016 section 4.2: 3x3 conv(16)-bn-relu, 3 stages of 3 basic blocks of
widths 16/32/64, 1x1 conv + bn projection shortcuts where the shape changes,
global average pooling, fc), both on 1x28x28 inputs with 10 classes. Both
sides train the same network on the same kind of in-memory data with the
same batch, one thread, SGD with momentum 0.9, softmax cross-entropy, for a
fixed number of examples. syncopt and PyTorch alternate run by run, round by
round, because the machine is shared and noisy; the script prints images/s
of each (median over rounds), the ratio syncopt / PyTorch, and GFLOP/s:
images/s x 3 x the forward FLOPs per example of `syncopt train --dry-run`
(a multiply-add counts 2; the backward pass taken as twice the forward),
next to the one-thread sgemm peak measured here: the better of torch.mm and
oneDNN's dnnl_sgemm on 2048 x 2048 (both are printed).

What is timed, on both sides: the whole training loop (batch gather,
forward, backward, optimiser update), not start-up, data loading or
evaluation. syncopt's figure is `train_s` from its summary.json; its EMA is
off because the PyTorch loop keeps none.

PyTorch is the peer only: installed here when missing (pip) and never used
by syncopt itself.

Also printed: the CPU model (lscpu) and the oneDNN version and instruction
set syncopt dispatches to (`syncopt --version`), and for each model and
batch syncopt bf16 / syncopt FP32.

    bench/models_vs_torch.py [--models cnn,resnet20] [--batches 32,128]
                             [--precisions fp32,bf16] [--rounds 3]
"""
import argparse
import json
import os
import re
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
model_name = sys.argv[1]
batch, steps, threads, seed = (int(a) for a in sys.argv[2:6])
bf16 = sys.argv[6] == "bf16"
torch.set_num_threads(threads)
torch.manual_seed(seed)

class Block(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.c1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.b1 = nn.BatchNorm2d(cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.b2 = nn.BatchNorm2d(cout)
        self.proj = None
        if stride != 1 or cin != cout:
            self.proj = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, 0, bias=False),
                                      nn.BatchNorm2d(cout))
    def forward(self, x):
        y = self.b2(self.c2(torch.relu(self.b1(self.c1(x)))))
        return torch.relu(y + (x if self.proj is None else self.proj(x)))

def resnet(widths, blocks, stem):
    layers = [nn.Conv2d(1, stem, 3, 1, 1, bias=False), nn.BatchNorm2d(stem), nn.ReLU()]
    cin = stem
    for s, w in enumerate(widths):
        for b in range(blocks):
            layers.append(Block(cin, w, 2 if s > 0 and b == 0 else 1))
            cin = w
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10)]
    return nn.Sequential(*layers)

if model_name == "cnn":
    model = nn.Sequential(
        weight_norm(nn.Conv2d(1, 32, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
        weight_norm(nn.Conv2d(32, 64, 3, padding=1)), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), weight_norm(nn.Linear(64 * 7 * 7, 256)), nn.ReLU(),
        weight_norm(nn.Linear(256, 10)))
elif model_name == "resnet20":
    model = resnet([16, 32, 64], 3, 16)
else:
    raise SystemExit("unknown model " + model_name)
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
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        loss = loss_fn(model(xb), yb)
    loss.backward()
    opt.step()
dt = time.perf_counter() - t0
print(f"TORCH {steps * batch / dt:.3f} {float(loss):.4f} {torch.__version__}")
"""

# oneDNN's own sgemm (the library syncopt runs on), through ctypes: on a CPU
# where PyTorch's MKL sgemm is not the fastest (AMD), torch.mm alone would
# understate the peak.
DNNL_SGEMM = r"""
import ctypes, ctypes.util, time
import numpy as np
import sys
lib = ctypes.CDLL(sys.argv[1])
f = lib.dnnl_sgemm
i64, flt, ptr = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p
f.argtypes = [ctypes.c_char, ctypes.c_char, i64, i64, i64, flt, ptr, i64, ptr, i64, flt, ptr, i64]
n = 2048
a, b = (np.random.rand(n, n).astype(np.float32) for _ in range(2))
c = np.zeros((n, n), np.float32)
best = 0.0
for _ in range(6):
    t0 = time.perf_counter()
    f(b"N", b"N", n, n, n, 1.0, a.ctypes.data, n, b.ctypes.data, n, 0.0, c.ctypes.data, n)
    best = max(best, 2 * n ** 3 / (time.perf_counter() - t0) / 1e9)
print(f"SGEMM {best:.1f}")
"""

SGEMM = r"""
import sys, time, torch
torch.set_num_threads(1)
a = torch.randn(2048, 2048)
b = torch.randn(2048, 2048)
torch.mm(a, b)
best = 0.0
for _ in range(5):
    t0 = time.perf_counter()
    torch.mm(a, b)
    best = max(best, 2 * 2048 ** 3 / (time.perf_counter() - t0) / 1e9)
print(f"SGEMM {best:.1f}")
"""


def torch_env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))


def run_torch(model, batch, steps, threads, seed, precision):
    out = subprocess.run([sys.executable, "-c", TORCH_LOOP, model, str(batch), str(steps),
                          str(threads), str(seed), precision], env=torch_env(threads),
                         check=True, capture_output=True, text=True).stdout
    line = [l for l in out.splitlines() if l.startswith("TORCH ")][-1].split()
    return float(line[1]), line[3]


def sgemm_peak(code=SGEMM, *args):
    res = subprocess.run([sys.executable, "-c", code, *args], env=torch_env(1),
                         capture_output=True, text=True)
    lines = [l for l in res.stdout.splitlines() if l.startswith("SGEMM ")]
    return float(lines[-1].split()[1]) if res.returncode == 0 and lines else float("nan")


def dnnl_library(exe):
    """The libdnnl the syncopt binary loads (ldd)."""
    out = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    m = re.search(r"libdnnl\.so\S* => (\S+)", out)
    return m.group(1) if m else "libdnnl.so.3"


def machine(exe):
    """The CPU model, and syncopt's oneDNN and its instruction set."""
    cpu = "?"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        m = re.search(r"Model name:\s*(.+)", out)
        cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
    m = re.search(r"compute: (.+)", version)
    return cpu, (m.group(1).strip() if m else "?")


def syncopt_args(exe, model, batch, steps, threads, seed, tmp, name, precision="fp32"):
    return [exe, "train", os.path.join(ROOT, "configs", "bench-cnn.toml"), "--quiet",
            "--set", f"compute.precision={precision}",
            "--set", f"run.dir={tmp}", "--set", f"run.name={name}",
            "--set", f"model.name={model}", "--set", "eval.bn_batches=1",
            "--set", f"train.batch={batch}", "--set", f"train.steps={steps}",
            "--set", f"compute.threads={threads}", "--set", f"run.seed={seed}"]


def forward_flops(exe, model, tmp):
    out = subprocess.run(syncopt_args(exe, model, 32, 1, 1, 1, tmp, "flops") + ["--dry-run"],
                         check=True, capture_output=True, text=True).stdout
    m = re.search(r"total: .* ([0-9.]+) MFLOPs forward per example", out)
    return float(m.group(1)) * 1e6


def run_syncopt(exe, model, batch, steps, threads, seed, tmp, precision):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    name = f"bench-{model}-b{batch}-{precision}-{time.monotonic_ns()}"
    subprocess.run(syncopt_args(exe, model, batch, steps, threads, seed, tmp, name, precision),
                   env=env, check=True, capture_output=True, text=True)
    with open(os.path.join(tmp, name, "summary.json")) as f:
        summary = json.load(f)
    return summary["steps"] * summary["batch"] / summary["train_s"]


def measure(args, model, batch, steps, precision, flops, tmp):
    """Alternating rounds of syncopt and PyTorch at one precision."""
    ours, theirs, version = [], [], ""
    for r in range(args.rounds):
        ours.append(run_syncopt(args.exe, model, batch, steps, args.threads, r + 1, tmp,
                                precision))
        t, version = run_torch(model, batch, steps, args.threads, r + 1, precision)
        theirs.append(t)
        print(f"  {model} batch {batch} {precision} round {r + 1}: syncopt {ours[-1]:8.1f} img/s"
              f"   torch {theirs[-1]:8.1f} img/s", flush=True)
    a, b = statistics.median(ours), statistics.median(theirs)
    return {"model": model, "batch": batch, "precision": precision, "threads": args.threads,
            "steps": steps, "syncopt_img_s": a, "torch_img_s": b, "ratio": a / b,
            "syncopt_rounds": ours, "torch_rounds": theirs,
            "train_gflop_per_example": 3 * flops / 1e9, "syncopt_gflop_s": a * 3 * flops / 1e9,
            "torch_gflop_s": b * 3 * flops / 1e9, "torch_version": version}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "syncopt"))
    ap.add_argument("--models", default="cnn,resnet20")
    ap.add_argument("--batches", default="32,128")
    ap.add_argument("--precisions", default="fp32,bf16")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--examples", type=int, default=4096,
                    help="examples trained per run (steps = examples / batch)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if not os.path.exists(args.exe):
        sys.exit(f"bench: {args.exe} not found; build first (scripts/setup.sh)")
    ensure_torch()
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores",
          flush=True)
    cpu, compute = machine(args.exe)
    print(f"CPU: {cpu}; syncopt: {compute}", flush=True)
    torch_peak, dnnl_peak = sgemm_peak(SGEMM), sgemm_peak(DNNL_SGEMM, dnnl_library(args.exe))
    peak = max(torch_peak, dnnl_peak)
    print(f"one-thread sgemm 2048x2048, best of 5: torch.mm {torch_peak:.1f} GFLOP/s, "
          f"oneDNN dnnl_sgemm {dnnl_peak:.1f} GFLOP/s; the peak below is the larger", flush=True)
    results = []
    with tempfile.TemporaryDirectory(prefix="syncopt-bench-") as tmp:
        for model in args.models.split(","):
            flops = forward_flops(args.exe, model, tmp)
            for batch in (int(b) for b in args.batches.split(",")):
                steps = max(1, args.examples // batch)
                for precision in args.precisions.split(","):
                    results.append(measure(args, model, batch, steps, precision, flops, tmp))
                    results[-1].update({"sgemm_peak_gflop_s": peak,
                                        "torch_mm_gflop_s": torch_peak,
                                        "dnnl_sgemm_gflop_s": dnnl_peak, "cpu": cpu,
                                        "syncopt_compute": compute})
    load = os.getloadavg()
    print(f"\n{args.threads} thread(s), median of {args.rounds} alternating rounds; "
          f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'model':>9} {'batch':>6} {'prec':>5} {'syncopt img/s':>14} {'torch img/s':>12} "
          f"{'syncopt/torch':>14} {'vs fp32':>8} {'syncopt GFLOP/s':>16} {'% of sgemm':>10}")
    fp32 = {(r["model"], r["batch"]): r["syncopt_img_s"] for r in results
            if r["precision"] == "fp32"}
    for r in results:
        base = fp32.get((r["model"], r["batch"]))
        vs = f"{r['syncopt_img_s'] / base:.2f}" if base else "-"
        print(f"{r['model']:>9} {r['batch']:>6} {r['precision']:>5} {r['syncopt_img_s']:>14.1f} "
              f"{r['torch_img_s']:>12.1f} {r['ratio']:>14.2f} {vs:>8} "
              f"{r['syncopt_gflop_s']:>16.1f} {100 * r['syncopt_gflop_s'] / peak:>9.0f}%")
    print(f"CPU: {cpu}; syncopt: {compute}; torch bf16 = torch.autocast(\"cpu\", bfloat16)")
    print(f"(PyTorch {results[0]['torch_version']}; one-thread sgemm: torch.mm {torch_peak:.1f}, "
          f"dnnl_sgemm {dnnl_peak:.1f} GFLOP/s)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
