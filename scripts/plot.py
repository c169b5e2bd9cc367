#!/usr/bin/env python3
"""Plots of syncopt runs: what `syncopt report RUN_DIR` prints, as PNGs.

    python3 scripts/plot.py runs/fmnist-sync [--out DIR] [--data FILE]
    python3 scripts/plot.py --compare runs/a runs/b runs/c [--out DIR] [--theta] [--data FILE]

One run writes into the run directory (or --out):
  kth_gradient_cdf.png   CDF of the time to collect the k-th of K gradients of
                         a step, one curve per k (the paper's Figure 3; with
                         more than 12 workers a spread of k that keeps the
                         last few)
  accuracy.png           test accuracy of theta and of its EMA vs time and
                         vs steps
  staleness.png          histogram of the staleness of every gradient received,
                         accepted and dropped apart
  step_times.png         time between updates at shard 0, over the run

--compare overlays several runs, each labelled by its name, mode, N and b
(b = auto with its mean N), into --out (default: compare/ next to the first
run):
  compare_accuracy.png   test accuracy of the EMA of theta (--theta: of
                         theta) vs time and vs steps; the axis keeps the top
                         15 points of accuracy, widened so that every run's
                         best and last evaluations are in view
  compare_step_times.png CDF of the seconds per update
  compare_kth.png        mean and median time to the k-th gradient of a step
                         against k / K (sync and timeout runs)

Times are on each run's own clock: wall, or virtual (train.clock =
"virtual") or simulated (`syncopt simulate`), where an evaluation's time is
its step's t_apply, not eval.jsonl's wall_s (scripts/syncopt_runs.py). A legend
names a run's clock when it is not the wall.

A run that has not completed (no summary.json: running, paused, killed; or
stopped, or failed) is plotted from its records; its title or legend label
says so, and the reason is printed.

--data FILE writes what every figure draws, as JSON: per figure and axes the
limits, scales and each curve or bar set (label, x, y), for a test or for
re-plotting elsewhere.
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import syncopt_runs  # noqa: E402


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


def figure_data(fig):
    """What a figure draws, from matplotlib's objects (not the pixels)."""
    axes = []
    for ax in fig.axes:
        curves = []
        for line in ax.get_lines():
            curves.append({"kind": "line", "label": line.get_label(),
                           "x": [float(v) for v in line.get_xdata()],
                           "y": [float(v) for v in line.get_ydata()]})
        for cont in ax.containers:
            rects = [r for r in cont if hasattr(r, "get_height")]
            curves.append({"kind": "bars", "label": cont.get_label(),
                           "x": [float(r.get_x() + r.get_width() / 2) for r in rects],
                           "y": [float(r.get_height()) for r in rects]})
        axes.append({"xlabel": ax.get_xlabel(), "ylabel": ax.get_ylabel(),
                     "xlim": [float(v) for v in ax.get_xlim()],
                     "ylim": [float(v) for v in ax.get_ylim()],
                     "xscale": ax.get_xscale(), "yscale": ax.get_yscale(),
                     "yticks": [float(v) for v in ax.get_yticks()],
                     "xticks": [float(v) for v in ax.get_xticks()],
                     "yticklabels": [t.get_text() for t in ax.get_yticklabels()],
                     "xticklabels": [t.get_text() for t in ax.get_xticklabels()],
                     "curves": curves})
    return axes


DRAWN = {}  # file name -> figure_data(), for --data


def save(fig, path, written, dpi):
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    written.append(path)
    DRAWN[os.path.basename(path)] = figure_data(fig)


def plot_single(plt, run, out, dpi):
    title = f"{run.name}: {run.mode}, N={run.n}, b={run.b}, K={run.workers}"
    if run.clock != "wall":
        title += f", {run.clock} clock"
    if run.incomplete:
        title += f" ({run.status.upper()}: not completed)"
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

    accepted, dropped = defaultdict(int), defaultdict(int)
    for r in run.steps:
        for g in r["grads"]:
            (accepted if g["accepted"] else dropped)[g["staleness"]] += 1
    if accepted or dropped:
        from matplotlib.ticker import MaxNLocator
        fig, ax = plt.subplots(figsize=(6, 4))
        ks = sorted(set(accepted) | set(dropped))
        ax.bar(ks, [accepted[k] for k in ks], label="accepted (applied)", color="tab:blue")
        ax.bar(ks, [dropped[k] for k in ks], bottom=[accepted[k] for k in ks],
               label="dropped (late)", color="tab:orange")
        # Staleness and counts are whole numbers: no 0.5 ticks.
        if len(ks) <= 20:
            ax.set_xticks(ks)
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("staleness (shard version at arrival - version read)")
        ax.set_ylabel("gradients")
        ax.legend(fontsize=8)
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
        plain_log_ticks(ax)
        ax.grid(alpha=0.3, which="both")
        ax.set_title(title, fontsize=9)
        save(fig, os.path.join(out, "step_times.png"), written, dpi)
        plt.close(fig)
    return written


def plain_log_ticks(ax):
    """Log axes labelled 0.05, 0.1, 2 rather than 5x10^-2, with ticks at
    1, 2 and 5 of each decade labelled when there are few decades (a step
    time axis rarely spans more than two, where decade labels alone leave
    one or two numbers to read the whole axis by)."""
    import math
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    lo, hi = ax.get_ylim()
    if lo > 0 and math.log10(hi / lo) <= 3:
        ax.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    else:
        # Minor labels over many decades would collide.
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)


def accuracy_ylim(series):
    """The accuracy axis of --compare, from each run's accuracies (%): the
    interesting part is near the top, and the first evaluations of a fresh
    model would squash it, so it shows the top 15 points; but never at the
    cost of a run: it reaches down to every run's best and last evaluations,
    so a run far behind is still drawn (the rest of its curve may leave the
    axis at the bottom)."""
    lo = min(a for s in series for a in s)
    hi = max(a for s in series for a in s)
    floor = max(lo, hi - 15)
    for s in series:
        floor = min(floor, max(s), s[-1])
    return floor - 0.5, hi + 0.5


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
        ylim = accuracy_ylim([[100 * a for _, _, a in r.eval_series(ema)] for r, _ in with_evals])
        for ax in (a1, a2):
            ax.set_ylabel(f"test accuracy of the {which} (%)")
            ax.grid(alpha=0.3)
            ax.set_ylim(*ylim)
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
    ap.add_argument("--data", metavar="FILE",
                    help="also write what each figure draws (curves, limits, ticks) as JSON")
    args = ap.parse_args()
    if not args.compare and len(args.run_dirs) != 1:
        ap.error("give one run directory, or --compare RUN_DIR...")
    plt = syncopt_runs.pyplot("plot.py")
    try:
        runs = syncopt_runs.load_runs(args.run_dirs)
    except syncopt_runs.RunError as e:
        sys.exit(f"plot.py: {e}")
    for r in runs:
        if r.incomplete:
            print(f"plot.py: {r.path}: INCOMPLETE ({r.status}): {r.why}", file=sys.stderr)
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
    if args.data:
        with open(args.data, "w") as f:
            json.dump({"runs": [{"path": r.path, "status": r.status, "why": r.why} for r in runs],
                       "figures": DRAWN}, f, indent=1)
        print(args.data)


if __name__ == "__main__":
    main()
