#!/usr/bin/env python3
"""Distributed sync SGD with backup workers: syncopt measured three ways in one run.

1. Straggler mitigation. 1 PS + 5 workers, reference CNN, batch 32, on
   Fashion-MNIST. Three syncopt runs of --steps updates each:
     none     no stragglers, sync N=4 b=1
     b=1      stragglers, sync N=4 b=1
     b=0      stragglers, sync N=5 b=0
   with the stragglers seeded (bernoulli: a slowdown of --factor on a
   --prob share of steps) on one worker (--scenario one, the default) or on
   every worker independently (--scenario all). Prints the median, mean and
   p90 step time of each and the ratios to the no-straggler run.
2. Overhead. The no-straggler run again at batch 128: median step time
   against the median pure compute time of a worker's step (both from the
   same run's records), and the parameter server's CPU share (from /proc:
   its CPU seconds over the wall seconds of the run).
3. The peer. TensorFlow's SyncReplicasOptimizer (bench/tf_sync_replicas.py,
   1 PS + 5 worker tasks on loopback, replicas_to_aggregate=4), same CNN,
   batch, data and number of updates, run alternately with syncopt's
   equivalent sync N=4 b=1 run. Prints median step time, examples/s and
   test accuracy after the same number of updates, and the ratios.

tensorflow-cpu is installed from PyPI when missing; syncopt never uses it.
Open MPI runs as root and oversubscribed here (2 cores, 6 ranks): the
environment variables for that are set below, never in the binary.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}


def rank0_pid(mpirun_pid):
    """The pid of the MPI rank 0 started by this mpirun (from /proc)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        if b"syncopt" in cmd and b"OMPI_COMM_WORLD_RANK=0" in env and b"mpirun" not in cmd:
            return int(pid)
    return None


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


EXTRA_SETS = []  # --set: appended to every syncopt run


def run_syncopt(exe, tmp, name, sets, np_=6, watch_ps=False):
    cmd = ["mpirun", "-np", str(np_), exe, "train", os.path.join(ROOT, "configs", "fmnist-sync.toml"),
           "--quiet", "--set", f"run.dir={tmp}", "--set", f"run.name={name}",
           "--set", "cluster.evaluator=false", "--set", "eval.every_s=0"]
    for s in sets + EXTRA_SETS:
        cmd += ["--set", s]
    env = dict(os.environ, **MPI_ENV)
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ps = {"cpu": None, "wall": None}
    if watch_ps:
        def watch():
            pid = None
            for _ in range(200):
                pid = rank0_pid(proc.pid)
                if pid:
                    break
                time.sleep(0.05)
            if not pid:
                return
            t0, c0, last = time.monotonic(), cpu_seconds(pid), None
            while proc.poll() is None:
                try:
                    last = (time.monotonic(), cpu_seconds(pid))
                except OSError:
                    break
                time.sleep(0.2)
            if last:
                ps["wall"], ps["cpu"] = last[0] - t0, last[1] - c0
        th = threading.Thread(target=watch)
        th.start()
    out, _ = proc.communicate()
    if watch_ps:
        th.join()
    if proc.returncode != 0:
        sys.exit(f"bench: syncopt failed ({proc.returncode}):\n{out}")
    with open(os.path.join(tmp, name, "summary.json")) as f:
        summary = json.load(f)
    steps = []
    with open(os.path.join(tmp, name, "steps.jsonl")) as f:
        for line in f:
            steps.append(json.loads(line))
    shard0 = sorted((r for r in steps if r["shard"] == 0), key=lambda r: r["step"])
    dts = [b["t_apply"] - a["t_apply"] for a, b in zip(shard0, shard0[1:])]
    # Skip the first 10 updates, as for TF (start-up, first-touch of buffers).
    dts = dts[10:] if len(dts) > 20 else dts
    summary["dt"] = dts
    summary["ps_cpu_share"] = (ps["cpu"] / ps["wall"]) if ps["cpu"] is not None and ps["wall"] else None
    return summary


