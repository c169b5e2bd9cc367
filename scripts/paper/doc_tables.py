#!/usr/bin/env python3
"""The tables of docs/paper.md that come from the virtual clock or the
simulator, tied to the code that makes them (issue 29).

Each table has a file docs/paper/<id>.json holding its numbers at full
precision, the command that made them, the commit, the date, the CPU and
oneDNN's ISA, at two sizes: "doc" (what docs/paper.md shows) and "test" (a
size CTest can afford, its numbers kept as well; for the cheap tables the
same as "doc"). docs/paper.md shows each between the markers

    <!-- paper-table: ID -->
    ...the table rendered from docs/paper/ID.json...
    <!-- /paper-table -->

    doc_tables.py list                  the tables, their clocks and sizes
    doc_tables.py make ID [--size doc|test|both]   run it, write docs/paper/ID.json
                                        and the table into docs/paper.md
    doc_tables.py render                rewrite every marked table of docs/paper.md from its JSON
    doc_tables.py check-doc             exit 1 unless every marked table equals its JSON's
                                        rendering (and every JSON is shown)
    doc_tables.py check ID              regenerate ID at its test size in a scratch directory
                                        and compare with the kept numbers exactly: exit 1 with
                                        a diff and the command that regenerates it

Exactness. Every column is marked by where its numbers come from:
  "clock"     simulated or virtual times, N chosen by arrival times, counts:
              pure functions of the config and the seed, compared exactly
              on every machine;
  "training"  accuracies and updates to a target: they follow oneDNN's
              floating-point kernels, which differ by ISA (avx2, avx512_core,
              AMX...). Compared exactly where the ISA is the one recorded;
              elsewhere reported "not comparable here" and left out. A check
              that would compare no column at all exits 77 (CTest: skipped),
              never 0.
SYNCOPT_BIN (default build/syncopt) is the binary; mpirun runs the
virtual-clock trainings.
"""
import argparse
import datetime
import difflib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
sys.path.insert(0, HERE)
import syncopt_runs  # noqa: E402

DOC = os.path.join(ROOT, "docs", "paper.md")
DATA = os.path.join(ROOT, "docs", "paper")
SKIP = 77


def syncopt_bin():
    return os.environ.get("SYNCOPT_BIN") or os.path.join(ROOT, "build", "syncopt")


# ------------------------------------------------------------ machine facts

def isa():
    """oneDNN's ISA as `syncopt --version` names it (e.g. "avx2")."""
    out = subprocess.run([syncopt_bin(), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"cpu isa (\S+)", out)
    return m.group(1) if m else "unknown"


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def commit():
    """The commit the binary was built from, as `syncopt --version` says it
    ("+modified": from a tree with changes not committed)."""
    out = subprocess.run([syncopt_bin(), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"\(git ([0-9a-f]+)(, modified)?", out)
    return (m.group(1)[:12] + ("+modified" if m.group(2) else "")) if m else "unknown"


def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "unknown"


# ------------------------------------------------------------------- running

class Runner:
    """Runs syncopt into a scratch directory and remembers the commands."""

    def __init__(self, work, reuse=False):
        self.work = work
        self.reuse = reuse  # keep the completed runs of an earlier `make --work`
        self.commands = []

    def _run(self, argv, log):
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_rmaps_base_oversubscribe="1")
        r = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True,
                           stdin=subprocess.DEVNULL)
        if r.returncode != 0:
            sys.stderr.write((r.stdout + r.stderr)[-3000:])
            raise SystemExit(f"doc_tables.py: failed ({r.returncode}): {' '.join(argv)}")
        return r.stdout

    def simulate(self, name, config, *sets):
        args = [config] + [x for s in sets for x in ("--set", s)]
        self.commands.append("syncopt simulate " + " ".join(args))
        run = os.path.join(self.work, name)
        argv = ["simulate", *args, "--set", f"run.dir={self.work}", "--set", f"run.name={name}",
                "--quiet"]
        if self.reuse and self._done(run, argv, None):
            return run
        self._run([syncopt_bin(), *argv], name)
        return run

    def train(self, np_, name, config, *sets):
        args = [config] + [x for s in sets for x in ("--set", s)]
        self.commands.append(f"mpirun -np {np_} syncopt train " + " ".join(args))
        run = os.path.join(self.work, name)
        argv = ["train", *args, "--set", f"run.dir={self.work}", "--set", f"run.name={name}",
                "--quiet"]
        if self.reuse and self._done(run, argv, "completed"):
            return run
        self._run(["mpirun", "--enable-recovery", "-np", str(np_), syncopt_bin(), *argv], name)
        status = syncopt_runs.load(run).summary.get("status")
        if status != "completed":
            raise SystemExit(f"doc_tables.py: run {name} ended {status}")
        return run

    @staticmethod
    def _done(run, argv, want):
        """A finished run of this very command line (--work with REUSE=1):
        want "completed" for a training, None for a simulation (its
        summary.json has no status; a killed one has no summary.json)."""
        try:
            with open(os.path.join(run, "run.json")) as f:
                launches = json.load(f)["launches"]
            with open(os.path.join(run, "summary.json")) as f:
                status = json.load(f).get("status")  # a simulation has none
        except (OSError, ValueError, KeyError):
            return False
        return status == want and launches[-1]["argv"][1:] == argv

    def plan(self, *args):
        out = os.path.join(self.work, f"plan-{len(self.commands)}.json")
        self.commands.append("syncopt plan " + " ".join(args))
        self._run([syncopt_bin(), "plan", *args, "--out", out], "plan")
        with open(out) as f:
            return json.load(f)


