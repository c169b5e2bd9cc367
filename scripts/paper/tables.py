#!/usr/bin/env python3
"""The result tables of docs/paper.md, as Markdown, from run directories.

    tables.py kth RUN...                      time to the k-th gradient (Fig. 3)
    tables.py tta RUN... --targets 0.9,0.91   time and updates to target test accuracies
    tables.py nb RUN... --target 0.85         the N/b trade-off: updates to a target, s per update
    tables.py adaptive RUN... --target 0.85   fixed b against b = auto, per straggler model
                                              (--json FILE: the same numbers for scripts and tests)
    tables.py shards RUN... --paper 53:17     step time against the shards S, per K and
                                              placement (--json FILE, --plot PNG)
    tables.py layers RUN... [--plot PNG]      async with per-layer updates: staleness by layer,
                                              bottom to top, beside the paper's (--json FILE too)
    tables.py seeds RUN... --epochs 1,2 --seconds 60,120 --target 0.9
                                              runs named NAME-s<seed>, grouped by NAME: the mean
                                              and sd over the seeds of the accuracy at equal
                                              examples (epochs), at equal time, and to a target

Accuracies are of the EMA of theta (theta-bar) unless --theta. Times are on
each run's own clock (wall, virtual or simulated; scripts/syncopt_runs.py says how
an evaluation's time is found on each). "Time to X" is the time of the first
evaluation at or above X, so it is only as fine as eval.every_steps /
eval.every_s; a run that never got there shows "> its last update's time",
a lower bound.
"""
import argparse
import json
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import syncopt_runs  # noqa: E402