def stats(dts):
    s = sorted(dts)
    return statistics.median(s), statistics.mean(s), s[int(0.9 * (len(s) - 1))]


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "syncopt"))
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--prob", type=float, default=0.2)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--scenario", choices=["one", "all"], default="one")
    ap.add_argument("--tf-updates", type=int, default=300)
    ap.add_argument("--skip", default="", help="comma list of parts to skip: stragglers,overhead,tf")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config override for every syncopt run (e.g. exchange.pipeline=false)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    EXTRA_SETS.extend(args.set)
    if not os.path.exists(args.exe):
        sys.exit(f"bench: {args.exe} not found; build first (scripts/setup.sh)")
    figures = {}
    with tempfile.TemporaryDirectory(prefix="syncopt-bench-") as tmp:
        if "stragglers" not in skip:
            base = [f"train.steps={args.steps}", "train.batch=32"]
            strag = ["stragglers.model=bernoulli", f"stragglers.prob={args.prob}",
                     f"stragglers.factor={args.factor}", "stragglers.seed=11"]
            if args.scenario == "one":
                strag.append("stragglers.workers=[0]")
            runs = {
                "none": run_syncopt(args.exe, tmp, "none", base + ["train.backups=1"]),
                "b=1": run_syncopt(args.exe, tmp, "b1", base + strag + ["train.backups=1"]),
                "b=0": run_syncopt(args.exe, tmp, "b0", base + strag + ["train.backups=0"]),
            }
            print(f"\n1. stragglers: {'one worker' if args.scenario == 'one' else 'every worker'} "
                  f"slowed {args.factor}x on {100 * args.prob:.0f}% of its steps (seeded); "
                  f"1 PS + 5 workers, CNN, batch 32, {args.steps} updates")
            print(f"{'run':>6} {'median s':>10} {'mean s':>10} {'p90 s':>10} {'median/none':>12} {'mean/none':>10}")
            m0, a0, _ = stats(runs["none"]["dt"])
            for k, r in runs.items():
                m, a, p = stats(r["dt"])
                print(f"{k:>6} {m:>10.4f} {a:>10.4f} {p:>10.4f} {m / m0:>12.2f} {a / a0:>10.2f}")
                figures[f"stragglers_{k}"] = {"median_s": m, "mean_s": a, "p90_s": p,
                                              "median_ratio": m / m0, "mean_ratio": a / a0}
        if "overhead" not in skip:
            r = run_syncopt(args.exe, tmp, "overhead",
                            [f"train.steps={args.steps}", "train.batch=128", "train.backups=1"],
                            watch_ps=True)
            m, _, _ = stats(r["dt"])
            c = r["compute_time_p50_s"]
            print(f"\n2. overhead, no stragglers, batch 128, sync N=4 b=1, {args.steps} updates")
            ap_ = r.get("apply_time_p50_s", 0.0)
            kth = r["time_to_kth_median_s"]
            print(f"   median step time {m:.4f} s, median worker compute {c:.4f} s, ratio {m / c:.3f}")
            print(f"   where it goes (medians): the 4th gradient reaches the PS {kth[3]:.4f} s after "
                  f"the step starts (parameters to the workers, compute, gradient back, and the "
                  f"wait for the 4th fastest of 5: {kth[3] - c:.4f} s beyond the median compute); "
                  f"aggregation + optimiser + EMA at the PS {ap_:.4f} s")
            if r["ps_cpu_share"] is not None:
                print(f"   parameter server CPU share over the run: {100 * r['ps_cpu_share']:.1f}% of one core")
            figures["overhead"] = {"median_step_s": m, "median_compute_s": c, "ratio": m / c,
                                   "apply_s": r.get("apply_time_p50_s"),
                                   "nth_gradient_s": r["time_to_kth_median_s"][3],
                                   "ps_cpu_share": r["ps_cpu_share"]}
        if "tf" not in skip:
            try:
                import tensorflow  # noqa: F401
            except ImportError:
                print("bench: installing the peer, tensorflow-cpu, from PyPI ...", flush=True)
                subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", "tensorflow-cpu"])
            ours = run_syncopt(args.exe, tmp, "tfpeer",
                               [f"train.steps={args.tf_updates}", "train.batch=32", "train.backups=1",
                                "optim.schedule=constant"])
            out = subprocess.run([sys.executable, os.path.join(ROOT, "bench", "tf_sync_replicas.py"),
                                  "--updates", str(args.tf_updates), "--batch", "32", "--lr", "0.05"],
                                 capture_output=True, text=True)
            line = [l for l in out.stdout.splitlines() if l.startswith("TF_RESULT ")]
            if out.returncode != 0 or not line:
                sys.exit(f"bench: TensorFlow peer failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
            tf = json.loads(line[-1][len("TF_RESULT "):])
            m, _, _ = stats(ours["dt"])
            # As TF's figure: examples of the timed updates over their time.
            ex = 4 * 32 * len(ours["dt"]) / sum(ours["dt"])
            print(f"\n3. peer: TensorFlow {tf['tf_version']} SyncReplicasOptimizer vs syncopt, "
                  f"1 PS + 5 workers, N=4, batch 32, {args.tf_updates} updates, lr 0.05 constant")
            print(f"{'':>10} {'median step s':>14} {'examples/s':>11} {'test acc':>9}")
            print(f"{'syncopt':>10} {m:>14.4f} {ex:>11.1f} {100 * ours['test_acc']:>8.2f}%")
            print(f"{'tf':>10} {tf['median_update_s']:>14.4f} {tf['examples_per_s']:>11.1f} "
                  f"{100 * tf['test_accuracy']:>8.2f}%")
            print(f"   syncopt speed-up (TF median step / syncopt median step): "
                  f"{tf['median_update_s'] / m:.2f}x")
            figures["tf"] = {"syncopt_median_s": m, "syncopt_examples_s": ex,
                             "syncopt_test_acc": ours["test_acc"], "tf": tf,
                             "speedup": tf["median_update_s"] / m}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
