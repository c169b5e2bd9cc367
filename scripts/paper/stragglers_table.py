#!/usr/bin/env python3
"""The table of scripts/paper/stragglers.sh from its runs:

    stragglers_table.py RUNS ROUNDS K LOAD_TXT [--json OUT.json]

Real runs r<round>-<scenario>-<mode> (rounds 1..ROUNDS, interleaved) and
simulated ones k100-<scenario>-<mode>. Per scenario and mode: the mean
seconds a step (train_s / steps) over the rounds with its spread (min-max),
against the straggler-free plain allreduce; the share of examples not
computed (allreduce with a budget) or of gradients dropped (sync); the
final test accuracy (mean, min-max) at equal examples.
"""
import json
import os
import sys

SCENARIOS = ["none", "bernoulli", "slow"]
REAL = ["allreduce", "budget", "auto", "sync-b1"]
SIM = ["allreduce", "budget", "auto", "sync-b4", "sync-b20"]
LABEL = {"allreduce": "allreduce", "budget": "allreduce + budget", "auto": "allreduce + auto",
         "sync-b1": "sync, b = 1", "sync-b4": "sync, b = 4", "sync-b20": "sync, b = 20"}


def summary(runs, name):
    path = os.path.join(runs, name, "summary.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def figures(s):
    step = s["train_s"] / max(1, s["steps"])
    skipped = s.get("skipped_examples")
    drops = sum(s.get("drops_per_worker") or [])
    grads = drops + sum(s.get("accepted_per_worker") or [])
    if skipped is not None:
        lost = skipped / max(1, skipped + s["examples"])
        what = "examples"
    elif s["mode"] == "sync" and grads > 0:
        lost = drops / grads
        what = "gradients"
    else:
        lost, what = 0.0, ""
    return {"step_s": step, "lost": lost, "lost_what": what, "acc": s.get("test_acc"),
            "examples": s["examples"], "train_s": s["train_s"]}


def spread(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, None
    return sum(xs) / len(xs), min(xs), max(xs)


def main():
    args = sys.argv[1:]
    out_json = None
    if "--json" in args:
        i = args.index("--json")
        out_json = args[i + 1]
        del args[i:i + 2]
    runs, rounds, k, load = args[0], int(args[1]), int(args[2]), args[3]
    rows, missing = [], []
    lines = [f"Real runs: K = {k} workers (sync: 1 shard + K), {rounds} interleaved rounds; "
             "step = train_s / steps, mean (min-max) over the rounds; ratio against plain "
             "allreduce without stragglers; lost = examples not computed (budget) or gradients "
             "dropped (sync); training = train_s, the seconds to the same examples (an update "
             "of sync or of a budget carries fewer examples than K batches).", ""]
    if os.path.exists(load):
        lines += ["Machine load: " + "; ".join(open(load).read().split("\n")).strip("; "), ""]
    lines += ["| stragglers | mode | step (ms) | x straggler-free | lost | training (s) | "
              "test acc (%) | examples |",
              "|---|---|---|---|---|---|---|---|"]
    base = None
    for sc in SCENARIOS:
        for mode in REAL:
            got = [summary(runs, f"r{r}-{sc}-{mode}") for r in range(1, rounds + 1)]
            got = [figures(s) for s in got if s is not None]
            if not got:
                missing.append(f"{sc}-{mode}")
                continue
            step, lo, hi = spread([g["step_s"] for g in got])
            acc, alo, ahi = spread([g["acc"] for g in got])
            lost = sum(g["lost"] for g in got) / len(got)
            train, _, _ = spread([g["train_s"] for g in got])
            if sc == "none" and mode == "allreduce":
                base = step
            ratio = step / base if base else None
            row = {"scenario": sc, "mode": mode, "step_s": step, "step_min_s": lo,
                   "step_max_s": hi, "ratio": ratio, "lost": lost, "lost_what": got[0]["lost_what"],
                   "test_acc": acc, "test_acc_min": alo, "test_acc_max": ahi,
                   "examples": got[0]["examples"], "train_s": train, "rounds": len(got)}
            rows.append(row)
            acc_text = (f"{100 * acc:.2f} ({100 * alo:.2f}-{100 * ahi:.2f})"
                        if acc is not None else "-")
            lost_text = f"{100 * lost:.1f} % {row['lost_what']}" if row["lost_what"] else "0"
            lines.append(f"| {sc} | {LABEL[mode]} | {1e3 * step:.2f} ({1e3 * lo:.2f}-{1e3 * hi:.2f})"
                         f" | {ratio:.3f} | {lost_text} | {train:.0f} | {acc_text} | {row['examples']} |"
                         if ratio is not None else f"| {sc} | {LABEL[mode]} | ... |")
    lines += ["", "Simulated: K = 100 (configs/sim-k100.toml's cluster), 300 updates.", "",
              "| stragglers | mode | step (s) | x straggler-free | lost |", "|---|---|---|---|---|"]
    base = None
    for sc in SCENARIOS:
        for mode in SIM:
            s = summary(runs, f"k100-{sc}-{mode}")
            if s is None:
                missing.append(f"k100-{sc}-{mode}")
                continue
            g = figures(s)
            if sc == "none" and mode == "allreduce":
                base = g["step_s"]
            ratio = g["step_s"] / base if base else float("nan")
            rows.append({"scenario": sc, "mode": mode, "simulated": True, "k": 100,
                         "step_s": g["step_s"], "ratio": ratio, "lost": g["lost"],
                         "lost_what": g["lost_what"]})
            lost_text = f"{100 * g['lost']:.1f} % {g['lost_what']}" if g["lost_what"] else "0"
            lines.append(f"| {sc} | {LABEL[mode]} | {g['step_s']:.3f} | {ratio:.3f} | {lost_text} |")
    print("\n".join(lines))
    if missing:
        print("\nmissing runs: " + ", ".join(missing))
    if out_json:
        with open(out_json, "w") as f:
            json.dump({"rows": rows, "missing": missing}, f, indent=1)
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
