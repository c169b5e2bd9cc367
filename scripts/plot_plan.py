#!/usr/bin/env python3
"""Plot of a `syncopt plan --out plan.json`: which N of K workers reaches the
target soonest.

    python3 scripts/plot_plan.py plan.json [--out plan.png]

Left: the predicted time to the target, I(N) * T(N, K - N), against N, the
best N marked. Right: its two factors, T(N, b) (seconds per update, falling
with more backups) and I(N) (updates, falling with larger N).
Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import syncopt_runs  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plan", help="a plan.json written by syncopt plan --out")
    ap.add_argument("--out", help="the PNG to write (default: the plan's name with .png)")
    args = ap.parse_args()
    plt = syncopt_runs.pyplot("plot_plan.py")
    try:
        with open(args.plan) as f:
            plan = json.load(f)
        rows, best, k = plan["rows"], plan["best"], plan["workers"]
    except (OSError, ValueError, KeyError) as e:
        sys.exit(f"plot_plan.py: {args.plan}: not a plan written by syncopt plan --out ({e})")
    out = args.out or os.path.splitext(args.plan)[0] + ".png"
    ns = [r["N"] for r in rows]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    a1.plot(ns, [r["time_s"] / 3600 for r in rows], "o-", ms=3)
    a1.plot([best["N"]], [best["time_s"] / 3600], "r*", ms=14,
            label=f"best: N = {best['N']}, b = {best['b']}")
    a1.set_xlabel(f"N (gradients per update; b = {k} - N backups)")
    a1.set_ylabel("predicted time to the target (h)")
    a1.set_yscale("log")
    a1.legend(fontsize=8)
    a1.grid(alpha=0.3)
    a2.plot(ns, [r["step_s"] for r in rows], "o-", ms=3, color="tab:blue")
    a2.set_xlabel("N")
    a2.set_ylabel("T(N, b): seconds per update", color="tab:blue")
    a2.grid(alpha=0.3)
    a3 = a2.twinx()
    a3.plot(ns, [r["iters"] for r in rows], "s--", ms=3, color="tab:orange")
    a3.set_ylabel("I(N): updates to the target", color="tab:orange")
    a3.set_yscale("log")
    im = plan["iters_model"]
    fig.suptitle(f"K = {k}: I(N) = {im['a']:.4g} + {im['c']:.4g}/N ({im['source']}); "
                 f"T from {plan['step_source']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"plot_plan.py: wrote {out}")


if __name__ == "__main__":
    main()