def fmt_s(x, digits=3):
    if x is None:
        return "–"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    return f"{x:.{digits}f}"


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def kth_ks(k_max):
    """The k shown for K workers: all of them up to 12, else a spread that
    keeps the last few, where the tail is."""
    if k_max <= 12:
        return list(range(1, k_max + 1))
    picks = {1, k_max // 4, k_max // 2, (3 * k_max) // 4, (9 * k_max) // 10}
    picks.update(range(max(1, k_max - 5), k_max + 1))
    return sorted(p for p in picks if p >= 1)


def cmd_kth(args):
    parts = []
    for run in syncopt_runs.load_runs(args.runs):
        per_k = run.kth_times()
        if not per_k:
            parts.append(f"**{run.label()}**: no time to the k-th gradient in mode {run.mode}.")
            continue
        k_max = max(per_k)
        base = statistics.median(per_k[1])
        rows = []
        for k in kth_ks(k_max):
            xs = per_k.get(k, [])
            if not xs:
                continue
            med = statistics.median(xs)
            rows.append([k, len(xs), fmt_s(statistics.fmean(xs)), fmt_s(med),
                         fmt_s(syncopt_runs.quantile(xs, 0.9)), fmt_s(max(xs)),
                         f"{med / base:.2f}" if base > 0 else "–"])
        parts.append(f"**{run.label()}** ({run.clock} clock, {len(per_k[1])} steps)\n\n" +
                     table(["k", "steps", "mean (s)", "median (s)", "p90 (s)", "max (s)",
                            "median / median of k=1"], rows))
    print("\n\n".join(parts))


def reached(run, target, ema):
    """(time, step) or (None, None)."""
    got = run.time_to_accuracy(target, ema)
    return got if got is not None else (None, None)


def tta_cell(run, target, ema):
    t, step = reached(run, target, ema)
    if t is None:
        span = run.span_s()
        return f"> {fmt_s(span, 1)} s (not reached)" if span is not None else "not reached"
    epoch = run.epoch_at(step)
    return f"{fmt_s(t, 1)} s (step {step}" + (f", {epoch:.2f} ep.)" if epoch is not None else ")")


def final_acc(run, ema):
    series = run.eval_series(ema)
    return f"{100 * series[-1][2]:.2f} %" if series else "–"


def cmd_tta(args):
    ema = not args.theta
    targets = [float(x) for x in args.targets.split(",")]
    header = ["run", "clock"] + [f"time to {100 * t:g} %" for t in targets] + \
        ["final acc.", "updates", "training time (s)", "s per update (p50)"]
    rows = []
    for run in syncopt_runs.load_runs(args.runs):
        st = run.step_times()
        rows.append([run.label(), run.clock] + [tta_cell(run, t, ema) for t in targets] +
                    [final_acc(run, ema), len(run.shard0), fmt_s(run.span_s(), 1),
                     fmt_s(statistics.median(st), 4) if st else "–"])
    which = "theta" if args.theta else "the EMA of theta"
    print(f"Test accuracy of {which}.\n\n" + table(header, rows))


def cmd_nb(args):
    ema = not args.theta
    rows = []
    for run in sorted(syncopt_runs.load_runs(args.runs), key=lambda r: (r.n or 0)):
        if run.mode != "sync":
            continue
        t, step = reached(run, args.target, ema)
        per = run.mean_step_s()
        rows.append([run.n, run.b, step if step is not None else f"> {len(run.shard0)}",
                     fmt_s(per, 4), fmt_s(t, 1) if t is not None else
                     f"> {fmt_s(run.span_s(), 1)}", f"{step * per:.1f}" if step and per else "–",
                     run.name])
    print(f"Target: {100 * args.target:g} % test accuracy of "
          f"{'theta' if args.theta else 'the EMA of theta'}.\n\n" +
          table(["N", "b", "updates to target I(N)", "s per update T(N, b)",
                 "time to target (s)", "I x T (s)", "run"], rows))


def adaptive_summary(runs, target, ema):
    """Per straggler model: every fixed b and auto, time to target averaged
    over seeds (a run that never reached it counts with its last update's
    time and makes the entry a lower bound), the best and worst fixed b and
    auto's ratio to each."""
    groups = defaultdict(lambda: defaultdict(list))
    for run in runs:
        if run.mode != "sync":
            continue
        t, step = reached(run, target, ema)
        groups[run.cfg("stragglers", "model", "none")][str(run.b)].append({
            "run": run.name, "seed": run.cfg("run", "seed"), "time_s": t, "step": step,
            "lower_bound_s": run.span_s() if t is None else None, "mean_n": run.mean_n(),
            "s_per_epoch": run.s_per_epoch(),
            "workers": run.workers})
    out = {}
    for model, by_b in sorted(groups.items()):
        entries = {}
        for b, rs in by_b.items():
            times = [r["time_s"] if r["time_s"] is not None else r["lower_bound_s"] for r in rs]
            steps = [r["step"] for r in rs if r["step"] is not None]
            entries[b] = {
                "time_s": statistics.fmean(times) if all(x is not None for x in times) else None,
                "lower_bound": any(r["time_s"] is None for r in rs),
                "times_s": [r["time_s"] for r in rs],
                "steps": statistics.fmean(steps) if steps else None,
                "mean_n": statistics.fmean(r["mean_n"] for r in rs if r["mean_n"] is not None)
                if any(r["mean_n"] is not None for r in rs) else None,
                "s_per_epoch": statistics.fmean(r["s_per_epoch"] for r in rs)
                if all(r["s_per_epoch"] is not None for r in rs) else None,
                "seeds": len(rs), "runs": [r["run"] for r in rs]}
        fixed = {b: e for b, e in entries.items() if b != "auto" and e["time_s"] is not None}
        res = {"entries": entries}
        if fixed:
            best = min(fixed, key=lambda b: fixed[b]["time_s"])
            worst = max(fixed, key=lambda b: fixed[b]["time_s"])
            res.update(best_b=best, worst_b=worst, best_s=fixed[best]["time_s"],
                       worst_s=fixed[worst]["time_s"],
                       worst_is_lower_bound=fixed[worst]["lower_bound"])
            auto = entries.get("auto")
            if auto and auto["time_s"] is not None:
                res["auto_s"] = auto["time_s"]
                res["auto_over_best"] = auto["time_s"] / fixed[best]["time_s"]
                res["auto_over_worst"] = auto["time_s"] / fixed[worst]["time_s"]
                res["within_5pct_of_best"] = (not auto["lower_bound"] and
                                              res["auto_over_best"] <= 1.05)
            # The noise-free factor of the time to target: seconds per epoch.
            per = {b: e["s_per_epoch"] for b, e in fixed.items() if e["s_per_epoch"]}
            if per and auto and auto.get("s_per_epoch"):
                fastest = min(per, key=per.get)
                res["fastest_epoch_b"] = fastest
                res["auto_epoch_over_fastest"] = auto["s_per_epoch"] / per[fastest]
        out[model] = res
    return out


def cmd_adaptive(args):
    ema = not args.theta
    summary = adaptive_summary(syncopt_runs.load_runs(args.runs), args.target, ema)
    parts = [f"Target: {100 * args.target:g} % test accuracy of "
             f"{'theta' if args.theta else 'the EMA of theta'}; time on each run's clock, "
             "mean over seeds; '>' marks a lower bound (some seed never got there)."]
    for model, res in summary.items():
        entries = res["entries"]
        order = sorted((b for b in entries if b != "auto"), key=int) + \
            (["auto"] if "auto" in entries else [])
        rows = []
        for b in order:
            e = entries[b]
            t = e["time_s"]
            cell = ("> " if e["lower_bound"] else "") + fmt_s(t, 2) if t is not None else "–"
            per_seed = ", ".join(fmt_s(x, 2) if x is not None else "n/r" for x in e["times_s"])
            ratio = f"{t / res['best_s']:.3f}" if t is not None and "best_s" in res else "–"
            spe = fmt_s(e["s_per_epoch"], 2) if e["s_per_epoch"] else "–"
            mark = " (best)" if b == res.get("best_b") else " (worst)" if b == res.get(
                "worst_b") else ""
            rows.append([b + mark, fmt_s(e["mean_n"], 2) if e["mean_n"] is not None else "–",
                         cell, per_seed, fmt_s(e["steps"], 0) if e["steps"] else "–", ratio, spe])
        parts.append(f"**stragglers.model = {model}**\n\n" +
                     table(["b", "mean N", "time to target (s)", "per seed (s)",
                            "updates to target", "time / best fixed b", "s per epoch"],
                           rows))
        if "auto_over_best" in res:
            verdict = "yes" if res["within_5pct_of_best"] else "**NO**"
            worse = ">= " if res["worst_is_lower_bound"] else ""
            gain = 1.0 - res["auto_over_worst"]
            parts.append(
                f"auto / best fixed b (b = {res['best_b']}): **{res['auto_over_best']:.3f}**; "
                f"within 5 %: {verdict}. auto / worst fixed b (b = {res['worst_b']}): "
                f"{res['auto_over_worst']:.3f} (auto {worse}{100 * gain:.0f} % faster).")
            if "auto_epoch_over_fastest" in res:
                parts[-1] += (f" Seconds per epoch, auto / fastest fixed b (b = "
                              f"{res['fastest_epoch_b']}): {res['auto_epoch_over_fastest']:.3f}.")
        else:
            parts.append("auto: no time to the target (not run, or never reached).")
    print("\n\n".join(parts))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(summary, f, indent=1, sort_keys=True)

SHARD_VARIANTS = ("layers, pipelined", "layers, pipelined, shards alone", "layers", "split")


def shard_variant(run):
    """How a simulated run placed and sent its parameters: whole layers
    (pipelined or not; "shards alone": train.agree_shards = false, each
    shard choosing its own N), or equal slices of floats cutting layers
    ("split": sim.param_count, or more shards than the model has layers)."""
    sim = run.summary.get("sim") or {}
    if sim.get("placement") == "floats":
        return "split"
    if not sim.get("pipeline"):
        return "layers"
    alone = s_of(run) > 1 and not sim.get("agree_shards", True)  # one shard agrees with itself
    return "layers, pipelined" + (", shards alone" if alone else "")


def s_of(run):
    return run.summary.get("S", 1)


def shards_summary(runs, paper):
    """{K: {"N", "b", "paper_s", "variants": {variant: {"rows": {S: {mean_s,
    p50_s, max_slice}}, "best_s", "knee_s", "at_paper_over_best"}}}}: the
    mean step time is 1 / steps_per_s (first step's start to last update);
    best_s the S of the least, knee_s the least S within 5 % of it."""
    out = {}
    for run in runs:
        s = run.summary
        if not s or s.get("clock") != "simulated":
            raise syncopt_runs.RunError(f"{run.path}: not a finished simulated run (syncopt simulate)")
        k, shards = s["workers"], s["S"]
        entry = out.setdefault(k, {"N": s["N"], "b": s["b"], "paper_s": paper.get(k),
                                   "variants": {}})
        rate = s.get("steps_per_s") or 0.0
        counts = (s.get("sim") or {}).get("slice_counts") or []
        var = entry["variants"].setdefault(shard_variant(run), {"rows": {}})
        var["rows"][shards] = {"mean_s": 1.0 / rate if rate > 0 else None,
                               "p50_s": s.get("step_time_p50_s"),
                               "max_slice": max(counts) if counts else None}
    for entry in out.values():
        for var in entry["variants"].values():
            timed = {n: r["mean_s"] for n, r in var["rows"].items() if r["mean_s"] is not None}
            if not timed:
                continue
            best = min(timed, key=lambda n: (timed[n], n))
            var["best_s"] = best
            var["knee_s"] = min(n for n, t in timed.items() if t <= 1.05 * timed[best])
            p = entry["paper_s"]
            if p in timed:
                var["at_paper_over_best"] = timed[p] / timed[best]
    return out


def cmd_shards(args):
    # First: without matplotlib here, syncopt_runs.pyplot runs this script again
    # under Debian's python, which must not find half a table printed.
    plt = syncopt_runs.pyplot("tables.py shards") if args.plot else None
    paper = {}
    for item in (args.paper.split(",") if args.paper else []):
        k, _, s = item.partition(":")
        paper[int(k)] = int(s)
    summary = shards_summary(syncopt_runs.load_runs(args.runs), paper)
    parts = []
    for k in sorted(summary):
        entry = summary[k]
        variants = [v for v in SHARD_VARIANTS if v in entry["variants"]]
        all_s = sorted({n for v in variants for n in entry["variants"][v]["rows"]})
        rows = []
        for n in all_s:
            row = [f"**{n}** (paper)" if n == entry["paper_s"] else n]
            for v in variants:
                var = entry["variants"][v]
                r = var["rows"].get(n)
                if r is None or r["mean_s"] is None:
                    row.append("–")
                    continue
                cell = f"{fmt_s(r['mean_s'])} ({fmt_s(r['p50_s'])})"
                row.append(f"**{cell}**" if n == var.get("best_s") else cell)
            first = entry["variants"][variants[0]]["rows"].get(n) if variants else None
            ms = first["max_slice"] if first else None
            row.append(f"{ms / 1e6:.2f}" if ms else "–")
            rows.append(row)
        header = ["S"] + [f"{v}: mean (p50) s" for v in variants] + \
                 [f"largest slice, M floats ({variants[0]})" if variants else "largest slice"]
        parts.append(f"**K = {k}** (N = {entry['N']}, b = {entry['b']}; the least mean in bold)"
                     "\n\n" + table(header, rows))
    best_rows = []
    for k in sorted(summary):
        entry = summary[k]
        for v in SHARD_VARIANTS:
            var = entry["variants"].get(v)
            if not var or "best_s" not in var:
                continue
            ratio = var.get("at_paper_over_best")
            best_rows.append([k, v, entry["paper_s"] if entry["paper_s"] else "–", var["best_s"],
                              var["knee_s"], f"{ratio:.3f}" if ratio else "–"])
    parts.append("Simulated optimum against the paper's choice (knee: the least S within 5 % "
                 "of the best)\n\n" +
                 table(["K", "placement", "paper's S", "best S", "knee S",
                        "step at paper's S / best"], best_rows))
    print("\n\n".join(parts))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({str(k): v for k, v in summary.items()}, f, indent=1, sort_keys=True)
    if args.plot:
        plot_shards(plt, summary, args.plot)


def plot_shards(plt, summary, path):
    """One panel per K: the mean step time against S, a line per placement,
    the paper's S marked."""
    ks = sorted(summary)
    fig, axes = plt.subplots(1, len(ks), figsize=(4.2 * len(ks), 3.6), squeeze=False)
    for ax, k in zip(axes[0], ks):
        entry = summary[k]
        for v, style in zip(SHARD_VARIANTS, ("o-", "x-.", "s--", "^:")):
            var = entry["variants"].get(v)
            if not var:
                continue
            pts = sorted((n, r["mean_s"]) for n, r in var["rows"].items()
                         if r["mean_s"] is not None)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, ms=3, label=v)
        if entry["paper_s"]:
            ax.axvline(entry["paper_s"], color="grey", lw=0.8, ls="--")
            ax.text(entry["paper_s"], ax.get_ylim()[1], " paper", color="grey", va="top",
                    fontsize=8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"K = {k} (N = {entry['N']}, b = {entry['b']})")
        ax.set_xlabel("shards S")
        ax.set_ylabel("mean step time (s, simulated)")
        ax.grid(True, which="both", lw=0.3)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


