#!/usr/bin/env python3
"""Plots of one syncopt run: what `syncopt report RUN_DIR` prints, as PNGs.

    python3 scripts/plot.py runs/fmnist-sync [--out DIR]

Writes into the run directory (or --out):
  kth_gradient_cdf.png   CDF of the time to collect the k-th of K gradients of
                         a step, one curve per k (the paper's Figure 3)
  accuracy.png           test accuracy of theta and of its EMA vs wall time and
                         vs steps
  staleness.png          histogram of the staleness of every gradient received
  step_times.png         time between updates at shard 0, over the run
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys
from collections import defaultdict


def read_jsonl(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                sys.exit(f"plot.py: {path}:{n}: not a JSON record ({e})")
    return out


def kth_times(steps, mode):
    """Per k (1-based), the time from a version's start to its k-th gradient."""
    if mode in ("async", "ssp", "softsync"):
        return {}
    shard0 = sorted((r for r in steps if r.get("shard", 0) == 0), key=lambda r: r["step"])
    start = {r["version"]: r["t_start"] for r in shard0}
    per_version = defaultdict(list)
    for r in shard0:
        for g in r["grads"]:
            v = g["version"]
            if v in start:
                per_version[v].append(r["t_start"] + g["arrival_s"] - start[v])
    per_k = defaultdict(list)
    for times in per_version.values():
        for k, t in enumerate(sorted(times), 1):
            per_k[k].append(t)
    return per_k


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dir")
    ap.add_argument("--out", help="where to write the PNGs (default: the run directory)")
    args = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # Debian's matplotlib lives with Debian's python; another python3 may
        # be first on PATH (pyenv, a venv).
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
                os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        sys.exit("plot.py: matplotlib is missing; install it with apt-get install python3-matplotlib")
    run = args.run_dir
    for f in ("steps.jsonl", "summary.json"):
        if not os.path.exists(os.path.join(run, f)):
            sys.exit(f"plot.py: {os.path.join(run, f)} not found: give a finished run directory")
    out = args.out or run
    os.makedirs(out, exist_ok=True)
    steps = read_jsonl(os.path.join(run, "steps.jsonl"))
    evals = read_jsonl(os.path.join(run, "eval.jsonl")) if os.path.exists(
        os.path.join(run, "eval.jsonl")) else []
    with open(os.path.join(run, "summary.json")) as f:
        summary = json.load(f)
    mode = summary.get("mode", "?")
    title = f"{os.path.basename(os.path.normpath(run))}: {mode}, N={summary.get('N')}, " \
            f"b={summary.get('b')}, K={summary.get('workers')}"
    written = []

    per_k = kth_times(steps, mode)
    if per_k:
        fig, ax = plt.subplots(figsize=(6, 4))
        for k in sorted(per_k):
            xs = sorted(per_k[k])
            ys = [(i + 1) / len(xs) for i in range(len(xs))]
            ax.step(xs, ys, where="post", label=f"k={k}")
        ax.set_xlabel("time from the step's start to its k-th gradient (s)")
        ax.set_ylabel("fraction of steps")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        written.append(os.path.join(out, "kth_gradient_cdf.png"))
        fig.tight_layout()
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    if evals:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for ax, key, label in ((a1, "wall_s", "wall time (s)"), (a2, "step", "steps")):
            ax.plot([e[key] for e in evals], [100 * e["test_acc"] for e in evals], "o-",
                    label="theta")
            ax.plot([e[key] for e in evals], [100 * e["test_acc_ema"] for e in evals], "s--",
                    label="EMA of theta")
            ax.set_xlabel(label)
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(title, fontsize=9)
        written.append(os.path.join(out, "accuracy.png"))
        fig.tight_layout()
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    hist = defaultdict(int)
    for r in steps:
        for g in r["grads"]:
            hist[g["staleness"]] += 1
    if hist:
        fig, ax = plt.subplots(figsize=(6, 4))
        ks = sorted(hist)
        ax.bar(ks, [hist[k] for k in ks])
        ax.set_xlabel("staleness (shard version at arrival - version read)")
        ax.set_ylabel("gradients")
        ax.set_title(title, fontsize=9)
        written.append(os.path.join(out, "staleness.png"))
        fig.tight_layout()
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    shard0 = sorted((r for r in steps if r.get("shard", 0) == 0), key=lambda r: r["step"])
    if len(shard0) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        dts = [b["t_apply"] - a["t_apply"] for a, b in zip(shard0, shard0[1:])]
        ax.plot([r["step"] for r in shard0[1:]], dts, ".", markersize=2)
        ax.set_xlabel("step")
        ax.set_ylabel("time since the previous update (s)")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        written.append(os.path.join(out, "step_times.png"))
        fig.tight_layout()
        fig.savefig(written[-1], dpi=120)
        plt.close(fig)

    for w in written:
        print(w)


if __name__ == "__main__":
    main()