def col(key, header, src, fmt):
    return {"key": key, "header": header, "src": src, "fmt": fmt}


# --------------------------------------------------------------- the tables

def kth_rows(run_dir, ks):
    run = syncopt_runs.load(run_dir)
    per_k = run.kth_times()
    base = statistics.median(per_k[1])
    rows = []
    for k in ks:
        xs = per_k[k]
        med = statistics.median(xs)
        rows.append([k, statistics.fmean(xs), med, syncopt_runs.quantile(xs, 0.9), max(xs),
                     med / base])
    return rows


def seed_sets(seed):
    return [f"run.seed={seed}", f"stragglers.seed={seed}", f"sim.seed={seed}"]


def make_fig3_k100(r, size):
    """Seeds 1-5 of the K = 100 simulation (the straggler draws and compute
    times): each statistic's mean over the seeds, and the spread (sd over
    seeds) of the mean and p90."""
    ks = [1, 50, 90, 95, 96, 98, 100]
    per_seed = [kth_rows(r.simulate(f"fig3-k100-s{seed}", "configs/paper/fig3-k100-sim.toml",
                                    "train.steps=500", *seed_sets(seed)), ks)
                for seed in range(1, 6)]
    rows = []
    for i, k in enumerate(ks):
        stat = [[rows_[i][j] for rows_ in per_seed] for j in range(1, 6)]
        rows.append([k, statistics.fmean(stat[0]), statistics.stdev(stat[0]),
                     statistics.fmean(stat[1]), statistics.fmean(stat[2]),
                     statistics.stdev(stat[2]), statistics.fmean(stat[3]),
                     statistics.fmean(stat[4])])
    return {"columns": [col("k", "k", "clock", "d"), col("mean", "mean", "clock", ".3f"),
                        col("mean_sd", "± sd", "clock", ".3f"),
                        col("median", "median", "clock", ".3f"), col("p90", "p90", "clock", ".3f"),
                        col("p90_sd", "± sd", "clock", ".3f"), col("max", "max", "clock", ".3f"),
                        col("ratio", "median / median of k=1", "clock", ".2f")],
            "rows": rows}


NB_TARGET = 0.875
# A virtual-clock training at the test size: its times are the clock's, so
# neither the evaluation nor the size of the data set enters them; only
# their cost does (an mpirun of 7 ranks costs about 6 s of CPU even so).
TEST_TRAIN_SETS = ["eval.every_steps=0", "data.limit_train=1000", "data.limit_test=100"]


def make_nb_k6(r, size):
    """K = 6, N = 2..6 on the virtual clock; at the test size N = 4 (b = 2:
    a dropped straggler stays busy) only, 12 updates on 1,000 examples
    without evaluation: the virtual seconds per update, which every ISA gives
    alike and the data do not change (the suite cannot afford accuracies)."""
    runs = []
    sets = [] if size == "doc" else TEST_TRAIN_SETS + ["train.steps=12"]
    for n in (range(2, 7) if size == "doc" else (4,)):
        runs.append(r.train(7, f"nb-k6-n{n}", "configs/paper/nb-tradeoff.toml",
                            f"train.backups={6 - n}", *sets))
    rows = []
    for path in runs:
        run = syncopt_runs.load(path)
        per = run.mean_step_s()
        if size == "doc":
            got = run.time_to_accuracy(NB_TARGET, True)
            step = got[1] if got else None
            rows.append([run.n, run.b, step, per, step * per if step else None])
        else:
            rows.append([run.n, run.b, per])
    if size == "doc":
        plan = r.plan("-K", "6", "--runs", *runs, "--target-acc", str(NB_TARGET), "--ema")
        notes = {"fit_a": plan["iters_model"]["a"], "fit_c": plan["iters_model"]["c"],
                 "best_n": plan["best"]["N"], "best_time_s": plan["best"]["time_s"]}
        return {"columns": [col("n", "N", "clock", "d"), col("b", "b", "clock", "d"),
                            col("updates", "updates to target I(N)", "training", "d"),
                            col("step", "s per update T(N, b)", "clock", ".4f"),
                            col("time", "time to target (s, virtual)", "training", ".1f")],
                "rows": rows, "notes": notes, "best": {"column": "time", "least": True}}
    return {"columns": [col("n", "N", "clock", "d"), col("b", "b", "clock", "d"),
                        col("step", "s per update T(N, b)", "clock", ".4f")],
            "rows": rows}


