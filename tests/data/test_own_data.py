#!/usr/bin/env python3
"""A researcher's own data, end to end: files written by numpy.save and h5py
(the real writers), trained on by the syncopt binary.

Usage: test_own_data.py SYNCOPT_EXE REPO CASE
Cases:
  npy          uint8 N x C x H x W and float32 N x H x W .npy sets train to a
               learnable task's accuracy (local mode)
  hdf5         the same arrays in one HDF5 file (chunked, gzip, nested names)
               train to the same parameters, bit for bit, as the .npy run
  mpi          a .npy set under mpirun: 1 parameter server, an evaluator, 2 workers
  errors       malformed and missing inputs: exit 65 / 66 naming the file and
               what is wrong; --dry-run shows the model built for the files
  big          a .npy set whose float images (what the in-memory readers
               hold) do not fit the process's data limit trains; the same
               images as IDX, read into memory, fail under that limit
  recipes      docs/data.md's three conversion recipes, run as written (the
               torchvision one against a stand-in that hands out PIL images as
               torchvision does), and training on what they wrote
Exit 0 pass, 1 fail, 77 skip (a module the case needs is missing).
"""
import gzip
import json
import os
import pathlib
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile

EXE, REPO, CASE = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
try:
    import numpy as np
except ImportError:
    print("SKIP: numpy is not installed for", sys.executable)
    sys.exit(77)

FAILS = []


def check(cond, what):
    """Prints the first line of `what`; the rest (a command's output) only
    when the check fails."""
    head, _, detail = what.partition("\n")
    print(("ok   " if cond else "FAIL ") + head)
    if not cond:
        if detail:
            print(detail)
        FAILS.append(head)


def syncopt(args, cwd, env=None, preexec=None, timeout=300):
    p = subprocess.run([EXE] + args, cwd=cwd, capture_output=True, text=True, env=env,
                       preexec_fn=preexec, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


LOCAL = ["--set", "train.mode=local", "--set", "model.name=mlp", "--set", "train.batch=32",
         "--set", "optim.lr=0.1", "--set", "run.tensorboard=false", "--set", "eval.every_steps=0"]


def task(n, seed, c=1, side=12, classes=4):
    """A learnable set: class k lights block k of the image, plus noise; uint8."""
    r = np.random.default_rng(seed)
    y = r.integers(0, classes, n)
    x = r.integers(0, 90, (n, c, side, side)).astype(np.int32)
    half = side // 2
    for k in range(classes):
        rows, cols = (k // 2) * half, (k % 2) * half
        x[y == k, :, rows:rows + half, cols:cols + half] += 150
    return np.clip(x, 0, 255).astype(np.uint8), y.astype(np.int64)


def save_set(d, train=(1024, 1), test=(256, 2), transform=lambda a: a, label_dtype=np.int64):
    d.mkdir(parents=True, exist_ok=True)
    for split, (n, seed) in (("train", train), ("test", test)):
        x, y = task(n, seed)
        np.save(d / f"{split}_images.npy", transform(x))
        np.save(d / f"{split}_labels.npy", y.astype(label_dtype))


def summary(run_dir):
    return json.loads((run_dir / "summary.json").read_text())


def case_npy(tmp):
    save_set(tmp / "u8")
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=npy",
                         "--set", f"data.path={tmp / 'u8'}", "--set", "run.name=u8",
                         "--set", "train.steps=150"] + LOCAL, tmp)
    check(code == 0, f"uint8 N x C x H x W trains (exit {code})\n{out[-2000:]}")
    if code == 0:
        s = summary(tmp / "runs/u8")
        check(s["test_acc"] >= 0.9, f"uint8: test accuracy {s['test_acc']:.3f} >= 0.9 (chance 0.25)")
    # float32 N x H x W (one channel implied), labels uint8.
    save_set(tmp / "f32", transform=lambda a: (a[:, 0].astype(np.float32) / 255.0),
             label_dtype=np.uint8)
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=npy",
                         "--set", f"data.path={tmp / 'f32'}", "--set", "run.name=f32",
                         "--set", "train.steps=150"] + LOCAL, tmp)
    check(code == 0, f"float32 N x H x W trains (exit {code})\n{out[-2000:]}")
    if code == 0:
        s = summary(tmp / "runs/f32")
        check(s["test_acc"] >= 0.9, f"float32: test accuracy {s['test_acc']:.3f} >= 0.9")


def need(module):
    try:
        return __import__(module)
    except ImportError:
        print(f"SKIP: {module} is not installed for {sys.executable} "
              "(scripts/setup.sh --tests installs it)")
        sys.exit(77)


