#!/usr/bin/env python3
"""Tests of what the paper scripts compute (CTest label `paper`), on tiny
synthetic run directories whose answers are known:

    test_paper.py numbers          scripts/syncopt_runs.py and scripts/paper/tables.py
    test_paper.py plots            scripts/plot.py --compare and single-run plots, checked
                                   from what the figures draw (--data), not their pixels
                                   (exit 77 without matplotlib: skipped, never passed)
    test_paper.py sweeps SYNCOPT   every line of configs/sweeps/paper-*.txt is a valid
                                   `syncopt train` command line (--dry-run), names unique
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, os.path.join(ROOT, "scripts", "paper"))
import syncopt_runs  # noqa: E402
import tables  # noqa: E402

FAILURES = []


def check(cond, what):
    if not cond:
        FAILURES.append(what)
        print(f"FAIL: {what}")


def close(a, b, tol=1e-9):
    return a is not None and b is not None and abs(a - b) <= tol


def write_run(root, name, summary, steps, evals, config=""):
    d = os.path.join(root, name)
    os.makedirs(d)
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump(summary, f)
    with open(os.path.join(d, "steps.jsonl"), "w") as f:
        for r in steps:
            f.write(json.dumps(r) + "\n")
    if evals is not None:
        with open(os.path.join(d, "eval.jsonl"), "w") as f:
            for e in evals:
                f.write(json.dumps(e) + "\n")
    with open(os.path.join(d, "config.toml"), "w") as f:
        f.write(config)
    return d


def grad(worker, arrival, version, accepted=True):
    return {"worker": worker, "arrival_s": arrival, "version": version, "accepted": accepted,
            "staleness": 0}


def virtual_run(root, name, step_s, accs, b="1", model="bernoulli", seed=1, ns=None):
    """A sync run on the virtual clock: update i (1-based) takes step_s[i-1]
    virtual seconds; an evaluation after every update with accuracy
    accs[i-1] and a wall_s that is deliberately unrelated (1000 + i)."""
    steps, t = [], 0.0
    for i, dt in enumerate(step_s, 1):
        r = {"step": i, "shard": 0, "version": i - 1, "t_start": t, "t_apply": t + dt,
             "clock": "virtual", "used": 2,
             "grads": [grad(0, 0.25 * dt, i - 1), grad(1, 0.5 * dt, i - 1),
                       grad(2, dt, i - 1, False)]}
        if ns is not None:
            r["n"] = ns[i - 1]
        steps.append(r)
        t += dt
    evals = [{"step": i, "wall_s": 1000.0 + i, "test_acc": a - 0.01, "test_acc_ema": a}
             for i, a in enumerate(accs, 1)]
    cfg = (f'[run]\nseed = {seed}\n[train]\nmode = "sync"\nclock = "virtual"\nbackups = '
           f'{json.dumps(b) if b == "auto" else b}\n[stragglers]\nmodel = "{model}"\n')
    return write_run(root, name, {"mode": "sync", "N": 2, "b": 0 if b == "auto" else int(b),
                                  "workers": 3, "clock": "virtual", "status": "completed"},
                     steps, evals, cfg)


def test_partial(root):
    """Runs without summary.json are read from their records, with the verdict."""
    d = virtual_run(root, "partial", [1.0, 1.0, 1.0], [0.5, 0.6, 0.7])
    os.remove(os.path.join(d, "summary.json"))
    # Killed mid-write: a torn last line is left out, not an error.
    with open(os.path.join(d, "steps.jsonl"), "a") as f:
        f.write('{"step": 4, "shard": 0, "t_st')
    run = syncopt_runs.Run(d)
    check(len(run.shard0) == 3, f"the torn record is left out: {len(run.shard0)} records")
    check(run.status == "unknown" and run.incomplete and "no summary.json (and no run.json)" in
          run.why, f"no run.json: {run.status}: {run.why}")
    check(run.mode == "sync" and run.n == 2 and run.workers == 3 and run.b == 1,
          f"mode, N, workers, b from config and records: {run.mode} {run.n} {run.workers} {run.b}")
    # run.json names this host and a pid that is not syncopt: killed.
    import socket
    with open(os.path.join(d, "run.json"), "w") as f:
        json.dump({"launches": [{"host": socket.gethostname(), "pid": os.getpid(),
                                 "layout": {"mode": "sync", "workers": 5, "N": 4, "b": 1}}]}, f)
    os.makedirs(os.path.join(d, "checkpoints"))
    with open(os.path.join(d, "checkpoints", "latest"), "w") as f:
        f.write("2\n")
    run = syncopt_runs.Run(d)
    check(run.status == "killed" and "is gone" in run.why and "step 2" in run.why,
          f"killed: {run.status}: {run.why}")
    check(run.workers == 5 and run.n == 4 and run.b == 1, "layout from run.json")
    check("killed" in run.label(), f"the label says so: {run.label()}")
    # A stopped run has a summary that says so.
    with open(os.path.join(d, "summary.json"), "w") as f:
        json.dump({"mode": "sync", "status": "stopped", "stopped": "SIGTERM at step 3",
                   "exit_code": 75}, f)
    run = syncopt_runs.Run(d)
    check(run.status == "stopped" and "SIGTERM at step 3" in run.why, f"stopped: {run.why}")


def test_numbers(root):
    # Virtual clock: time to accuracy is the t_apply of the evaluated step.
    d = virtual_run(root, "v", [1.0, 2.0, 0.5, 4.0], [0.5, 0.8, 0.9, 0.95])
    run = syncopt_runs.Run(d)
    check(run.clock == "virtual", "clock read from summary.json")
    got = run.time_to_accuracy(0.85)
    check(got is not None and close(got[0], 3.5) and got[1] == 3,
          f"virtual time to 0.85 is t_apply of step 3 (3.5 s), got {got}")
    got = run.time_to_accuracy(0.895, ema=False)
    check(got is not None and close(got[0], 7.5) and got[1] == 4,
          f"theta (0.01 lower) reaches 0.895 at step 4 (7.5 s), got {got}")
    check(run.time_to_accuracy(0.99) is None, "an accuracy never reached gives None")
    check(close(run.mean_step_s(), (7.5 - 1.0) / 3), "mean step time after the first update")
    check(close(run.span_s(), 7.5), "span is the last t_apply")
    kth = run.kth_times()
    check(sorted(kth) == [1, 2, 3] and close(kth[3][3], 4.0) and close(kth[1][1], 0.5),
          f"time to the k-th gradient per version, got {kth}")

    # An evaluation at step 0 sits at time 0; one of a step without a record is skipped.
    with open(os.path.join(d, "eval.jsonl"), "a") as f:
        f.write(json.dumps({"step": 0, "wall_s": 5.0, "test_acc": 0.1, "test_acc_ema": 0.1}) + "\n")
        f.write(json.dumps({"step": 9, "wall_s": 6.0, "test_acc": 1, "test_acc_ema": 1}) + "\n")
    series = syncopt_runs.Run(d).eval_series()
    check(series[0] == (0, 0.0, 0.1) and all(s != 9 for s, _, _ in series),
          f"step 0 at time 0, unknown steps left out: {series}")

    # Wall clock: eval.jsonl's wall_s; and a late gradient recorded during the
    # next step counts for its own version in the time to the k-th.
    steps = [{"step": 1, "shard": 0, "version": 0, "t_start": 0.0, "t_apply": 1.0,
              "grads": [grad(0, 0.4, 0), grad(1, 1.0, 0)]},
             {"step": 2, "shard": 0, "version": 1, "t_start": 1.0, "t_apply": 3.0,
              "grads": [grad(2, 0.5, 0, False), grad(0, 1.0, 1), grad(1, 2.0, 1)]},
             {"step": 1, "shard": 1, "version": 0, "t_start": 0.0, "t_apply": 9.0, "grads": []}]
    evals = [{"step": 1, "wall_s": 1.25, "test_acc": 0.7, "test_acc_ema": 0.7},
             {"step": 2, "wall_s": 3.5, "test_acc": 0.9, "test_acc_ema": 0.9}]
    w = syncopt_runs.Run(write_run(root, "w", {"mode": "sync", "N": 2, "b": 1, "workers": 3,
                                         "status": "completed"}, steps, evals))
    check(w.clock == "wall", "no clock field: wall")
    got = w.time_to_accuracy(0.8)
    check(got == (3.5, 2), f"wall time to accuracy is eval's wall_s, got {got}")
    kth = w.kth_times()
    check(close(kth[3][0], 1.5) and len(kth[3]) == 1 and close(kth[1][1], 1.0),
          f"a late gradient counts for its own version: {kth}")
    check(close(w.span_s(), 3.0), "shard 0 only")

    # The adaptive table: best, worst, auto's ratios, averaged over seeds;
    # a run that never reached the target makes a lower bound.
    a = os.path.join(root, "adaptive")
    os.makedirs(a)
    accs = [0.5, 0.9, 0.95, 0.96]
    runs = [virtual_run(a, "b0-s1", [2.0] * 4, accs, "0"),
            virtual_run(a, "b0-s2", [3.0] * 4, accs, "0", seed=2),      # b0: 4 and 6 -> 5
            virtual_run(a, "b1-s1", [1.0] * 4, accs, "1"),
            virtual_run(a, "b1-s2", [1.0] * 4, accs, "1", seed=2),      # b1: 2 -> best
            virtual_run(a, "b2-s1", [5.0] * 4, [0.5] * 4, "2"),          # never: > 20
            virtual_run(a, "auto-s1", [1.05] * 4, accs, "auto", ns=[2, 2, 3, 3]),
            virtual_run(a, "auto-s2", [1.05] * 4, accs, "auto", seed=2, ns=[2, 2, 2, 2]),
            virtual_run(a, "p-b0-s1", [1.0] * 4, accs, "0", model="pareto")]
    s = tables.adaptive_summary(syncopt_runs.load_runs(runs), 0.85, True)
    b = s["bernoulli"]
    check(b["best_b"] == "1" and close(b["best_s"], 2.0), f"best fixed b: {b.get('best_b')}")
    check(b["worst_b"] == "2" and close(b["worst_s"], 20.0) and b["worst_is_lower_bound"],
          f"worst fixed b, a lower bound: {b.get('worst_b')}, {b.get('worst_s')}")
    check(close(b["entries"]["0"]["time_s"], 5.0), "mean over seeds")
    check(close(b["auto_over_best"], 1.05) and b["within_5pct_of_best"],
          f"auto / best = 1.05 is within 5 %: {b.get('auto_over_best')}")
    check(close(b["auto_over_worst"], 2.1 / 20.0), "auto / worst")
    check(close(b["entries"]["auto"]["mean_n"], 2.25), "auto's mean N from the records' n")
    check("pareto" in s and "auto_over_best" not in s["pareto"], "models kept apart")
    # Slightly slower auto is not within 5 %.
    runs.append(virtual_run(a, "auto-s3", [1.2] * 4, accs, "auto", seed=3))
    s = tables.adaptive_summary(syncopt_runs.load_runs(runs), 0.85, True)
    check(not s["bernoulli"]["within_5pct_of_best"],
          f"auto / best = {s['bernoulli']['auto_over_best']:.3f} is not within 5 %")

    # The command lines print their tables.
    for args in (["kth", d], ["tta", d, runs[0], "--targets", "0.85,0.99"],
                 ["nb", runs[0], runs[2], "--target", "0.85"],
                 ["adaptive"] + runs + ["--target", "0.85", "--json", os.path.join(a, "s.json")]):
        p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paper", "tables.py")]
                           + args, capture_output=True, text=True)
        check(p.returncode == 0 and "|" in p.stdout, f"tables.py {args[0]}: {p.stderr}")
        if args[0] == "tta":
            check("3.5 s (step 3)" in p.stdout and "not reached" in p.stdout,
                  f"tta cells: {p.stdout}")
        if args[0] == "adaptive":
            check("**NO**" in p.stdout, "a miss of the 5 % bound is said plainly")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paper", "tables.py"),
                        "kth", os.path.join(root, "nope")], capture_output=True, text=True)
    check(p.returncode != 0 and "summary.json not found" in p.stderr, "a missing run is an error")
    test_layers(root)


def test_layers(root):
    """Staleness by layer (scripts/paper/layer_staleness.sh): three buckets,
    four async updates; the bottom bucket (0) staler than the top (2)."""
    per_step = [[0, 0, 0], [2, 1, 0], [4, 2, 1], [6, 3, 1]]
    steps = []
    for i, layers in enumerate(per_step):
        g = grad(i % 2, 0.01, i - layers[0])
        g["staleness"] = layers[0]
        g["layer_staleness"] = layers
        steps.append({"step": i + 1, "shard": 0, "version": i, "t_start": 0.1 * i,
                      "t_apply": 0.1 * (i + 1), "lr": 0.01, "loss": 1.0, "used": 1, "grads": [g]})
    steps[1]["grads"].append(dict(steps[1]["grads"][0], accepted=False, layer_staleness=[99, 99, 99]))
    summary = {"mode": "async", "N": 1, "b": 0, "workers": 2, "status": "completed",
               "staleness_by_layer": [{"shard": 0, "bucket": b, "layers": n}
                                      for b, n in enumerate(["conv1..bn1", "s1b1.conv1", "fc"])]}
    d = write_run(root, "layers", summary, steps, [])
    s = tables.layer_summary(syncopt_runs.Run(d))
    check(s is not None and len(s["rows"]) == 3, f"three buckets: {s}")
    check(close(s["rows"][0]["mean"], 3.0), f"bucket 0 mean of 0, 2, 4, 6 (the dropped one left "
          f"out): {s['rows'][0]['mean']}")
    check(close(s["rows"][2]["mean"], 0.5) and s["rows"][2]["layers"] == "fc", "top bucket")
    check(close(s["ratio"], 6.0), f"bottom / top = 3 / 0.5: {s['ratio']}")
    check(s["rows"][1]["max"] == 3 and s["rows"][0]["samples"] == 4, "max and samples")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paper", "tables.py"),
                        "layers", d], capture_output=True, text=True)
    check(p.returncode == 0 and "| 0 | conv1..bn1 | 3.00 |" in p.stdout and
          "| the paper (Inception, §2) | 39.0 | 14.5 | 2.69 |" in p.stdout and "6.00" in p.stdout,
          f"tables.py layers: {p.stdout} {p.stderr}")
    none = write_run(root, "no-layers", {"mode": "sync", "status": "completed"}, steps[:1], [])
    check(tables.layer_summary(syncopt_runs.Run(none)) is not None, "records decide, not the summary")
    flat = [dict(r, grads=[dict(g, layer_staleness=[]) for g in r["grads"]]) for r in steps]
    check(tables.layer_summary(syncopt_runs.Run(write_run(root, "flat", {"mode": "async"}, flat, [])))
          is None, "no per-layer records: None")


def sim_run(root, name, k, shards, step_s, placement="layers", pipeline=True, max_slice=100):
    """A finished simulated run: K workers, S shards, one update every
    step_s simulated seconds (p50 a tenth less), its placement."""
    return write_run(root, name, {"mode": "sync", "N": k - 2, "b": 2, "S": shards, "workers": k,
                                  "clock": "simulated", "status": "completed",
                                  "steps_per_s": 1.0 / step_s, "step_time_p50_s": 0.9 * step_s,
                                  "sim": {"placement": placement, "pipeline": pipeline,
                                          "slice_counts": [max_slice] * shards}}, [], None)


def test_shards(root):
    """tables.py shards: the best S, the knee (least S within 5 %) and the
    ratio at the paper's S, per K and placement."""
    d = os.path.join(root, "shards")
    os.makedirs(d)
    runs = []
    # K = 8: layers pipelined 4.0, 2.0, 1.04, 1.0, 1.01 s at S = 1, 2, 4, 8, 16:
    # best 8, knee 4 (1.04 <= 1.05), paper's 16: 1.01.
    for n, t in ((1, 4.0), (2, 2.0), (4, 1.04), (8, 1.0), (16, 1.01)):
        runs.append(sim_run(d, f"k8-s{n}", 8, n, t, max_slice=1000 // n))
    # Unpipelined and split at K = 8; a tie (S = 2, 4 both 3.0 s) goes to the fewer shards.
    for n, t in ((1, 5.0), (2, 3.0), (4, 3.0)):
        runs.append(sim_run(d, f"k8-s{n}-np", 8, n, t, pipeline=False))
    for n, t in ((1, 4.5), (16, 0.5)):
        runs.append(sim_run(d, f"k8-s{n}-split", 8, n, t, placement="floats", pipeline=False))
    # K = 16 without the paper's S among the runs.
    runs.append(sim_run(d, "k16-s1", 16, 1, 6.0))
    runs.append(sim_run(d, "k16-s2", 16, 2, 5.0))
    s = tables.shards_summary(syncopt_runs.load_runs(runs), {8: 16, 16: 3})
    lp = s[8]["variants"]["layers, pipelined"]
    check(lp["best_s"] == 8 and lp["knee_s"] == 4, f"best 8, knee 4: {lp}")
    check(close(lp["at_paper_over_best"], 1.01), f"paper's S 16 at 1.01 x best: {lp}")
    check(close(lp["rows"][2]["mean_s"], 2.0) and close(lp["rows"][2]["p50_s"], 1.8)
          and lp["rows"][2]["max_slice"] == 500, f"a row: {lp['rows'][2]}")
    np_ = s[8]["variants"]["layers"]
    check(np_["best_s"] == 2 and np_["knee_s"] == 2 and "at_paper_over_best" not in np_,
          f"a tie goes to the fewer shards; no paper's S run: {np_}")
    check(s[8]["variants"]["split"]["best_s"] == 16, "split placement kept apart")
    check(s[16]["paper_s"] == 3 and s[16]["variants"]["layers, pipelined"]["best_s"] == 2,
          f"K = 16: {s[16]}")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paper", "tables.py"),
                        "shards"] + runs + ["--paper", "8:16,16:3"], capture_output=True,
                       text=True)
    check(p.returncode == 0 and "**16** (paper)" in p.stdout and "**1.000 (0.900)**" in p.stdout
          and "| 8 | layers, pipelined | 16 | 8 | 4 | 1.010 |" in p.stdout,
          f"tables.py shards: {p.stdout} {p.stderr}")
    # A real run is not a simulated one.
    v = virtual_run(root, "vshard", [1.0], [0.5])
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paper", "tables.py"),
                        "shards", v], capture_output=True, text=True)
    check(p.returncode != 0 and "not a finished simulated run" in p.stderr,
          f"a virtual-clock run is refused: {p.stderr}")
    return runs