K100 = ["-K", "100", "--iters", "14900,6130000"]


def plan_pair(r, steps, prob, sim_ns=None):
    """The two estimators of T(N, b) at K = 100: per-N simulation (of every
    N, or of the N in sim_ns, plan's --n) and the paper's (read off one
    b = 0 run)."""
    sets = [f"train.steps={steps}", f"stragglers.prob={prob}"]
    sim = r.plan(*K100, "--sim", "configs/paper/fig3-k100-sim.toml",
                 *[x for s in sets for x in ("--set", s)],
                 *(["--n", sim_ns] if sim_ns else []))
    b0 = r.simulate(f"k100-b0-p{prob}", "configs/paper/fig3-k100-sim.toml", *sets)
    paper = r.plan(*K100, "--runs", b0)
    return paper, sim


def make_plan_k100(r, size):
    """p = 5 %: 300 updates per simulation; at the test size 60, and only
    the N shown simulated."""
    if size == "doc":
        paper, sim = plan_pair(r, 300, 0.05)
    else:
        paper, sim = plan_pair(r, 60, 0.05, "50,81,85,89,90,94,96,100")
    by_n_p = {row["N"]: row for row in paper["rows"]}
    by_n_s = {row["N"]: row for row in sim["rows"]}
    ns = sorted(n for n in {50, 90, 94, 96, 100, paper["best"]["N"], sim["best"]["N"]}
                if n in by_n_s)
    rows = [[n, 100 - n, by_n_p[n]["step_s"], by_n_p[n]["time_s"] / 3600,
             by_n_s[n]["step_s"], by_n_s[n]["time_s"] / 3600] for n in ns]
    return {"columns": [col("n", "N", "clock", "d"), col("b", "b", "clock", "d"),
                        col("tp", "T(N, b) s, paper's estimator", "clock", ".3f"),
                        col("hp", "time (h)", "clock", ".1f"),
                        col("ts", "T(N, b) s, per-N simulation", "clock", ".3f"),
                        col("hs", "time (h)", "clock", ".1f")],
            "rows": rows, "best": {"column": "hp", "least": True, "also": "hs"}}


def make_plan_k100_p(r, size):
    steps = 300 if size == "doc" else 30
    rows = []
    for prob in (0.05, 0.02, 0.01, 0.005):
        # The test size simulates N = 80..100 only: the best N of each p is there.
        paper, sim = plan_pair(r, steps, prob, None if size == "doc" else "80:100")
        n96p = next(x for x in paper["rows"] if x["N"] == 96)["time_s"]
        n96s = next(x for x in sim["rows"] if x["N"] == 96)["time_s"]
        rows.append([100 * prob, paper["best"]["N"], paper["best"]["time_s"] / 3600,
                     sim["best"]["N"], sim["best"]["time_s"] / 3600,
                     n96p / paper["best"]["time_s"] - 1, n96s / sim["best"]["time_s"] - 1])
    return {"columns": [col("p", "p (%)", "clock", "g"),
                        col("np", "paper's estimator: best N", "clock", "d"),
                        col("hp", "time (h)", "clock", ".2f"),
                        col("ns", "per-N simulation: best N", "clock", "d"),
                        col("hs", "time (h)", "clock", ".2f"),
                        col("xp", "N = 96 against the best, paper's", "clock", "+.1%"),
                        col("xs", "N = 96 against the best, per-N sim.", "clock", "+.1%")],
            "rows": rows}


SHARD_S = [1, 2, 3, 4, 6, 8, 10, 13, 17, 20, 27, 37]
SHARD_PAPER = {53: 17, 106: 27, 212: 37}