# The paper's §2 (Inception, asynchronous, each layer updated on arrival):
# mean staleness of the gradients of the top and of the bottom layer.
PAPER_LAYER_STALENESS = {"top": 14.5, "bottom": 39.0}


def layer_summary(run):
    """Per bucket (bottom first): layers, mean, median, p90, max, samples;
    and the bottom (the first layers) and top (the last) means."""
    rows = []
    for shard, b, layers, v in run.layer_staleness():
        rows.append({"shard": shard, "bucket": b, "layers": layers or f"bucket {b}",
                     "mean": statistics.fmean(v), "median": syncopt_runs.quantile(v, 0.5),
                     "p90": syncopt_runs.quantile(v, 0.9), "max": max(v), "samples": len(v)})
    if not rows:
        return None
    return {"rows": rows, "bottom": rows[0]["mean"], "top": rows[-1]["mean"],
            "ratio": rows[0]["mean"] / rows[-1]["mean"] if rows[-1]["mean"] > 0 else None}


def plot_layers(runs_and_summaries, path):
    plt = syncopt_runs.pyplot("tables.py")
    fig, (ax, rel) = plt.subplots(1, 2, figsize=(11, 4))
    for run, s in runs_and_summaries:
        x = list(range(len(s["rows"])))
        ax.plot(x, [r["mean"] for r in s["rows"]], marker="o", ms=3, label=run.label())
        ax.fill_between(x, [r["median"] for r in s["rows"]], [r["p90"] for r in s["rows"]],
                        alpha=0.2)
        if s["top"] > 0:
            rel.plot([i / max(1, len(x) - 1) for i in x], [r["mean"] / s["top"] for r in s["rows"]],
                     marker="o", ms=3, label=f"here: {run.label()}")
    paper = PAPER_LAYER_STALENESS
    # The paper gives the two ends only: markers, no line between them.
    rel.plot([0, 1], [paper["bottom"] / paper["top"], 1.0], "ks", linestyle="none",
             label="paper, Inception (§2): bottom 39, top 14.5 (ends only)")
    ax.set_xlabel("layer with parameters (0 = the first, bottom)")
    ax.set_ylabel("staleness of applied gradients (updates)")
    ax.set_title("mean (line), median to p90 (band)")
    ax.legend(fontsize=7)
    rel.set_xlabel("depth (0 = bottom layer, 1 = top layer)")
    rel.set_ylabel("mean staleness / the top layer's")
    rel.set_title("relative to the top layer")
    rel.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def cmd_layers(args):
    parts, done, figures = [], [], {}
    for run in syncopt_runs.load_runs(args.runs):
        s = layer_summary(run)
        if s is None:
            parts.append(f"**{run.label()}**: no per-layer staleness (needs train.mode = async or "
                         "ssp with exchange.pipeline = true and more than one bucket).")
            continue
        done.append((run, s))
        figures[run.path] = s
        rows = [[r["bucket"] if r["shard"] == 0 else f"{r['shard']}/{r['bucket']}", r["layers"],
                 f"{r['mean']:.2f}", fmt_s(r["median"], 1), fmt_s(r["p90"], 1), r["max"],
                 r["samples"]] for r in s["rows"]]
        parts.append(f"**{run.label()}** ({run.workers} workers, {len(run.shard0)} updates): "
                     "staleness of every applied gradient per layer, bottom (the first layer) to "
                     "top\n\n" + table(["bucket", "layers", "mean", "median", "p90", "max",
                                         "gradients"], rows))
    if done:
        paper = PAPER_LAYER_STALENESS
        rows = [["the paper (Inception, §2)", paper["bottom"], paper["top"],
                 f"{paper['bottom'] / paper['top']:.2f}"]]
        for run, s in done:
            rows.append([f"here: {run.label()}", f"{s['bottom']:.2f}", f"{s['top']:.2f}",
                         f"{s['ratio']:.2f}" if s["ratio"] else "–"])
        parts.append("Bottom against top layer, mean staleness:\n\n" +
                     table(["", "bottom layer", "top layer", "bottom / top"], rows))
    print("\n\n".join(parts))
    if args.plot and done:
        plot_layers(done, args.plot)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


