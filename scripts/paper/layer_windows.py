#!/usr/bin/env python3
"""Why the top layer is fresh (docs/paper.md, "Staleness by layer"): for
async runs with the pipelined exchange, each layer's measured mean staleness
beside what the worker's own phase times predict for it.

    layer_windows.py RUN... [--json FILE]

The model. A worker reads every layer's parameters at once, when the shard
answers its pull (the shard sends all buckets then, each stamped with its
version at that moment: lib/ps/shard.cpp answer_pulls), as TensorFlow's
workers read their variables at the step's start. Bucket l's gradient is
applied W_l seconds later; meanwhile the K - 1 other workers apply theirs at
the rate (K - 1) / P, P a worker's whole cycle (K x the mean seconds per
update in async). So

    E[staleness_l] ~ (K - 1) W_l / P,   W_top ~ data + forward,
                                        W_bottom ~ P - (the wait for the answer)

and bottom / top ~ P / (data + forward): the share of a cycle spent before
the top layer's gradient exists. The paper's 2.7 is a cycle of forward +
backward with backward about twice forward (3); a larger ratio says the
cycle holds time that is neither (waiting for the shard, sends, a shared
CPU). The phases are grads[].phases (wall clock, docs/outputs.md).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import syncopt_runs  # noqa: E402
import tables  # noqa: E402


def phase_means(run):
    sums, n = {}, 0
    for r in run.steps:
        for g in r["grads"]:
            ph = g.get("phases")
            if not ph:
                continue
            n += 1
            for k, v in ph.items():
                sums[k] = sums.get(k, 0.0) + v
    return ({k: v / n for k, v in sums.items()}, n) if n else ({}, 0)


def explain(run):
    summ = tables.layer_summary(run)
    if summ is None:
        raise syncopt_runs.RunError(f"{run.path}: no per-layer staleness (async, pipelined?)")
    k = run.workers
    per_update = run.mean_step_s()
    cycle = k * per_update
    ph, n = phase_means(run)
    before_top = ph.get("data", 0.0) + ph.get("forward", 0.0)
    return {"run": run.name, "K": k, "buckets": len(summ["rows"]),
            "bucket_bytes": run.cfg("exchange", "bucket_bytes"),
            "bottom": summ["bottom"], "top": summ["top"], "ratio": summ["ratio"],
            "cycle_s": cycle, "phases_s": ph, "phase_samples": n,
            "pred_top": (k - 1) * before_top / cycle if cycle else None,
            "pred_ratio": cycle / before_top if before_top else None,
            "compute_share": (ph.get("forward", 0) + ph.get("backward", 0)) / cycle
            if cycle else None}


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+")
    p.add_argument("--json")
    args = p.parse_args()
    out = [explain(r) for r in syncopt_runs.load_runs(args.runs)]
    rows = []
    for e in out:
        ph = e["phases_s"]
        rows.append([e["run"], e["K"], e["buckets"], f"{e['bottom']:.2f}", f"{e['top']:.2f}",
                     f"{e['ratio']:.1f}" if e["ratio"] else "–",
                     f"{1e3 * e['cycle_s']:.0f}",
                     " / ".join(f"{1e3 * ph.get(x, 0):.0f}"
                                for x in ("data", "forward", "backward", "wait", "send")),
                     f"{100 * e['compute_share']:.0f} %",
                     f"{e['pred_top']:.2f}", f"{e['pred_ratio']:.1f}"])
    print(tables.table(["run", "K", "buckets", "bottom", "top", "bottom / top", "cycle P (ms)",
                        "data / forward / backward / wait / send (ms)",
                        "compute share of P", "top predicted", "ratio predicted"], rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