def make_shards(r, size):
    """configs/paper/shards.toml as scripts/paper/shards.sh runs it (200
    updates a run): the mean step per K, S and placement; at the test size
    K = 212 (where the placements differ most), S = 1, 4 and 37, 30 updates
    a run."""
    import tables
    steps = 200 if size == "doc" else 30
    ks = (53, 106, 212) if size == "doc" else (212,)
    shard_s = SHARD_S if size == "doc" else [1, 4, 37]
    runs = []
    for k in ks:
        for s in shard_s:
            common = [f"sim.workers={k}", f"train.backups={3 * k // 53}", f"cluster.ps={s}",
                      f"sim.apply_ms={45.0 / s:.4f}", f"train.steps={steps}"]
            base = f"shards-k{k}-s{s}"
            runs.append(r.simulate(base + "-layers", "configs/paper/shards.toml", *common))
            runs.append(r.simulate(base + "-layers-alone", "configs/paper/shards.toml", *common,
                                   "train.agree_shards=false"))
            runs.append(r.simulate(base + "-layers-nopipe", "configs/paper/shards.toml", *common,
                                   "exchange.pipeline=false"))
            runs.append(r.simulate(base + "-split", "configs/paper/shards.toml", *common,
                                   "sim.param_count=11172810"))
    summary = tables.shards_summary(syncopt_runs.load_runs(runs), SHARD_PAPER)
    order = ["layers", "split", "layers, pipelined", "layers, pipelined, shards alone"]
    rows = []
    for s in shard_s:
        row = [s]
        for k in ks:
            for v in order:
                # S = 1: one shard agrees with itself, so "alone" is the same run
                # and shards_summary files it under "layers, pipelined".
                got = summary[k]["variants"].get(v, {}).get("rows", {}).get(s)
                row.append(got["mean_s"] if got else None)
        row.append(summary[ks[0]]["variants"]["layers"]["rows"][s]["max_slice"] / 1e6)
        rows.append(row)
    cols = [col("s", "S", "clock", "d")]
    short = {"layers": "layers", "split": "split", "layers, pipelined": "pipelined",
             "layers, pipelined, shards alone": "pipelined, alone"}
    for k in ks:
        cols += [col(f"k{k}-{short[v]}", f"K = {k}, {short[v]}", "clock", ".3f") for v in order]
    cols.append(col("slice", "largest slice (M floats)", "clock", ".2f"))
    knees = [[k, SHARD_PAPER[k]] + [x for v in order for x in
                                    (summary[k]["variants"][v]["knee_s"],
                                     summary[k]["variants"][v]["best_s"])]
             for k in ks]
    return {"columns": cols, "rows": rows, "knees": knees, "order": order}


AB_TARGET = 0.85


def parse_seeds(text):
    """SEEDS: "1-3", "1,3" or "1-2,5"."""
    out = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def make_adaptive(r, size):
    """configs/sweeps/paper-adaptive-b.txt's runs: every fixed b = 0..5 and
    auto under bernoulli and pareto stragglers; doc: seeds 1-3 (SEEDS=1-6
    for more) at 1.25 epochs, test: auto under bernoulli only, seed 1, 45
    updates without evaluation (auto decides at updates 20 and 40): its mean
    N and virtual seconds per update, which every ISA gives alike."""
    import tables
    seeds = parse_seeds(os.environ.get("SEEDS", "1-3")) if size == "doc" else [1]
    sets = ["train.epochs=1.25"] if size == "doc" else TEST_TRAIN_SETS + ["train.steps=45"]
    runs = []
    bs = ["0", "1", "2", "3", "4", "5", "auto"] if size == "doc" else ["auto"]
    for seed in seeds:
        for model in (("bernoulli", "pareto") if size == "doc" else ("bernoulli",)):
            for b in bs:
                runs.append(r.train(7, f"ab-{model}-b{b}-s{seed}", "configs/paper/adaptive-b.toml",
                                    f"train.backups={b}", f"run.seed={seed}",
                                    f"stragglers.seed={seed}", f"sim.seed={seed}", *sets,
                                    *AB_MODEL_SETS[model]))
    loaded = syncopt_runs.load_runs(runs)
    rows = []
    if size == "doc":
        summary = tables.adaptive_summary(loaded, AB_TARGET, True)
        for model in ("bernoulli", "pareto"):
            res = summary[model]
            for b in ["0", "1", "2", "3", "4", "5", "auto"]:
                e = res["entries"][b]
                ts = [x for x in e["times_s"] if x is not None]
                rows.append([model, b, e["mean_n"], e["time_s"],
                             statistics.stdev(ts) if len(ts) > 1 else None, e["times_s"],
                             e["steps"], e["time_s"] / res["best_s"], e["s_per_epoch"]])
        targets = []
        for t in (0.84, 0.845, 0.85, 0.855, 0.86):
            at = tables.adaptive_summary(loaded, t, True)
            targets += [[m, t, at[m].get("auto_over_best"), at[m].get("best_b")]
                        for m in ("bernoulli", "pareto")]
        return {"targets": targets,
                "columns": [col("model", "stragglers", "clock", "s"), col("b", "b", "clock", "s"),
                            col("mean_n", "mean N", "clock", ".2f"),
                            col("time", "time to target (s), mean", "training", ".1f"),
                            col("sd", "sd over seeds", "training", ".1f"),
                            col("seeds", "per seed (s)", "training", "list.1f"),
                            col("updates", "updates to target", "training", ".0f"),
                            col("ratio", "time / best fixed b", "training", ".3f"),
                            col("epoch", "s per epoch", "clock", ".1f")],
                "rows": rows}
    for run in loaded:
        rows.append([run.cfg("stragglers", "model"), str(run.cfg("train", "backups")),
                     run.mean_n(), run.mean_step_s()])
    return {"columns": [col("model", "stragglers", "clock", "s"), col("b", "b", "clock", "s"),
                        col("mean_n", "mean N", "clock", ".2f"),
                        col("step", "s per update", "clock", ".4f")],
            "rows": rows}


