#!/usr/bin/env python3
"""`syncopt export RUN --safetensors` round trip: a model trained briefly by
syncopt on Fashion-MNIST, exported, loaded with the safetensors package into
the PyTorch module scripts/syncopt_torch.py builds from the file (strict
load_state_dict), evaluated by PyTorch on the same test images: its accuracy
must equal syncopt's own final evaluation to 0.1 point, for theta
(model.safetensors vs test_acc) and the EMA (model_ema.safetensors vs
test_acc_ema).

Usage: test_safetensors.py SYNCOPT_EXE REPO MODEL    (cnn | resnet20)
torch and safetensors from the Python running this, or from REPO/.deps/torch
(scripts/setup.sh --tests puts them there: PyPI's torch is about 3 GB with its
CUDA libraries). Exit 0 pass, 1 fail, 77 skip (no torch: the reason printed).
"""
import gzip
import json
import os
import subprocess
import sys
import tempfile

EXE, REPO, MODEL = sys.argv[1], sys.argv[2], sys.argv[3]
sys.path.insert(0, os.path.join(REPO, "scripts"))
if os.path.isdir(os.path.join(REPO, ".deps", "torch")):
    sys.path.insert(0, os.path.join(REPO, ".deps", "torch"))
try:
    import numpy as np
    import torch
    from safetensors import safe_open
except ImportError as e:
    print(f"SKIP: {e.name} is not installed for {sys.executable} nor in {REPO}/.deps/torch "
          "(scripts/setup.sh --tests installs torch and safetensors there from PyPI)")
    sys.exit(77)
import syncopt_torch  # noqa: E402

FAILS = []
FMNIST = "/usr/share/datasets/fashion-mnist"
# Brief training: the two sides must agree, the accuracy need not be high.
SETTINGS = {
    "cnn": ["--set", "train.steps=150", "--set", "data.limit_test=2000"],
    "resnet20": ["--set", "train.steps=40", "--set", "data.limit_test=1000",
                 "--set", "eval.bn_batches=8", "--set", "data.limit_train=8192"],
}


def check(cond, what):
    head, _, detail = what.partition("\n")
    print(("ok   " if cond else "FAIL ") + head)
    if not cond:
        if detail:
            print(detail)
        FAILS.append(head)


def test_images(n):
    with gzip.open(os.path.join(FMNIST, "t10k-images-idx3-ubyte.gz")) as f:
        x = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 1, 28, 28)[:n]
    with gzip.open(os.path.join(FMNIST, "t10k-labels-idx1-ubyte.gz")) as f:
        y = np.frombuffer(f.read(), np.uint8, offset=8)[:n]
    return x, y


def main(tmp):
    torch.set_num_threads(1)
    name = "m-" + MODEL
    p = subprocess.run([EXE, "train", os.path.join(REPO, "configs/fmnist-local.toml"),
                        "--set", f"model.name={MODEL}", "--set", f"run.name={name}",
                        "--set", "run.tensorboard=false", "--set", "eval.every_steps=0"] +
                       SETTINGS[MODEL], cwd=tmp, capture_output=True, text=True, timeout=900)
    check(p.returncode == 0, f"syncopt trains {MODEL} (exit {p.returncode})\n{p.stdout[-1500:]}{p.stderr[-1500:]}")
    if p.returncode:
        return
    run = os.path.join(tmp, "runs", name)
    p = subprocess.run([EXE, "export", run, "--safetensors"], capture_output=True, text=True,
                       timeout=600)
    check(p.returncode == 0, f"syncopt export --safetensors (exit {p.returncode})\n{p.stdout}{p.stderr}")
    if p.returncode:
        return
    last = [json.loads(line) for line in open(os.path.join(run, "eval.jsonl"))][-1]
    n = int(next(a.split("=")[1] for a in SETTINGS[MODEL] if a.startswith("data.limit_test=")))
    x, y = test_images(n)
    for file, key in (("model.safetensors", "test_acc"), ("model_ema.safetensors", "test_acc_ema")):
        path = os.path.join(run, "export", file)
        with safe_open(path, "pt") as f:
            names = set(f.keys())
            shapes = {k: tuple(f.get_slice(k).get_shape()) for k in names}
        model, prep = syncopt_torch.load(path)  # strict: every tensor a parameter or buffer
        model.eval()
        with torch.no_grad():
            pred = torch.cat([model(prep(torch.from_numpy(x[i:i + 250].copy()))).argmax(1)
                              for i in range(0, n, 250)])
        acc = float((pred.numpy() == y).mean())
        want = last[key]
        check(abs(acc - want) <= 0.001,
              f"{MODEL} {file}: PyTorch {100 * acc:.2f} % = syncopt's {key} {100 * want:.2f} % "
              f"(to 0.1 point, {n} test images)")
        if MODEL == "cnn":
            check(shapes.get("conv1.weight") == (32, 1, 3, 3) and shapes.get("fc1.weight") ==
                  (256, 64 * 7 * 7) and "conv1.bias" in names and not any(".g" in k for k in names),
                  f"cnn: conv OIHW, fc [out, in], weight norm folded ({sorted(names)[:6]} ...)")
        else:
            bn = [k for k in names if k.endswith(".running_var")]
            with safe_open(path, "pt") as f:
                var_ok = all(float(f.get_tensor(k).min()) > 0 for k in bn)
                nbt = [f.get_tensor(k) for k in names if k.endswith(".num_batches_tracked")]
            check(len(bn) == 21 and var_ok and all(t.dtype == torch.int64 and t.dim() == 0 for t in nbt),
                  f"resnet20: 21 batch norms (1 + 18 + 2 projections) with running statistics and num_batches_tracked ({len(bn)})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="syncopt-safetensors-") as t:
        main(t)
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