def case_hdf5(tmp):
    h5py = need("h5py")
    save_set(tmp / "npy")
    with h5py.File(tmp / "set.h5", "w") as f:
        for name in ("train_images", "train_labels", "test_images", "test_labels"):
            a = np.load(tmp / "npy" / f"{name}.npy")
            split, kind = name.split("_")
            kw = dict(chunks=(8,) + a.shape[1:], compression="gzip") if a.ndim > 1 else {}
            f.create_dataset(f"{split}/{kind}", data=a, **kw)
    common = ["--set", "train.steps=60"] + LOCAL
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=npy",
                         "--set", f"data.path={tmp / 'npy'}", "--set", "run.name=a"] + common, tmp)
    check(code == 0, f"npy run (exit {code})\n{out[-1500:]}")
    names = [f"--set=data.{s}_{k}={s}/{k}" for s in ("train", "test") for k in ("images", "labels")]
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=hdf5",
                         "--set", f"data.path={tmp / 'set.h5'}", "--set", "run.name=b"] + names +
                        common, tmp)
    check(code == 0, f"hdf5 run, chunked gzip datasets by nested name (exit {code})\n{out[-1500:]}")
    if code == 0:
        a = (tmp / "runs/a/params.f32").read_bytes()
        b = (tmp / "runs/b/params.f32").read_bytes()
        check(len(a) > 0 and a == b, f"hdf5 and npy runs end with the same parameters ({len(a)} bytes)")
        check(summary(tmp / "runs/a")["test_acc"] == summary(tmp / "runs/b")["test_acc"],
              "hdf5 and npy runs: the same test accuracy")


def case_mpi(tmp):
    save_set(tmp / "npy")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.run(["timeout", "-k", "10", "240", "mpirun", "-np", "4", EXE, "train",
                        str(REPO / "configs/smoke.toml"), "--set", "data.name=npy",
                        "--set", f"data.path={tmp / 'npy'}", "--set", "run.name=m",
                        "--set", "train.mode=sync", "--set", "train.backups=0",
                        "--set", "cluster.evaluator=true", "--set", "model.name=mlp",
                        "--set", "train.steps=150", "--set", "optim.lr=0.1",
                        "--set", "run.tensorboard=false"],
                       cwd=tmp, capture_output=True, text=True, env=env)
    out = p.stdout + p.stderr
    check(p.returncode == 0, f"mpirun -np 4 on .npy (exit {p.returncode})\n{out[-2000:]}")
    if p.returncode == 0:
        s = summary(tmp / "runs/m")
        check(s["status"] == "completed" and s["test_acc"] >= 0.9,
              f"mpi: completed, evaluator's test accuracy {s['test_acc']:.3f} >= 0.9")


def case_errors(tmp):
    good = tmp / "good"
    save_set(good, train=(64, 1), test=(16, 2))

    def variant(name, edit):
        d = tmp / name
        shutil.copytree(good, d)
        edit(d)
        return d

    def run(d, *extra, name="npy"):
        return syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", f"data.name={name}",
                        "--set", f"data.path={d}", "--set", f"run.name={d.name}"] + list(extra) +
                       LOCAL + ["--set", "train.steps=5"], tmp)

    cases = [
        (variant("f64", lambda d: np.save(d / "train_images.npy",
                                          np.load(d / "train_images.npy").astype(np.float64))),
         (), 65, ["train_images.npy", "wrong dtype '<f8' for images", "astype('float32')"]),
        (variant("range", lambda d: np.save(d / "test_labels.npy", np.full(16, 7))),
         ("--set", "data.classes=4"), 65,
         ["test_labels.npy", "label out of range at index 0", "data.classes = 4", "found 7"]),
        (variant("neg", lambda d: np.save(d / "train_labels.npy", -np.ones(64, np.int64))),
         (), 65, ["train_labels.npy", "label out of range", "found -1"]),
        (variant("shape", lambda d: np.save(d / "test_images.npy", np.zeros((16, 1, 10, 12), np.uint8))),
         (), 65, ["test_images.npy", "image shape mismatch", "1x12x12", "found 1x10x12"]),
        (variant("count", lambda d: np.save(d / "train_labels.npy", np.zeros(63, np.int64))),
         (), 65, ["train_labels.npy", "count mismatch", "expected 64 labels", "found 63"]),
        (variant("nhwc", lambda d: np.save(d / "train_images.npy", np.zeros((64, 12, 12, 3, 1), np.uint8))),
         (), 65, ["train_images.npy", "wrong shape", "(64, 12, 12, 3, 1)"]),
        (variant("trunc", lambda d: open(d / "train_images.npy", "r+b").truncate(200)),
         (), 65, ["train_images.npy", "truncated"]),
        (variant("missing", lambda d: os.remove(d / "test_labels.npy")),
         (), 66, ["test_labels.npy", "cannot open"]),
    ]
    for d, extra, want, parts in cases:
        code, out = run(d, *extra)
        check(code == want and all(p in out for p in parts),
              f"{d.name}: exit {code} (want {want}), message has {parts}\n{out[-800:]}")
    # A missing HDF5 dataset: 66, naming the file, the name and what it has.
    h5py = need("h5py")
    with h5py.File(tmp / "set.h5", "w") as f:
        f["train/x"] = np.zeros((8, 1, 12, 12), np.uint8)
    code, out = run(tmp / "set.h5", name="hdf5")
    check(code == 66 and "set.h5: no dataset 'train_images'" in out and
          "train/x (8, 1, 12, 12) uint8" in out,
          f"hdf5 dataset not in the file: exit {code} (want 66), lists what it has\n{out[-800:]}")
    # The model is built for the files: 4 classes of 1 x 12 x 12 (smoke.toml
    # alone would say 10 of 1 x 28 x 28).
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--dry-run", "--set",
                         "data.name=npy", "--set", f"data.path={good}"] + LOCAL, tmp)
    check(code == 0 and re.search(r"\b1x12x12\b", out) is not None and
          re.search(r"fc\S*\s.*\b4\b", out) is not None,
          f"--dry-run shows the files' shape and 4 classes (exit {code})\n{out[-1500:]}")


