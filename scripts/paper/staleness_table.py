#!/usr/bin/python3
"""The staleness study's table and plot (paper section 2.1), from the runs of
scripts/paper/staleness.sh.

    /usr/bin/python3 scripts/paper/staleness_table.py DIR [--no-plot]

Reads DIR/staleness-*/summary.json (and steps.jsonl for the loss curves) and
writes:
  DIR/staleness_table.md   s, the staleness measured from the records, test
                           error of theta and of its EMA, status, wall time
  DIR/staleness.png        test error vs s; error relative to s = 0 next to
                           the paper's MNIST numbers; training loss per s
The table is also printed. Needs matplotlib for the plot (Debian:
python3-matplotlib; /usr/bin/python3, not a virtualenv's).
"""
import argparse
import json
import math
import pathlib
import re
import sys

# Chen et al. 2016, section 2.1: MNIST CNN test error (%) vs mean staleness.
PAPER_MNIST = {0: 0.36, 20: 0.47, 50: 0.79}


def read_jsonl(path):
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if line:
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"staleness_table.py: {path}:{n}: not a JSON record ({e})")
    return out


def runs_of(root):
    rows = []
    for d in sorted(root.glob("staleness-*")):
        m = re.fullmatch(r"staleness-(\d+(?:\.\d+)?)", d.name)
        if not m or not d.is_dir():
            continue
        summary_path = d / "summary.json"
        if not summary_path.exists():
            rows.append({"s": float(m.group(1)), "dir": d, "status": "no summary"})
            continue
        s = json.loads(summary_path.read_text())
        sim = s.get("simulated_staleness") or {}
        row = {
            "s": float(sim.get("mean", m.group(1))),
            "dir": d,
            "dist": sim.get("dist", "-"),
            "status": s.get("status", "?"),
            "measured": s.get("staleness_mean"),
            "max": s.get("staleness_max"),
            "epochs": s.get("epochs"),
            "wall_s": s.get("wall_s"),
            "err": None,
            "err_ema": None,
            "error": s.get("error", ""),
        }
        if row["status"] == "completed":
            row["err"] = 100.0 * (1.0 - s["test_acc"])
            row["err_ema"] = 100.0 * (1.0 - s["test_acc_ema"])
        rows.append(row)
    return sorted(rows, key=lambda r: r["s"])


def fmt(v, spec):
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def table(rows):
    base = next((r for r in rows if r["s"] == 0 and r.get("err_ema") is not None), None)
    lines = [
        "| s (mean) | dist | measured mean / max | test error θ (%) | test error θ̄ (%) "
        "| θ̄ vs s=0 | epochs | wall (s) | status |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        rel = None
        if base and r.get("err_ema") is not None and base["err_ema"] > 0:
            rel = r["err_ema"] / base["err_ema"]
        status = r["status"]
        if r.get("error"):
            status += ": " + r["error"].split(";")[0][:80]
        lines.append(
            f"| {fmt(r['s'], 'g')} | {r.get('dist', '-')} | {fmt(r.get('measured'), '.2f')} / "
            f"{fmt(r.get('max'), '.0f')} | {fmt(r.get('err'), '.2f')} | {fmt(r.get('err_ema'), '.2f')} "
            f"| {fmt(rel, '.2f')}x | {fmt(r.get('epochs'), '.2f')} | {fmt(r.get('wall_s'), '.0f')} "
            f"| {status} |")
    lines.append("")
    lines.append("Paper (MNIST, 25 epochs): test error 0.36 % at s = 0, 0.47 % (1.31x) at "
                 "mean staleness 20, 0.79 % (2.19x) at 50; less stable above 15.")
    return "\n".join(lines) + "\n"


def smoothed_loss(steps, beta=0.98):
    xs, ys, avg = [], [], None
    for r in steps:
        loss = r.get("loss")
        if loss is None or not math.isfinite(loss):
            continue
        avg = loss if avg is None else beta * avg + (1 - beta) * loss
        xs.append(r["step"])
        ys.append(avg)
    return xs, ys


def plot(rows, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r.get("err") is not None]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    ax[0].plot([r["s"] for r in done], [r["err"] for r in done], "o-", label=r"$\theta$")
    ax[0].plot([r["s"] for r in done], [r["err_ema"] for r in done], "s-", label=r"$\bar\theta$ (EMA)")
    ax[0].set_xlabel("mean staleness s (updates)")
    ax[0].set_ylabel("test error (%)")
    ax[0].set_title("Fashion-MNIST, simulated staleness")
    ax[0].legend()
    ax[0].grid(alpha=0.3)

    base = next((r for r in done if r["s"] == 0), None)
    if base:
        ax[1].plot([r["s"] for r in done], [r["err_ema"] / base["err_ema"] for r in done], "s-",
                   label=r"ours, $\bar\theta$ (Fashion-MNIST)")
    ax[1].plot(list(PAPER_MNIST), [v / PAPER_MNIST[0] for v in PAPER_MNIST.values()], "k^--",
               label="paper (MNIST)")
    ax[1].set_xlabel("mean staleness s (updates)")
    ax[1].set_ylabel("test error / test error at s = 0")
    ax[1].set_title("Relative to no staleness")
    ax[1].legend()
    ax[1].grid(alpha=0.3)

    for r in rows:
        p = r["dir"] / "steps.jsonl"
        if p.exists():
            xs, ys = smoothed_loss(read_jsonl(p))
            ax[2].plot(xs, ys, lw=1, label=f"s = {r['s']:g}")
    ax[2].set_xlabel("update")
    ax[2].set_ylabel("training loss (EMA 0.98)")
    ax[2].set_title("Training loss")
    ax[2].legend()
    ax[2].grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir", type=pathlib.Path)
    ap.add_argument("--no-plot", action="store_true")
    a = ap.parse_args()
    rows = runs_of(a.dir)
    if not rows:
        sys.exit(f"staleness_table.py: no staleness-* run directories in {a.dir}")
    text = table(rows)
    (a.dir / "staleness_table.md").write_text(text)
    print(text, end="")
    print(f"table: {a.dir / 'staleness_table.md'}")
    if not a.no_plot:
        plot(rows, a.dir / "staleness.png")
        print(f"plot:  {a.dir / 'staleness.png'}")


if __name__ == "__main__":
    main()