STRAGGLER_SCENARIOS = {
    "none": ["stragglers.model=none"],
    "bernoulli": ["stragglers.model=bernoulli", "stragglers.prob=0.2", "stragglers.factor=4"],
    "slow": ["stragglers.model=fixed", "stragglers.factor=3", "stragglers.workers=[99]"]}
STRAGGLER_MODES = {
    "allreduce": ["train.mode=allreduce"],
    "allreduce + budget": ["train.mode=allreduce", "train.micro_batch=8",
                           "train.compute_budget_ms=1071"],
    "allreduce + auto": ["train.mode=allreduce", "train.micro_batch=8",
                         "train.compute_budget_ms=auto"],
    "sync, b = 4": ["train.mode=sync", "train.backups=4"],
    "sync, b = 20": ["train.mode=sync", "train.backups=20"]}


def make_stragglers_k100(r, size):
    """scripts/paper/stragglers.sh's K = 100 simulations (configs/sim-k100.toml,
    300 updates over seeds 1-5 of the straggler draws and compute times; 60
    updates, seed 1, at the test size): each step's mean over the seeds and
    its sd, the ratio of that mean to the straggler-free allreduce step's,
    and what was lost (mean over the seeds)."""
    import stragglers_table
    rows, base = [], None
    steps, seeds = (300, range(1, 6)) if size == "doc" else (60, [1])
    for sc, sc_sets in STRAGGLER_SCENARIOS.items():
        for mode, mode_sets in STRAGGLER_MODES.items():
            figs = []
            for seed in seeds:
                run = r.simulate(f"k100-{sc}-{len(rows)}-s{seed}", "configs/sim-k100.toml",
                                 f"train.steps={steps}", *seed_sets(seed), "sim.records=shard0",
                                 *sc_sets, *mode_sets)
                with open(os.path.join(run, "summary.json")) as f:
                    figs.append(stragglers_table.figures(json.load(f)))
            step = statistics.fmean(g["step_s"] for g in figs)
            sd = statistics.stdev(g["step_s"] for g in figs) if len(figs) > 1 else None
            base = step if base is None else base
            rows.append([sc, mode, step, sd, step / base, statistics.fmean(g["lost"] for g in figs),
                         figs[0]["lost_what"] or None])
    return {"columns": [col("sc", "stragglers", "clock", "s"), col("mode", "mode", "clock", "s"),
                        col("step", "step (s), mean", "clock", ".3f"),
                        col("step_sd", "sd over seeds", "clock", ".3f"),
                        col("ratio", "x straggler-free", "clock", ".3f"),
                        col("lost", "lost", "clock", ".1%"),
                        col("what", "of", "clock", "s")],
            "rows": rows, "seeds": list(seeds)}


# The sweep file's per-model keys (configs/sweeps/paper-adaptive-b.txt).
AB_MODEL_SETS = {"bernoulli": [],
                 "pareto": ["stragglers.model=pareto", "stragglers.alpha=2.0",
                            "stragglers.mean_ms=100"]}


TABLES = {
    "fig3-k100": {"make": make_fig3_k100, "clock": "simulated", "test": "doc",
                  "what": "Figure 3, time to the k-th gradient, K = 100 simulated"},
    "nb-k6": {"make": make_nb_k6, "clock": "virtual", "test": "test",
              "what": "N and b at K = 6 on the virtual clock"},
    "plan-k100": {"make": make_plan_k100, "clock": "simulated", "test": "test",
                  "what": "syncopt plan -K 100, both estimators, p = 5 %"},
    "plan-k100-p": {"make": make_plan_k100_p, "clock": "simulated", "test": "test",
                    "what": "the best N at K = 100 for four straggler probabilities"},
    "shards": {"make": make_shards, "clock": "simulated", "test": "test",
               "what": "parameter-server shards against K, simulated"},
    "stragglers-k100": {"make": make_stragglers_k100, "clock": "simulated", "test": "test",
                        "what": "backups, a compute budget or neither at K = 100, simulated"},
    "adaptive-b": {"make": make_adaptive, "clock": "virtual", "test": "test",
                   "what": "adaptive b against every fixed b, virtual clock"},
}