def interpolate(points, x):
    """The value at x of the piecewise-linear curve through (x, y) points,
    or None outside them."""
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def mean_sd(xs):
    """'mean ± sd (n)' of the values that are not None; '–' if none."""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "–"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.fmean(xs):.2f} ± {sd:.2f}" + (f" ({len(xs)})" if len(xs) > 1 else "")


def seed_group(path):
    name = os.path.basename(os.path.normpath(path))
    base, _, seed = name.rpartition("-s")
    return (base, int(seed)) if base and seed.isdigit() else (name, 0)


def cmd_seeds(args):
    ema = not args.theta
    epochs = [float(x) for x in args.epochs.split(",")] if args.epochs else []
    seconds = [float(x) for x in args.seconds.split(",")] if args.seconds else []
    groups = defaultdict(list)
    for path in args.runs:
        base, seed = seed_group(path)
        groups[base].append((seed, syncopt_runs.load(path)))
    header = (["runs", "seeds"] + [f"acc. at {e:g} ep. (%)" for e in epochs] +
              [f"acc. at {t:g} s (%)" for t in seconds] +
              [f"epochs to {100 * args.target:g} %", f"s to {100 * args.target:g} %",
               "final acc. (%)", "s per epoch"])
    rows = []
    for base, runs in groups.items():
        runs.sort(key=lambda x: x[0])
        by_epoch, by_time, final, ep_to, s_to, spe = [], [], [], [], [], []
        for _seed, run in runs:
            series = run.eval_series(ema)
            ep = {e["step"]: e["epoch"] for e in run.evals if "epoch" in e}
            by_epoch.append([interpolate([(ep[st], 100 * a) for st, _t, a in series if st in ep], e)
                             for e in epochs])
            by_time.append([interpolate([(t, 100 * a) for _st, t, a in series], x) for x in seconds])
            final.append(100 * series[-1][2] if series else None)
            got = run.time_to_accuracy(args.target, ema)
            s_to.append(got[0] if got else None)
            ep_to.append(run.epoch_at(got[1]) if got else None)
            spe.append(run.s_per_epoch())
        seeds = ",".join(str(sd) for sd, _r in runs)
        reached = sum(1 for x in s_to if x is not None)
        rows.append([base, seeds] + [mean_sd([r[i] for r in by_epoch]) for i in range(len(epochs))] +
                    [mean_sd([r[i] for r in by_time]) for i in range(len(seconds))] +
                    [mean_sd(ep_to) + ("" if reached == len(runs) else f", {reached} of {len(runs)} reached"),
                     mean_sd(s_to), mean_sd(final), mean_sd(spe)])
    which = "theta" if args.theta else "the EMA of theta"
    print(f"Test accuracy of {which}: mean ± sd over the seeds (runs counted in brackets); "
          "between evaluations, linear.\n\n" + table(header, rows))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("kth", help="time to the k-th gradient of a step (Fig. 3)")
    p.add_argument("runs", nargs="+")
    p.set_defaults(fn=cmd_kth)
    p = sub.add_parser("tta", help="time to target accuracies")
    p.add_argument("runs", nargs="+")
    p.add_argument("--targets", default="0.9,0.91,0.92")
    p.add_argument("--theta", action="store_true", help="theta's accuracy, not its EMA's")
    p.set_defaults(fn=cmd_tta)
    p = sub.add_parser("nb", help="the N/b trade-off")
    p.add_argument("runs", nargs="+")
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--theta", action="store_true")
    p.set_defaults(fn=cmd_nb)
    p = sub.add_parser("adaptive", help="fixed b against b = auto")
    p.add_argument("runs", nargs="+")
    p.add_argument("--target", type=float, required=True)
    p.add_argument("--theta", action="store_true")
    p.add_argument("--json", help="also write the numbers as JSON here")
    p.set_defaults(fn=cmd_adaptive)
    p = sub.add_parser("shards", help="step time against the shards S (simulated runs)")
    p.add_argument("runs", nargs="+")
    p.add_argument("--paper", help="the paper's S per K, as K:S,K:S (marked in the table)")
    p.add_argument("--json", help="also write the numbers as JSON here")
    p.add_argument("--plot", help="also draw the step times against S into this PNG")
    p.set_defaults(fn=cmd_shards)
    p = sub.add_parser("layers", help="staleness by layer (async, per-layer updates)")
    p.add_argument("runs", nargs="+")
    p.add_argument("--plot", help="also draw the figure into this PNG")
    p.add_argument("--json", help="also write the numbers as JSON here")
    p.set_defaults(fn=cmd_layers)
    p = sub.add_parser("seeds", help="mean and sd over seeds at equal examples and equal time")
    p.add_argument("runs", nargs="+")
    p.add_argument("--epochs", default="", help="epochs of accepted examples, e.g. 1,2,4")
    p.add_argument("--seconds", default="", help="seconds on the runs' clock, e.g. 60,120")
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--theta", action="store_true")
    p.set_defaults(fn=cmd_seeds)
    args = ap.parse_args()
    try:
        args.fn(args)
    except syncopt_runs.RunError as e:
        sys.exit(f"tables.py: {e}")


if __name__ == "__main__":
    main()