def test_plots(root):
    try:
        subprocess.run(["/usr/bin/python3", "-c", "import matplotlib"], check=True,
                       capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        print("SKIP: no matplotlib for /usr/bin/python3 (apt-get install python3-matplotlib)")
        return 77
    a = virtual_run(root, "a", [1.0, 2.0, 0.5, 4.0], [0.5, 0.8, 0.9, 0.95])
    b = virtual_run(root, "b", [1.0] * 4, [0.6, 0.85, 0.9, 0.9], "auto", ns=[2, 2, 3, 3])
    plot = os.path.join(ROOT, "scripts", "plot.py")
    out = os.path.join(root, "cmp")
    p = subprocess.run([sys.executable, plot, "--compare", a, b, "--out", out, "--dpi", "50"],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"plot.py --compare: {p.stderr}")
    for f in ("compare_accuracy.png", "compare_step_times.png", "compare_kth.png"):
        check(os.path.getsize(os.path.join(out, f)) > 1000 if os.path.exists(
            os.path.join(out, f)) else False, f"{f} written")
    p = subprocess.run([sys.executable, plot, a, "--dpi", "50"], capture_output=True, text=True)
    check(p.returncode == 0 and os.path.exists(os.path.join(a, "accuracy.png")) and
          os.path.exists(os.path.join(a, "kth_gradient_cdf.png")), f"single run: {p.stderr}")
    p = subprocess.run([sys.executable, plot, a, b], capture_output=True, text=True)
    check(p.returncode != 0 and "--compare" in p.stderr, "two runs without --compare: usage error")
    png = os.path.join(root, "shards.png")
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "paper", "tables.py"),
                        "shards"] + test_shards(root) + ["--paper", "8:16", "--plot", png],
                       capture_output=True, text=True)
    check(p.returncode == 0 and p.stdout.count("**K = 8**") == 1 and
          os.path.exists(png) and os.path.getsize(png) > 1000,
          f"tables.py shards --plot: the figure, the table once: {p.stderr}")

    # A run 40 points behind the other (async against sync in the paper's
    # main figure): both curves must be in view, each with its best and
    # its last evaluation inside the accuracy axis.
    fast = virtual_run(root, "fast", [1.0] * 4, [0.80, 0.90, 0.95, 0.96])
    slow = virtual_run(root, "slow", [1.0] * 4, [0.30, 0.45, 0.52, 0.55])
    data = os.path.join(root, "cmp2.json")
    p = subprocess.run([sys.executable, plot, "--compare", fast, slow, "--out",
                        os.path.join(root, "cmp2"), "--dpi", "30", "--data", data],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"plot.py --compare --data: {p.stderr}")
    drawn = json.load(open(data))["figures"] if os.path.exists(data) else {}
    acc_axes = drawn.get("compare_accuracy.png", [])
    check(len(acc_axes) == 2, f"compare_accuracy.png has 2 axes, got {len(acc_axes)}")
    for ax in acc_axes:
        lo, hi = ax["ylim"]
        for name, accs in (("fast", [80, 90, 95, 96]), ("slow", [30, 45, 52, 55])):
            curves = [c for c in ax["curves"] if c["label"].startswith(name + ":")]
            check(len(curves) == 1, f"{ax['xlabel']}: one curve for {name}, got {len(curves)}")
            if not curves:
                continue
            ys = curves[0]["y"]
            check([round(y) for y in ys] == accs, f"{name}: drawn accuracies {ys}")
            shown = [y for y in ys if lo <= y <= hi]
            check(max(accs) in [round(y) for y in shown] and round(ys[-1]) in
                  [round(y) for y in shown],
                  f"{ax['xlabel']}: {name}'s best and last accuracy ({max(accs)}, {accs[-1]}) "
                  f"inside the axis {lo:.1f}..{hi:.1f}")

    # One run: staleness apart for accepted and dropped gradients, whole
    # ticks; step times on a log axis with labelled ticks.
    p = subprocess.run([sys.executable, plot, a, "--dpi", "30", "--data", data],
                       capture_output=True, text=True)
    check(p.returncode == 0, f"plot.py RUN --data: {p.stderr}")
    drawn = json.load(open(data))["figures"]
    st = drawn.get("staleness.png", [{}])[0]
    bars = {c["label"]: c for c in st.get("curves", []) if c["kind"] == "bars"}
    check(sorted(bars) == ["accepted (applied)", "dropped (late)"], f"staleness bars {sorted(bars)}")
    if len(bars) == 2:
        # virtual_run: two accepted and one dropped gradient per step, 4 steps, staleness 0.
        check(bars["accepted (applied)"]["y"] == [8.0] and bars["dropped (late)"]["y"] == [4.0],
              f"staleness counts {bars}")
    ticks = [t for t in st.get("xticks", []) + st.get("yticks", [])]
    check(ticks and all(float(t).is_integer() for t in ticks), f"staleness ticks whole: {ticks}")
    stp = drawn.get("step_times.png", [{}])[0]
    labels = [t for t in stp.get("yticklabels", []) if t]
    check(stp.get("yscale") == "log" and labels and not any("10^" in t for t in labels),
          f"step_times.png: plain labels on a log axis, got {labels}")

    # A run without summary.json (killed): plotted, and said to be incomplete.
    killed = virtual_run(root, "killed", [1.0] * 3, [0.5, 0.6, 0.7])
    os.remove(os.path.join(killed, "summary.json"))
    with open(os.path.join(killed, "run.json"), "w") as f:
        json.dump({"launches": [{"host": "elsewhere.example", "pid": 1,
                                 "layout": {"mode": "sync", "workers": 3, "N": 2, "b": 1}}]}, f)
    p = subprocess.run([sys.executable, plot, killed, "--dpi", "30"], capture_output=True,
                       text=True)
    check(p.returncode == 0 and os.path.exists(os.path.join(killed, "accuracy.png")),
          f"plot.py on a run without summary.json: {p.returncode} {p.stderr}")
    check("INCOMPLETE" in p.stderr and "no summary.json" in p.stderr and "elsewhere.example" in
          p.stderr, f"plot.py says why the run is incomplete: {p.stderr}")
    p = subprocess.run([sys.executable, plot, "--compare", a, b, "--labels", "x"],
                       capture_output=True, text=True)
    check(p.returncode != 0, "--labels must have one label per run")
    return 0