def limit_data(nbytes):
    return lambda: resource.setrlimit(resource.RLIMIT_DATA, (nbytes, nbytes))


def case_big(tmp):
    # 96 Ki images of 1 x 64 x 64 uint8: 384 MiB on disk, 1.5 GiB as the
    # floats an in-memory reader holds. The process may have as much data
    # memory (malloc, anonymous maps) as the file is large: the set must
    # stay in the file. (Measured: the .npy run also passes at 256 MiB, its
    # peak RSS 264 MB; the IDX control fails at 768 MiB with bad_alloc.)
    n, side = 96 * 1024, 64
    d = tmp / "big"
    d.mkdir()
    x = np.lib.format.open_memmap(d / "train_images.npy", "w+", np.uint8, (n, 1, side, side))
    rng = np.random.default_rng(3)
    y = rng.integers(0, 4, n)
    for i in range(0, n, 8192):
        x[i:i + 8192] = rng.integers(0, 256, (min(8192, n - i), 1, side, side), dtype=np.uint8)
    x.flush()
    del x
    np.save(d / "train_labels.npy", y)
    np.save(d / "test_images.npy", np.zeros((64, 1, side, side), np.uint8))
    np.save(d / "test_labels.npy", np.zeros(64, np.int64))
    limit = 384 << 20
    common = ["--set", "train.steps=20"] + LOCAL + ["--set", "model.name=logreg"]
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=npy",
                         "--set", f"data.path={d}", "--set", "run.name=big"] + common, tmp,
                        preexec=limit_data(limit))
    check(code == 0, f"a 384 MiB .npy set (1.5 GiB as floats) trains with {limit >> 20} MiB of "
                     f"data memory (exit {code})\n{out[-1500:]}")
    # The control: the same images as IDX (read into memory) under that limit.
    idx = tmp / "idx"
    idx.mkdir()
    raw = np.load(d / "train_images.npy", mmap_mode="r")
    with open(idx / "train-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, side, side))
        for i in range(0, n, 8192):
            f.write(raw[i:i + 8192].tobytes())
    with open(idx / "train-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + y.astype(np.uint8).tobytes())
    with open(idx / "t10k-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, 64, side, side) + bytes(64 * side * side))
    with open(idx / "t10k-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, 64) + bytes(64))
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=idx",
                         "--set", f"data.path={idx}", "--set", "run.name=idx"] + common, tmp,
                        preexec=limit_data(limit))
    check(code != 0, f"control: the same images as IDX, held in memory, fail under that limit "
                     f"(exit {code})\n{out[-600:]}")


def recipe(name):
    text = (REPO / "docs/data.md").read_text()
    m = re.search(r"<!-- recipe: " + re.escape(name) + r" -->\n```python\n(.*?)```", text, re.S)
    assert m, f"docs/data.md has no recipe {name}"
    return m.group(1)


STUB_TORCHVISION = '''
"""A stand-in for torchvision.datasets.CIFAR10: items are (PIL image, int), as
torchvision hands them out without a transform."""
import numpy as np
from PIL import Image


class CIFAR10:
    def __init__(self, root, train=True, download=False):
        r = np.random.default_rng(1 if train else 2)
        self.data = r.integers(0, 256, (40 if train else 10, 32, 32, 3), dtype=np.uint8)
        self.targets = [int(t) for t in r.integers(0, 10, len(self.data))]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return Image.fromarray(self.data[i]), self.targets[i]
'''


def case_recipes(tmp):
    need("PIL")
    h5py_present = True
    from PIL import Image
    # An image folder: 3 classes, RGB images of varied sizes.
    r = np.random.default_rng(5)
    for split, per in (("train", 6), ("test", 2)):
        for c in ("cat", "dog", "eel"):
            p = tmp / "images" / split / c
            p.mkdir(parents=True)
            for i in range(per):
                a = r.integers(0, 256, (30 + i, 40, 3), dtype=np.uint8)
                Image.fromarray(a).save(p / f"{i}.png")
    run = lambda code, env=None: subprocess.run([sys.executable, "-c", code], cwd=tmp, env=env,
                                                capture_output=True, text=True)
    p = run(recipe("folder-npy"))
    check(p.returncode == 0, f"folder-npy recipe runs\n{p.stderr[-1500:]}")
    x = np.load(tmp / "mydata/train_images.npy")
    yl = np.load(tmp / "mydata/train_labels.npy")
    check(x.shape == (18, 3, 64, 64) and x.dtype == np.uint8 and list(yl) == [0] * 6 + [1] * 6 + [2] * 6,
          f"folder-npy: train images {x.shape} {x.dtype}, labels by class folder")
    first = np.asarray(Image.open(tmp / "images/train/cat/0.png").convert("RGB").resize((64, 64)))
    check(np.array_equal(x[0], first.transpose(2, 0, 1)), "folder-npy: image 0 is cat/0.png, C x H x W")
    code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=npy",
                         "--set", "data.path=mydata", "--set", "run.name=folder",
                         "--set", "train.steps=4", "--set", "train.batch=6"] + LOCAL[:2] +
                        ["--set", "model.name=mlp", "--set", "run.tensorboard=false"], tmp)
    check(code == 0, f"trains on the folder's .npy files (exit {code})\n{out[-1500:]}")
    try:
        import h5py  # noqa: F401
    except ImportError:
        h5py_present = False
        check(False, "h5py is installed (scripts/setup.sh --tests) for the npy-hdf5 recipe")
    if h5py_present:
        p = run(recipe("npy-hdf5"))
        check(p.returncode == 0, f"npy-hdf5 recipe runs\n{p.stderr[-1500:]}")
        code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=hdf5",
                             "--set", "data.path=mydata.h5", "--set", "run.name=h5",
                             "--set", "train.steps=4", "--set", "train.batch=6"] + LOCAL[:2] +
                            ["--set", "model.name=mlp", "--set", "run.tensorboard=false"], tmp)
        check(code == 0, f"trains on the recipe's HDF5 file (exit {code})\n{out[-1500:]}")
        a = (tmp / "runs/folder/params.f32").read_bytes()
        b = (tmp / "runs/h5/params.f32").read_bytes() if code == 0 else b""
        check(a == b, "the HDF5 copy trains to the same parameters as the .npy files")
    stub = tmp / "stub/torchvision"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("from . import datasets\n")
    (stub / "datasets.py").write_text(STUB_TORCHVISION)
    p = run(recipe("torchvision-npy"), env=dict(os.environ, PYTHONPATH=str(tmp / "stub")))
    check(p.returncode == 0, f"torchvision-npy recipe runs (stand-in torchvision)\n{p.stderr[-1500:]}")
    if p.returncode == 0:
        x = np.load(tmp / "cifar10-npy/train_images.npy")
        check(x.shape == (40, 3, 32, 32), f"torchvision-npy: N x C x H x W, found {x.shape}")
        code, out = syncopt(["train", str(REPO / "configs/smoke.toml"), "--set", "data.name=npy",
                             "--set", "data.path=cifar10-npy", "--set", "run.name=tv",
                             "--set", "train.steps=4", "--set", "train.batch=8"] + LOCAL[:2] +
                            ["--set", "model.name=mlp", "--set", "run.tensorboard=false"], tmp)
        check(code == 0, f"trains on the torchvision recipe's files (exit {code})\n{out[-1500:]}")


CASES = {"npy": case_npy, "hdf5": case_hdf5, "mpi": case_mpi, "errors": case_errors,
         "big": case_big, "recipes": case_recipes}

if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="syncopt-own-data-") as t:
        CASES[CASE](pathlib.Path(t))
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    print("all checks passed")