# --------------------------------------------------------------- formatting

def fmt(v, f):
    if v is None:
        return "–"
    if f == "s":
        return str(v)
    if f == "d":
        return str(int(v))
    if f.startswith("list"):
        return ", ".join(fmt(x, f[4:]) for x in v)
    if f.endswith("%"):
        return format(v, f).replace("%", " %")
    return format(v, f)


def render(tid, data):
    """The Markdown of one table from its JSON's "doc" section."""
    d = data["doc"]
    custom = RENDER.get(tid)
    body = custom(d) if custom else plain_table(d)
    stamp = (f"<sub>docs/paper/{tid}.json: {d['clock']} clock, made {d['made'][:10]} at "
             f"{d['commit']} (`scripts/paper/doc_tables.py make {tid}`)</sub>")
    return body + "\n\n" + stamp


def md_table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def plain_table(d, rows=None):
    cols = d["columns"]
    rows = d["rows"] if rows is None else rows
    best = d.get("best")
    bold = {}
    for key in ([best["column"], best.get("also")] if best else []):
        if key is None:
            continue
        i = [c["key"] for c in cols].index(key)
        vals = [(row[i], j) for j, row in enumerate(rows) if row[i] is not None]
        bold[i] = min(vals)[1] if vals else None
    cells = [[("**" + fmt(v, c["fmt"]) + "**") if bold.get(i) == j else fmt(v, c["fmt"])
              for i, (v, c) in enumerate(zip(row, cols))] for j, row in enumerate(rows)]
    return md_table([c["header"] for c in cols], cells)


def adaptive_verdicts(d):
    """Per straggler model: auto against the best and worst fixed b (means
    over seeds), the spread of auto / best over the seeds, and auto's
    seconds per epoch against the fastest fixed b's."""
    out = []
    for model in ("bernoulli", "pareto"):
        rows = {r[1]: r for r in d["rows"] if r[0] == model}
        fixed = {b: r for b, r in rows.items() if b != "auto" and r[3] is not None}
        best = min(fixed, key=lambda b: fixed[b][3])
        worst = max(fixed, key=lambda b: fixed[b][3])
        auto = rows["auto"]
        ratio = auto[3] / fixed[best][3]
        per_seed = [a / f for a, f in zip(auto[5], fixed[best][5]) if a and f]
        fastest = min(fixed, key=lambda b: fixed[b][8])
        out.append([model, f"{ratio:.3f} (b = {best})",
                    f"{min(per_seed):.2f}-{max(per_seed):.2f}" if per_seed else "–",
                    "yes" if ratio <= 1.05 else "**no**",
                    f"{auto[3] / fixed[worst][3]:.3f} (b = {worst})",
                    f"{auto[8] / fixed[fastest][8]:.3f} (b = {fastest})"])
    return out


def render_adaptive(d):
    cols = d["columns"]
    parts = []
    for model in ("bernoulli", "pareto"):
        rows = [r for r in d["rows"] if r[0] == model]
        sub = dict(d, columns=cols[1:])
        parts.append(f"**{model}**\n\n" + plain_table(sub, [r[1:] for r in rows]))
    if d.get("targets"):
        ts = sorted({t for _, t, _, _ in d["targets"]})
        rows = [[f"{m}, auto / best fixed (b)"] +
                [next(f"{r:.3f} ({b})" if r else "–" for mm, tt, r, b in d["targets"]
                      if mm == m and tt == t) for t in ts] for m in ("bernoulli", "pareto")]
        parts.append("At nearby targets, the same runs:\n\n" +
                     md_table(["target"] + [f"{100 * t:g} %" for t in ts], rows))
    parts.append(md_table(["stragglers", "auto / best fixed b (means)",
                           "auto / that b, per seed", "within 5 %?", "auto / worst fixed b",
                           "s per epoch, auto / fastest fixed b"], adaptive_verdicts(d)))
    return "\n\n".join(parts)


# What tables.shards_summary's variants are, in the doc's words.
SHARD_NAMES = {"layers": "whole layers, unpipelined", "split": "equal slices, unpipelined",
               "layers, pipelined": "whole layers, pipelined (the default)",
               "layers, pipelined, shards alone": "pipelined, shards choosing alone"}