def test_sweeps(syncopt):
    names = set()
    for f in sorted(os.listdir(os.path.join(ROOT, "configs", "sweeps"))):
        if not f.startswith("paper-"):
            continue
        path = os.path.join(ROOT, "configs", "sweeps", f)
        text = open(path).read().splitlines()
        check(any(line.startswith("# ntasks: ") for line in text), f"{f}: a '# ntasks: N' line")
        lines = []
        for line in text:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            words = line.split()
            if "-m" not in words[1:] and "--multi" not in words[1:]:
                lines.append(line)
                continue
            # A grid line: its runs, as sweep.sbatch and scripts/sweep.sh expand it.
            p = subprocess.run([syncopt, "sweep"] + words, cwd=ROOT, capture_output=True, text=True)
            check(p.returncode == 0, f"{f}: syncopt sweep expands {line}\n{p.stderr[-500:]}")
            lines += p.stdout.splitlines()
        check(lines, f"{f}: has runs")
        for line in lines:
            words = line.split()
            name = [w.split("=", 1)[1] for w in words if w.startswith("run.name=")]
            check(len(name) == 1 and name[0] not in names, f"{f}: one new run.name: {line}")
            names.update(name)
        # Every distinct set of keys once (the seeds differ only in values).
        seen = set()
        for line in lines:
            keys = tuple(sorted(w for w in line.split() if "=" in w and "seed" not in w and
                                "run.name" not in w))
            if keys in seen:
                continue
            seen.add(keys)
            words = line.split()
            p = subprocess.run([syncopt, "train", words[0]] + words[1:] + ["--dry-run"], cwd=ROOT,
                               capture_output=True, text=True)
            check(p.returncode == 0, f"{f}: syncopt train ... --dry-run: {line}\n{p.stderr[-500:]}")


