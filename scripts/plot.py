#!/usr/bin/env python3
"""Plots of syncopt runs: what `syncopt report RUN_DIR` prints, as PNGs.

    python3 scripts/plot.py runs/fmnist-sync [--out DIR]
    python3 scripts/plot.py --compare runs/a runs/b runs/c [--out DIR] [--theta]

One run writes into the run directory (or --out):
  kth_gradient_cdf.png   CDF of the time to collect the k-th of K gradients of
                         a step, one curve per k (the paper's Figure 3; with
                         more than 12 workers a spread of k that keeps the
                         last few)
  accuracy.png           test accuracy of theta and of its EMA vs time and
                         vs steps
  staleness.png          histogram of the staleness of every gradient received
  step_times.png         time between updates at shard 0, over the run

--compare overlays several runs, each labelled by its name, mode, N and b
(b = auto with its mean N), into --out (default: compare/ next to the first
run):
  compare_accuracy.png   test accuracy of the EMA of theta (--theta: of
                         theta) vs time and vs steps
  compare_step_times.png CDF of the seconds per update
  compare_kth.png        mean and median time to the k-th gradient of a step
                         against k / K (sync and timeout runs)

Times are on each run's own clock: wall, or virtual (train.clock =
"virtual") or simulated (`syncopt simulate`), where an evaluation's time is
its step's t_apply, not eval.jsonl's wall_s (scripts/runlib.py). A legend
names a run's clock when it is not the wall.
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runlib  # noqa: E402


def kth_subset(k_max):
    if k_max <= 12:
        return list(range(1, k_max + 1))
    picks = {1, k_max // 4, k_max // 2, (3 * k_max) // 4, (9 * k_max) // 10}
    picks.update(range(max(1, k_max - 4), k_max + 1))
    return sorted(picks)


def time_axis_label(runs):
    clocks = sorted({r.clock for r in runs})
    if clocks == ["wall"]:
        return "wall time (s)"
    return "time (s; " + " / ".join(clocks) + " clock)"


def save(fig, path, written, dpi):
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    written.append(path)


def plot_single(plt, run, out, dpi):
    title = f"{run.name}: {run.mode}, N={run.n}, b={run.b}, K={run.workers}"
    if run.clock != "wall":
        title += f", {run.clock} clock"
    written = []

    per_k = run.kth_times()
    if per_k:
        fig, ax = plt.subplots(figsize=(6, 4))
        ks = kth_subset(max(per_k))
        cmap = plt.get_cmap("viridis")
        for i, k in enumerate(ks):
            xs = sorted(per_k.get(k, []))
            if not xs:
                continue
            ys = [(j + 1) / len(xs) for j in range(len(xs))]
            color = cmap(i / max(1, len(ks) - 1)) if len(ks) > 10 else None
            ax.step(xs, ys, where="post", label=f"k={k}", color=color)
        ax.set_xlabel(f"time from the step's start to its k-th gradient (s, {run.clock} clock)")
        ax.set_ylabel("fraction of steps")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=7, ncol=2 if len(ks) > 8 else 1)
        ax.grid(alpha=0.3)
        save(fig, os.path.join(out, "kth_gradient_cdf.png"), written, dpi)
        plt.close(fig)

    if run.evals:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
        for ema, style, label in ((False, "o-", "theta"), (True, "s--", "EMA of theta")):
            series = run.eval_series(ema)
            a1.plot([t for _, t, _ in series], [100 * a for _, _, a in series], style, label=label)
            a2.plot([s for s, _, _ in series], [100 * a for _, _, a in series], style, label=label)
        a1.set_xlabel(time_axis_label([run]))
        a2.set_xlabel("steps")
        for ax in (a1, a2):
            ax.set_ylabel("test accuracy (%)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.suptitle(title, fontsize=9)
        save(fig, os.path.join(out, "accuracy.png"), written, dpi)
        plt.close(fig)

    hist = defaultdict(int)
    for r in run.steps:
        for g in r["grads"]:
            hist[g["staleness"]] += 1
    if hist:
        fig, ax = plt.subplots(figsize=(6, 4))
        ks = sorted(hist)
        ax.bar(ks, [hist[k] for k in ks])
        ax.set_xlabel("staleness (shard version at arrival - version read)")
        ax.set_ylabel("gradients")
        ax.set_title(title, fontsize=9)
        save(fig, os.path.join(out, "staleness.png"), written, dpi)
        plt.close(fig)

    shard0 = run.shard0
    if len(shard0) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        dts = [b["t_apply"] - a["t_apply"] for a, b in zip(shard0, shard0[1:])]
        ax.plot([r["step"] for r in shard0[1:]], dts, ".", markersize=2)
        ax.set_xlabel("step")
        ax.set_ylabel(f"time since the previous update (s, {run.clock} clock)")
        ax.set_yscale("log")
        ax.set_title(title, fontsize=9)
        save(fig, os.path.join(out, "step_times.png"), written, dpi)
        plt.close(fig)
    return written


def plain_log_ticks(ax):
    """Log axes labelled 0.05, 0.1, 2 rather than 5x10^-2."""
    from matplotlib.ticker import FormatStrFormatter, NullFormatter
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    lo, hi = ax.get_ylim()
    # Minor labels only where there are few decades to label, or they collide.
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g") if hi < 10 * lo else NullFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)


def plot_compare(plt, runs, out, ema, dpi, labels):
    written = []
    which = "EMA of theta" if ema else "theta"
    # One colour per run in every figure, whichever figures a run is in.
    cycle = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colors = {id(r): cycle[i % len(cycle)] for i, r in enumerate(runs)}

    with_evals = [(r, lab) for r, lab in zip(runs, labels) if r.eval_series(ema)]
    if with_evals:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
        for r, lab in with_evals:
            series = r.eval_series(ema)
            a1.plot([t for _, t, _ in series], [100 * a for _, _, a in series], ".-",
                    color=colors[id(r)], label=lab)
            a2.plot([s for s, _, _ in series], [100 * a for _, _, a in series], ".-",
                    color=colors[id(r)], label=lab)
        a1.set_xlabel(time_axis_label([r for r, _ in with_evals]))
        a2.set_xlabel("steps (updates at shard 0)")
        lo = min(100 * a for r, _ in with_evals for _, _, a in r.eval_series(ema))
        hi = max(100 * a for r, _ in with_evals for _, _, a in r.eval_series(ema))
        for ax in (a1, a2):
            ax.set_ylabel(f"test accuracy of the {which} (%)")
            ax.grid(alpha=0.3)
            # The interesting part is near the top; the first evaluations
            # of a fresh model would squash it.
            ax.set_ylim(max(lo, hi - 15) - 0.5, hi + 0.5)
        a2.legend(fontsize=7, loc="lower right")
        save(fig, os.path.join(out, "compare_accuracy.png"), written, dpi)
        plt.close(fig)

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    any_steps = False
    for r, lab in zip(runs, labels):
        xs = sorted(x for x in r.step_times() if x > 0)
        if not xs:
            continue
        any_steps = True
        ax.step(xs, [(i + 1) / len(xs) for i in range(len(xs))], where="post", label=lab,
                color=colors[id(r)])
    if any_steps:
        ax.set_xscale("log")
        ax.set_xlabel(f"seconds per update at shard 0 ({time_axis_label(runs)[:-4].strip()})")
        ax.set_ylabel("fraction of updates")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        save(fig, os.path.join(out, "compare_step_times.png"), written, dpi)
    plt.close(fig)

    with_kth = [(r, lab, r.kth_times()) for r, lab in zip(runs, labels)]
    with_kth = [(r, lab, pk) for r, lab, pk in with_kth if pk]
    if with_kth:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
        for r, lab, pk in with_kth:
            k_max = max(pk)
            ks = sorted(pk)
            fr = [k / k_max for k in ks]
            marker = "o" if k_max <= 12 else None
            a1.plot(fr, [statistics.fmean(pk[k]) for k in ks], marker=marker,
                    color=colors[id(r)], label=lab)
            a2.plot(fr, [statistics.median(pk[k]) for k in ks], marker=marker,
                    color=colors[id(r)], label=lab)
        for ax, what in ((a1, "mean"), (a2, "median")):
            ax.set_xlabel("k / K (the k-th of K gradients of a step)")
            ax.set_ylabel(f"{what} time to the k-th gradient (s)")
            ax.set_yscale("log")
            plain_log_ticks(ax)
            ax.grid(alpha=0.3, which="both")
        a1.legend(fontsize=7)
        save(fig, os.path.join(out, "compare_kth.png"), written, dpi)
        plt.close(fig)
    return written


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    ap.add_argument("--compare", action="store_true",
                    help="overlay the runs (one figure set for all)")
    ap.add_argument("--out", help="where to write the PNGs (default: the run directory; "
                    "with --compare, compare/ next to the first run)")
    ap.add_argument("--theta", action="store_true",
                    help="--compare: the accuracy of theta, not of its EMA")
    ap.add_argument("--labels", help="--compare: the legend's labels, comma-separated, one "
                    "per run (default: name, mode, N, b)")
    ap.add_argument("--dpi", type=int, default=120)
    args = ap.parse_args()
    if not args.compare and len(args.run_dirs) != 1:
        ap.error("give one run directory, or --compare RUN_DIR...")
    plt = runlib.pyplot("plot.py")
    try:
        runs = runlib.load_runs(args.run_dirs)
    except runlib.RunError as e:
        sys.exit(f"plot.py: {e}")
    if args.compare:
        labels = [r.label() for r in runs]
        if args.labels:
            labels = args.labels.split(",")
            if len(labels) != len(runs):
                ap.error(f"--labels has {len(labels)} labels for {len(runs)} runs")
        out = args.out or os.path.join(os.path.dirname(runs[0].path), "compare")
        os.makedirs(out, exist_ok=True)
        written = plot_compare(plt, runs, out, not args.theta, args.dpi, labels)
    else:
        out = args.out or runs[0].path
        os.makedirs(out, exist_ok=True)
        written = plot_single(plt, runs[0], out, args.dpi)
    for w in written:
        print(w)


if __name__ == "__main__":
    main()