def render_shards(d):
    cols = d["columns"]
    rows = []
    for row in d["rows"]:
        cells = [fmt(row[0], "d")]
        for j in range(3):
            cells.append(" / ".join(fmt(x, ".3f") for x in row[1 + 4 * j:1 + 4 * j + 4]))
        cells.append(fmt(row[-1], ".2f"))
        rows.append(cells)
    names = [SHARD_NAMES.get(v, v) for v in d["order"]]
    order = " / ".join(names)
    top = md_table(["S", "K = 53", "K = 106", "K = 212", cols[-1]["header"]], rows)
    knee_header = ["K", "paper's S"] + [f"{v}: knee (best)" for v in names]
    knees = [[k, p] + [f"{d_knee} ({d_best})" for d_knee, d_best in zip(r[0::2], r[1::2])]
             for k, p, *r in d["knees"]]
    return (f"Mean seconds per update, {order}:\n\n" + top +
            "\n\nThe least S within 5 % of the best step time (the knee), and the best:\n\n" +
            md_table(knee_header, knees))


RENDER = {"adaptive-b": render_adaptive, "shards": render_shards}


# ------------------------------------------------------------ files and doc

def json_path(tid):
    return os.path.join(DATA, tid + ".json")


def load_data(tid):
    path = json_path(tid)
    if not os.path.exists(path):
        raise SystemExit(f"doc_tables.py: {path} missing: run scripts/paper/doc_tables.py make {tid}")
    with open(path) as f:
        return json.load(f)


# A block may be empty (a table not rendered yet), and never spans another
# block's marker.
MARK = re.compile(r"<!-- paper-table: ([a-z0-9-]+) -->\n((?:(?!<!-- /?paper-table).)*?)\n?"
                  r"<!-- /paper-table -->", re.S)


def doc_blocks(text):
    return {m.group(1): m.group(2) for m in MARK.finditer(text)}


def rewrite_doc(tids=None):
    with open(DOC) as f:
        text = f.read()

    def sub(m):
        tid = m.group(1)
        if tids is not None and tid not in tids:
            return m.group(0)
        data = load_data(tid)
        if "doc" not in data:  # not made at the doc size yet: check-doc says so
            return m.group(0)
        return f"<!-- paper-table: {tid} -->\n{render(tid, data)}\n<!-- /paper-table -->"
    new = MARK.sub(sub, text)
    if new != text:
        with open(DOC, "w") as f:
            f.write(new)


def generate(tid, size, work=None):
    spec = TABLES[tid]
    keep = work is not None
    if keep:
        os.makedirs(work, exist_ok=True)
    else:
        work = tempfile.mkdtemp(prefix=f"paper-{tid}-")
    try:
        r = Runner(os.path.abspath(work), reuse=keep and os.environ.get("REUSE") == "1")
        t0 = datetime.datetime.now(datetime.timezone.utc)
        load0 = load_average()
        out = spec["make"](r, size)
        out.update(size=size, clock=spec["clock"], commands=r.commands, commit=commit(),
                   made=t0.strftime("%Y-%m-%dT%H:%M:%SZ"), cpu=cpu_model(), isa=isa(),
                   load=f"{load0} -> {load_average()}",
                   seconds=round((datetime.datetime.now(datetime.timezone.utc) - t0)
                                 .total_seconds()),
                   regenerate=f"scripts/paper/doc_tables.py make {tid} --size {size}")
        return out
    finally:
        if not keep:
            shutil.rmtree(work, ignore_errors=True)


def canonical(x):
    """JSON round trip, so that fresh numbers compare as the kept ones read."""
    return json.loads(json.dumps(x))


def dump(data):
    """JSON with one line per row and per column: readable diffs in git."""
    out = ["{"]
    for si, (size, d) in enumerate(data.items()):
        out.append(f" {json.dumps(size)}: {{")
        items = list(d.items())
        for i, (k, v) in enumerate(items):
            end = "," if i + 1 < len(items) else ""
            if isinstance(v, list) and v:
                inner = ",\n".join("   " + json.dumps(x) for x in v)
                out.append(f"  {json.dumps(k)}: [\n{inner}\n  ]{end}")
            else:
                out.append(f"  {json.dumps(k)}: {json.dumps(v)}{end}")
        out.append(" }" + ("," if si + 1 < len(data) else ""))
    out.append("}")
    return "\n".join(out) + "\n"


def cmd_make(args):
    os.makedirs(DATA, exist_ok=True)
    path = json_path(args.id)
    sizes = ["doc", "test"] if args.size == "both" else [args.size]
    if TABLES[args.id]["test"] == "doc":
        sizes = ["doc"]
    for size in sizes:
        work = os.path.join(args.work, size) if args.work else None
        made = canonical(generate(args.id, size, work))
        data = {}
        if os.path.exists(path):  # read now: the other size may have been made meanwhile
            with open(path) as f:
                data = json.load(f)
        data[size] = made
        data = {k: data[k] for k in ("doc", "test") if k in data}
        with open(path, "w") as f:
            f.write(dump(data))
        print(f"{args.id} ({size}): {made['seconds']} s")
    if "doc" in data:
        rewrite_doc([args.id])
    return 0