def test_doc_tables():
    """scripts/paper/doc_tables.py's comparison: clock columns always and
    exactly, training columns only on the recorded ISA, nothing compared is
    not a pass; and the rendering of docs/paper.md's blocks."""
    import doc_tables
    cols = [{"key": "n", "header": "N", "src": "clock", "fmt": "d"},
            {"key": "t", "header": "T", "src": "clock", "fmt": ".3f"},
            {"key": "acc", "header": "acc", "src": "training", "fmt": ".4f"}]
    kept = {"columns": cols, "rows": [[2, 0.1, 0.8], [3, 0.2, 0.85]], "isa": "avx2"}
    same = json.loads(json.dumps(kept))
    n, diffs, skipped = doc_tables.compare(kept, same, "avx2")
    check(n == 6 and not diffs and not skipped, f"identical tables: {n} {diffs} {skipped}")
    moved = json.loads(json.dumps(kept))
    moved["rows"][1][1] = 0.2 + 1e-15  # one ulp-scale move of a virtual time
    n, diffs, _ = doc_tables.compare(kept, moved, "avx512_core")
    check(n == 4 and len(diffs) == 1 and "T" in diffs[0], f"a moved time fails anywhere: {diffs}")
    acc = json.loads(json.dumps(kept))
    acc["rows"][0][2] = 0.8001
    _, diffs, _ = doc_tables.compare(kept, acc, "avx2")
    check(len(diffs) == 1, f"a moved accuracy fails on the same ISA: {diffs}")
    n, diffs, skipped = doc_tables.compare(kept, acc, "avx512_core")
    check(n == 4 and not diffs and skipped == ["acc"],
          f"another ISA: accuracy not comparable, times compared: {n} {diffs} {skipped}")
    only_training = {"columns": [cols[2]], "rows": [[0.8]], "isa": "avx2"}
    n, _, _ = doc_tables.compare(only_training, only_training, "amx")
    check(n == 0, "a training-only table on another ISA compares nothing (the check skips)")
    fewer = json.loads(json.dumps(kept))
    fewer["rows"].pop()
    _, diffs, _ = doc_tables.compare(kept, fewer, "avx2")
    check(any("rows" in d for d in diffs), f"a lost row fails: {diffs}")
    d = {"columns": cols, "rows": [[2, 0.1, 0.8], [3, 0.05, None]], "best": {"column": "t"},
         "clock": "virtual", "made": "2026-12-07T12:00:00Z", "commit": "abc"}
    md = doc_tables.plain_table(d)
    check("| 3 | **0.050** | – |" in md, f"the least in bold, a missing value a dash: {md}")
    text = "a\n<!-- paper-table: x -->\n| t |\n<!-- /paper-table -->\nb"
    check(doc_tables.doc_blocks(text) == {"x": "| t |"}, "the doc's marked blocks")


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "numbers"
    root = tempfile.mkdtemp(prefix="syncopt-paper-test-")
    try:
        rc = 0
        if what == "numbers":
            test_numbers(root)
            test_partial(root)
            test_shards(root)
            test_doc_tables()
        elif what == "plots":
            rc = test_plots(root)
        elif what == "sweeps":
            test_sweeps(sys.argv[2])
        else:
            sys.exit(f"unknown test {what}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if FAILURES:
        print(f"{len(FAILURES)} failure(s)")
        return 1
    if rc == 0:
        print("all passed")
    return rc


if __name__ == "__main__":
    sys.exit(main())
