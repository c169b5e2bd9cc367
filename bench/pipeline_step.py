#!/usr/bin/env python3
"""The cost of the parameter server: sync step time of 1 PS + 1 worker against the local step.

For each model (the reference CNN and ResNet-20, batch 32, one compute thread,
Fashion-MNIST) and each round, three syncopt runs of --steps updates, in an
order that rotates from round to round so that none always goes first:

    local      `syncopt train` alone (train.mode = local): the step as one
               process computes and applies it, the peer of the two below
    pipeline   `mpirun -np 2`: 1 parameter server + 1 worker, sync, b = 0,
               exchange.pipeline = true (buckets of layers, overlapping compute)
    whole      the same with exchange.pipeline = false (pull everything,
               compute, push everything)

A run's step time is the median interval between consecutive updates in its
steps.jsonl after the first --warmup updates (start-up and first touches of
buffers). Prints every run with the load average when it ended, then per
model the median over the rounds and each distributed step over the local
one, and what a step costs beyond the compute of the gradient it applies
(the median over the steps of the interval minus that compute time: the
update and the loader, and in the distributed runs the exchange and the
part of the update not overlapped; less shaken than the step by other jobs
on the cores, since most of a step is compute).

The machine may be shared, so the ratios of runs interleaved in one session
are what to read. The two ranks are not bound to cores (mpirun --bind-to
none), like the local run: on a shared machine a rank bound to a core
another job is using cannot move to the free one, which the unbound local
run can (two successive 3-round runs here, load 3-5: CNN pipeline/local
1.24 bound, 1.04 unbound). --bind keeps mpirun's binding (a core per rank).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_rmaps_base_oversubscribe": "1"}
KINDS = ("local", "pipeline", "whole")


def run(exe, tmp, model, kind, rnd, steps, warmup, extra, bind):
    name = f"{model}-{kind}-{rnd}"
    cmd = [exe, "train", os.path.join(ROOT, "configs", "fmnist-sync.toml"), "--quiet",
           "--set", f"run.dir={tmp}", "--set", f"run.name={name}", "--set", f"model.name={model}",
           "--set", "train.batch=32", "--set", f"train.steps={steps}", "--set", "train.backups=0",
           "--set", "cluster.evaluator=false", "--set", "eval.every_s=0",
           "--set", "run.checkpoint_every_s=0", "--set", "run.tensorboard=false",
           "--set", "compute.threads=1",
           # The final evaluation is not timed; a small test set keeps it short.
           "--set", "data.limit_test=500", "--set", "eval.bn_batches=2"]
    if kind == "local":
        cmd += ["--set", "train.mode=local"]
    else:
        mpirun = ["mpirun", "-np", "2"] + ([] if bind else ["--bind-to", "none"])
        cmd = mpirun + cmd + ["--set", "train.mode=sync", "--set",
                              f"exchange.pipeline={'true' if kind == 'pipeline' else 'false'}"]
    for s in extra:
        cmd += ["--set", s]
    out = subprocess.run(cmd, env=dict(os.environ, **MPI_ENV), capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"bench: {' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
    with open(os.path.join(tmp, name, "steps.jsonl")) as f:
        recs = sorted((json.loads(l) for l in f), key=lambda r: r["step"])
    recs = [r for r in recs if r.get("shard", 0) == 0]
    dts = [b["t_apply"] - a["t_apply"] for a, b in zip(recs, recs[1:])][warmup:]
    # What a step costs beyond the compute of the gradient it applies.
    beyond = [b["t_apply"] - a["t_apply"] - max(g["compute_s"] for g in b["grads"] if g["accepted"])
              for a, b in zip(recs, recs[1:])][warmup:]
    if not dts:
        sys.exit(f"bench: {name}: no updates after the warm-up; raise --steps")
    with open("/proc/loadavg") as f:
        load = float(f.read().split()[0])
    return statistics.median(dts), statistics.median(beyond), load


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exe", default=os.path.join(ROOT, "build", "syncopt"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--models", default="cnn,resnet20")
    ap.add_argument("--steps", type=int, default=400, help="updates per run (ResNet-20: half)")
    ap.add_argument("--warmup", type=int, default=50, help="updates left out at the start")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="extra config override for every run (e.g. exchange.bucket_bytes=65536)")
    ap.add_argument("--bind", action="store_true",
                    help="keep mpirun's binding of each rank to a core (default: --bind-to none)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    if not os.path.exists(args.exe):
        sys.exit(f"bench: {args.exe} not found; build first (scripts/setup.sh)")
    models = args.models.split(",")
    times = {m: {k: [] for k in KINDS} for m in models}
    beyond = {m: {k: [] for k in KINDS} for m in models}
    loads = []
    with tempfile.TemporaryDirectory(prefix="syncopt-bench-pipe-") as tmp:
        for rnd in range(1, args.rounds + 1):
            for model in models:
                steps = args.steps if model != "resnet20" else max(args.warmup + 20, args.steps // 2)
                order = KINDS[rnd % 3:] + KINDS[:rnd % 3]
                line = []
                for kind in order:
                    t, extra_t, load = run(args.exe, tmp, model, kind, rnd, steps, args.warmup,
                                           args.set, args.bind)
                    times[model][kind].append(t)
                    beyond[model][kind].append(extra_t)
                    loads.append(load)
                    line.append(f"{kind} {t * 1e3:.2f} ms, {extra_t * 1e3:.2f} beyond compute "
                                f"(load {load:.1f})")
                print(f"round {rnd} {model:>8}: " + ", ".join(line), flush=True)
    print(f"\n1 PS + 1 worker, sync b = 0, batch 32, one thread per rank "
          f"({'bound to cores' if args.bind else 'unbound'}); medians of "
          f"{args.rounds} interleaved rounds; load average {min(loads):.1f} to {max(loads):.1f}")
    print(f"{'model':>9} {'local ms':>9} {'pipeline ms':>12} {'whole ms':>9} "
          f"{'pipeline/local':>15} {'whole/local':>12}   beyond compute, ms: "
          f"{'local':>6} {'pipeline':>9} {'whole':>6}")
    figures = {}
    for model in models:
        med = {k: statistics.median(times[model][k]) for k in KINDS}
        bmed = {k: statistics.median(beyond[model][k]) for k in KINDS}
        print(f"{model:>9} {med['local'] * 1e3:>9.2f} {med['pipeline'] * 1e3:>12.2f} "
              f"{med['whole'] * 1e3:>9.2f} {med['pipeline'] / med['local']:>15.3f} "
              f"{med['whole'] / med['local']:>12.3f}   {'':>19} "
              f"{bmed['local'] * 1e3:>6.2f} {bmed['pipeline'] * 1e3:>9.2f} "
              f"{bmed['whole'] * 1e3:>6.2f}")
        figures[model] = {"median_s": med, "runs_s": times[model],
                          "beyond_compute_median_s": bmed, "beyond_compute_runs_s": beyond[model],
                          "pipeline_over_local": med["pipeline"] / med["local"],
                          "whole_over_local": med["whole"] / med["local"]}
    figures["load"] = [min(loads), max(loads)]
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)


if __name__ == "__main__":
    main()