def cmd_check_doc(_args):
    with open(DOC) as f:
        blocks = doc_blocks(f.read())
    bad = 0
    for tid in TABLES:
        if "doc" not in load_data(tid):
            # Kept at the test size only: docs/paper.md says why, and shows no block.
            if tid in blocks:
                print(f"docs/paper.md shows {tid}, whose JSON has no doc-size numbers")
                bad += 1
            continue
        if tid not in blocks:
            print(f"docs/paper.md shows no table {tid} (<!-- paper-table: {tid} --> missing)")
            bad += 1
            continue
        want = render(tid, load_data(tid))
        if blocks[tid] != want:
            bad += 1
            print(f"docs/paper.md's table {tid} differs from docs/paper/{tid}.json:")
            sys.stdout.writelines(difflib.unified_diff(
                blocks[tid].splitlines(True), want.splitlines(True), "docs/paper.md",
                f"docs/paper/{tid}.json"))
            print(f"\nrewrite it from the JSON: scripts/paper/doc_tables.py render")
    for tid in blocks:
        if tid not in TABLES:
            print(f"docs/paper.md marks a table {tid} that doc_tables.py does not know")
            bad += 1
    print(f"{len(TABLES) - bad} of {len(TABLES)} tables as their JSON" if not bad else "")
    return 1 if bad else 0


def compare(kept, fresh, here_isa):
    """(compared cells, differences, columns not comparable)."""
    cols = kept["columns"]
    if [c["key"] for c in cols] != [c["key"] for c in fresh["columns"]]:
        return 0, ["the columns differ: " + str([c["key"] for c in fresh["columns"]])], []
    same_isa = kept["isa"] == here_isa
    usable = [i for i, c in enumerate(cols) if c["src"] == "clock" or same_isa]
    skipped = [c["header"] for c in cols if not (c["src"] == "clock" or same_isa)]
    diffs, n = [], 0
    if len(kept["rows"]) != len(fresh["rows"]):
        diffs.append(f"{len(fresh['rows'])} rows, kept {len(kept['rows'])}")
    for j, (a, b) in enumerate(zip(kept["rows"], fresh["rows"])):
        for i in usable:
            n += 1
            if a[i] != b[i]:
                diffs.append(f"row {j + 1} ({a[0]}, {a[1]}), {cols[i]['header']}: kept {a[i]!r}, "
                             f"now {b[i]!r}")
    for key in ("notes", "knees", "targets"):
        if key in kept and canonical(kept[key]) != fresh.get(key):
            srcs = "clock" if key == "knees" else "training"
            if srcs == "clock" or same_isa:
                diffs.append(f"{key}: kept {kept[key]!r}, now {fresh.get(key)!r}")
    return n, diffs, skipped


def cmd_check(args):
    tid = args.id
    data = load_data(tid)
    size = TABLES[tid]["test"]
    if size not in data:
        print(f"docs/paper/{tid}.json has no {size} numbers: "
              f"scripts/paper/doc_tables.py make {tid} --size {size}")
        return 1
    kept = data[size]
    fresh = canonical(generate(tid, size))
    here = fresh["isa"]
    n, diffs, skipped = compare(kept, fresh, here)
    print(f"{tid} at its {size} size ({fresh['seconds']} s): {n} cells compared with "
          f"docs/paper/{tid}.json (made at {kept['commit']} on {kept['isa']})")
    if skipped:
        print(f"not comparable here (training columns, recorded on ISA {kept['isa']}, this "
              f"machine {here}): {', '.join(skipped)}")
    if diffs:
        print("DIFFERENT:\n  " + "\n  ".join(diffs))
        print(f"\nThe code moved these numbers. If that is intended, regenerate the table "
              f"and its text:\n  scripts/paper/doc_tables.py make {tid} --size both\n"
              f"then read docs/paper.md's conclusions against the new numbers.")
        return 1
    if n == 0:
        print("nothing compared: skipped")
        return SKIP
    print("same numbers")
    return 0


def cmd_list(_args):
    for tid, spec in TABLES.items():
        print(f"{tid:12s} {spec['clock']:9s} test at the {spec['test']} size: {spec['what']}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("list")
    m = sub.add_parser("make")
    m.add_argument("id", choices=sorted(TABLES))
    m.add_argument("--size", choices=["doc", "test", "both"], default="both")
    m.add_argument("--work", help="keep the runs in WORK/<size> (REUSE=1: and reuse the completed "
                   "runs of the same command line there)")
    sub.add_parser("render")
    sub.add_parser("check-doc")
    c = sub.add_parser("check")
    c.add_argument("id", choices=sorted(TABLES))
    args = p.parse_args()
    if args.cmd == "render":
        rewrite_doc()
        return 0
    return {"list": cmd_list, "make": cmd_make, "check-doc": cmd_check_doc,
            "check": cmd_check}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
