#!/usr/bin/env python3
"""Reading syncopt run directories from Python: the records as tables
(pandas DataFrames when pandas is installed, lists of dicts otherwise), the
run's config, run.json and summary.json as dicts, the numbers that
scripts/plot.py and the paper scripts (scripts/paper/) compute from them (in
one place, so that a table and a figure never disagree), and an export to
MLflow's file store. Standard library only (tomllib: Python 3.11+): pandas
and MLflow are used when present, never needed.

    import sys; sys.path.insert(0, "scripts")   # or PYTHONPATH=scripts
    import syncopt_runs
    run = syncopt_runs.load("runs/fmnist-sync")
    run.status, run.why              # completed | stopped | failed | running | paused | killed | unknown
    run.summary, run.run_json, run.config   # summary.json, run.json, config.toml as dicts
    steps = run.steps_table()        # one row per update per shard (its fields, grads = count, dropped)
    grads = run.grads_table()        # one row per gradient: step, shard, worker, arrival_s, accepted, ...
    evals = run.evals_table()        # one row per evaluation: step, wall_s, test_acc, test_acc_ema, ...
    both = syncopt_runs.evals_table(syncopt_runs.load_runs(["runs/a", "runs/b"]))  # with a run column
    syncopt_runs.export_mlflow(run, "mlruns")   # then: mlflow ui --backend-store-uri mlruns

Each *_table() takes as_frame=None (a DataFrame if pandas imports, else a
list of dicts), True (a DataFrame, or RunError without pandas) or False.
From the shell: `python3 scripts/syncopt_runs.py mlflow RUN... [--to mlruns]
[--experiment syncopt]`. docs/outputs.md has every field.

A run directory holds config.toml, run.json (how and where it was started),
steps.jsonl (one record per update per shard), eval.jsonl (test accuracy of
theta and of its EMA) and, once it has ended, summary.json; docs/outputs.md
has the fields. A run without summary.json (still running, paused, killed)
is read from its records and marked incomplete, with the reason (Run.status,
Run.why): the same verdict as `syncopt report`.

Time axis. A record's t_start and t_apply are on the run's own clock:
real seconds for train.clock = "wall", modelled seconds for "virtual" (the
straggler delays and compute times are drawn, not slept) and for `syncopt
simulate` ("simulated"). eval.jsonl's wall_s is always real time, so on a
virtual or simulated clock an evaluation's time is the t_apply of the update
that made its step (step 0: time 0). See eval_series().
"""
import argparse
import datetime
import json
import os
import shutil
import socket
import statistics
import sys
import time
import tomllib
import uuid
from collections import defaultdict

MODELLED_CLOCKS = ("virtual", "simulated")
# Modes whose updates wait for gradients of one version (time to the k-th
# gradient is defined); in the others every gradient is its own update.
VERSIONED_MODES = ("sync", "timeout")


def pyplot(prog):
    """matplotlib.pyplot with the Agg backend, for a script named prog.
    Debian's matplotlib lives with Debian's python; when another python3 is
    first on PATH (pyenv, a venv) the script is run again with that one."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        if os.path.realpath(sys.executable) != os.path.realpath("/usr/bin/python3") and \
                os.path.exists("/usr/bin/python3"):
            os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
        sys.exit(f"{prog}: matplotlib is missing; install it with apt-get install "
                 "python3-matplotlib")


class RunError(Exception):
    """A run directory that cannot be read; the message says which file and why."""


def read_jsonl(path, partial_tail=False):
    """The records of a JSON Lines file. partial_tail: a last line without
    its newline (a run still writing, or killed mid-write) is left out
    rather than an error."""
    out = []
    with open(path) as f:
        lines = f.read().split("\n")
    # The text after the last newline is a torn record if it is not empty.
    torn = lines.pop() if lines else ""
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise RunError(f"{path}:{n}: not a JSON record ({e})") from e
    if torn.strip():
        try:
            out.append(json.loads(torn))
        except json.JSONDecodeError as e:
            if not partial_tail:
                raise RunError(f"{path}:{len(lines) + 1}: not a JSON record ({e})") from e
    return out


def _age(seconds):
    if seconds is None:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _process_state(pid):
    """'R', 'S', 'T' (stopped), ... of a live process whose command line
    names syncopt, or None when no such process exists."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"syncopt" not in f.read():
                return None
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def latest_checkpoint(path):
    try:
        with open(os.path.join(path, "checkpoints", "latest")) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def run_status(run):
    """(status, why) of a run, as `syncopt report` says it (lib/rundir/meta.cpp):
    completed | stopped | failed from summary.json; without one, running |
    paused | killed when rank 0 ran on this host (run.json names its host and
    pid), else unknown."""
    s = run.summary
    ckpt = latest_checkpoint(run.path)
    resume = (f"; resume from its checkpoint at step {ckpt} with --set run.resume=true"
              if ckpt is not None else "")
    if s:
        status = s.get("status", "completed")
        if status == "completed":
            return "completed", ""
        if status == "stopped":
            return "stopped", f"stopped ({s.get('stopped', 'by a signal')}) before the end" + resume
        return status, (f"{status} with exit code {s.get('exit_code', '?')}: "
                        f"{s.get('error', 'see its log')}")
    age = _age(run.last_record_age_s())
    launch = run.launch()
    host, pid = launch.get("host"), launch.get("pid")
    if host is None or pid is None:
        return "unknown", (f"no summary.json (and no run.json): still running, or killed; "
                           f"its last record was written {age} ago")
    if host != socket.gethostname():
        return "unknown", (f"no summary.json: still running on {host} (rank 0, pid {pid}), "
                           f"or ended there without one (killed); its last record was "
                           f"written {age} ago")
    state = _process_state(pid)
    if state == "T":
        return "paused", (f"no summary.json: rank 0 (pid {pid}) is stopped (SIGSTOP or a "
                          f"suspended job); its last record was written {age} ago")
    if state is not None:
        return "running", (f"no summary.json yet: running as pid {pid}; its last record "
                           f"was written {age} ago")
    return "killed", (f"no summary.json: rank 0 (pid {pid} on {host}) is gone without "
                      f"writing one (killed by a signal, out of memory, or its job ended); "
                      f"its last record was written {age} ago" + resume)


class Run:
    """One run directory, read once. A finished run is read from its
    summary.json; one without (running, paused, killed) from its records,
    config.toml and run.json, with status and why saying what became of it."""

    def __init__(self, path):
        self.path = os.path.normpath(path)
        self.name = os.path.basename(self.path)
        summary = os.path.join(self.path, "summary.json")
        steps = os.path.join(self.path, "steps.jsonl")
        if not os.path.exists(summary) and not os.path.exists(steps):
            raise RunError(f"{summary} not found, nor steps.jsonl: {self.path} is not a run "
                           "directory (give runs/<name>)")
        self.summary = {}
        if os.path.exists(summary):
            try:
                with open(summary) as f:
                    self.summary = json.load(f)
            except json.JSONDecodeError as e:
                raise RunError(f"{summary}: not JSON ({e})") from e
        # A run being written, or killed, may end in half a line: keep what
        # is whole. A completed run's records are whole, or corrupt.
        torn_ok = self.summary.get("status", "completed") != "completed" or not self.summary
        self.steps = read_jsonl(steps, partial_tail=torn_ok) if os.path.exists(steps) else []
        self.shard0 = sorted((r for r in self.steps if r.get("shard", 0) == 0),
                             key=lambda r: r["step"])
        evals = os.path.join(self.path, "eval.jsonl")
        self.evals = sorted(read_jsonl(evals, partial_tail=torn_ok),
                            key=lambda e: e["step"]) if os.path.exists(evals) else []
        config = os.path.join(self.path, "config.toml")
        self.config = {}
        if os.path.exists(config):
            try:
                with open(config, "rb") as f:
                    self.config = tomllib.load(f)
            except tomllib.TOMLDecodeError as e:
                raise RunError(f"{config}: not TOML ({e})") from e
        self.run_json = {}
        run_json = os.path.join(self.path, "run.json")
        if os.path.exists(run_json):
            try:
                with open(run_json) as f:
                    self.run_json = json.load(f)
            except json.JSONDecodeError:
                self.run_json = {}  # being rewritten: only the verdict below needs it
        self.status, self.why = run_status(self)

    @property
    def incomplete(self):
        return self.status != "completed"

    def launch(self):
        """The latest launch of run.json (its host, pid, layout), or {}."""
        launches = self.run_json.get("launches") or [{}]
        return launches[-1]

    # The records as tables.
    def steps_table(self, as_frame=None):
        """One row per update record (every shard): its fields without
        grads, plus grads (the number received) and dropped (of those, not
        accepted), as `syncopt export --csv` writes steps.csv."""
        rows = []
        for r in self.steps:
            row = {k: v for k, v in r.items() if k != "grads"}
            grads = r.get("grads", [])
            row["grads"] = len(grads)
            row["dropped"] = sum(1 for g in grads if not g.get("accepted", True))
            rows.append(row)
        return table(rows, as_frame)

    def grads_table(self, as_frame=None):
        """One row per gradient that reached a shard: step, shard, then its
        fields (worker, arrival_s, version, accepted, staleness, ...)."""
        rows = [dict({"step": r["step"], "shard": r.get("shard", 0)}, **g)
                for r in self.steps for g in r.get("grads", [])]
        return table(rows, as_frame)

    def evals_table(self, as_frame=None):
        """One row per evaluation, as eval.jsonl has it."""
        return table([dict(e) for e in self.evals], as_frame)

    # What the run was.
    def cfg(self, section, key, default=None):
        return self.config.get(section, {}).get(key, default)

    @property
    def clock(self):
        return self.summary.get("clock") or self.cfg("train", "clock", "wall")

    def _layout(self, key):
        return self.launch().get("layout", {}).get(key)

    @property
    def mode(self):
        return self.summary.get("mode") or self._layout("mode") or self.cfg("train", "mode", "?")

    @property
    def workers(self):
        w = self.summary.get("workers") or self._layout("workers")
        if w is None and self.steps:
            w = len({g["worker"] for r in self.steps for g in r["grads"]})
        return w

    @property
    def adaptive(self):
        return self.cfg("train", "backups") == "auto"

    @property
    def n(self):
        n = self.summary.get("N") or self._layout("N")
        if n is None and self.shard0:
            n = max(r.get("used", 1) for r in self.shard0)
        return n

    @property
    def b(self):
        if self.adaptive:
            return "auto"
        b = self.summary.get("b")
        if b is None:
            b = self._layout("b")
        if b is None and self.n is not None and self.workers is not None:
            b = max(0, self.workers - self.n) if self.mode in VERSIONED_MODES else 0
        return b

    def mean_n(self):
        """The mean N over the updates (differs from the summary's N under b = auto)."""
        ns = [r.get("n", r.get("used")) for r in self.shard0]
        ns = [n for n in ns if n is not None]
        return statistics.fmean(ns) if ns else None

    def label(self):
        """name: mode, N, b (what a legend or a table row says)."""
        parts = [self.mode]
        if self.mode in VERSIONED_MODES:
            if self.adaptive:
                mn = self.mean_n()
                parts.append("b=auto" + (f" (mean N={mn:.1f})" if mn is not None else ""))
            else:
                parts.append(f"N={self.n}, b={self.b}")
        elif self.workers is not None:
            parts.append(f"K={self.workers}")
        if self.clock != "wall":
            parts.append(f"{self.clock} clock")
        if self.incomplete:
            parts.append(self.status)
        return f"{self.name}: " + ", ".join(parts)

    # Times.
    def apply_times(self):
        """step -> t_apply at shard 0, on the run's clock."""
        return {r["step"]: r["t_apply"] for r in self.shard0}

    def eval_series(self, ema=True):
        """[(step, time_s, accuracy)] of every evaluation, time on the run's clock.

        Wall clock: eval.jsonl's wall_s (the same origin as the records').
        Virtual or simulated clock: the t_apply of the update that made the
        evaluated step; evaluations of a step without a record are left out.
        """
        key = "test_acc_ema" if ema else "test_acc"
        t_apply = self.apply_times() if self.clock in MODELLED_CLOCKS else None
        out = []
        for e in self.evals:
            if key not in e:
                continue
            if t_apply is None:
                t = e["wall_s"]
            elif e["step"] == 0:
                t = 0.0
            elif e["step"] in t_apply:
                t = t_apply[e["step"]]
            else:
                continue
            out.append((e["step"], t, e[key]))
        return out

    def time_to_accuracy(self, target, ema=True):
        """(time_s, step) of the first evaluation at or above target, else None."""
        for step, t, acc in self.eval_series(ema):
            if acc >= target:
                return t, step
        return None

    def epoch_at(self, step):
        """Epochs of accepted examples when `step` was evaluated (eval.jsonl's
        epoch), or None."""
        for e in self.evals:
            if e["step"] == step and "epoch" in e:
                return e["epoch"]
        return None

    def step_times(self):
        """Seconds of every update at shard 0: t_apply - t_start (the next
        step starts at t_apply in sync modes; in async modes t_start is the
        previous update's apply)."""
        return [r["t_apply"] - r["t_start"] for r in self.shard0]

    def mean_step_s(self):
        """Mean seconds per update after the first (which carries the
        start-up), as `syncopt plan` measures it."""
        t = sorted(r["t_apply"] for r in self.shard0)
        return (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None

    def span_s(self):
        """Training time on the run's clock: the last update's t_apply."""
        return self.shard0[-1]["t_apply"] if self.shard0 else None

    def s_per_epoch(self):
        """Seconds on the run's clock per epoch of accepted examples (the
        training span over summary.json's epochs)."""
        epochs, span = self.summary.get("epochs"), self.span_s()
        return span / epochs if epochs and span else None

    def last_record_age_s(self):
        """Seconds since steps.jsonl (or eval.jsonl) was last written."""
        ages = []
        for f in ("steps.jsonl", "eval.jsonl"):
            p = os.path.join(self.path, f)
            if os.path.exists(p):
                ages.append(time.time() - os.path.getmtime(p))
        return min(ages) if ages else None

    def kth_times(self):
        """{k: [seconds from a version's start to its k-th gradient]} (k from
        1), from shard 0's records; {} in modes without versions. A gradient
        that reached the shard during a later step (dropped, late) counts
        for its own version."""
        if self.mode not in VERSIONED_MODES:
            return {}
        start = {r["version"]: r["t_start"] for r in self.shard0}
        per_version = defaultdict(list)
        for r in self.shard0:
            for g in r["grads"]:
                v = g["version"]
                if v in start:
                    per_version[v].append(r["t_start"] + g["arrival_s"] - start[v])
        per_k = defaultdict(list)
        for times in per_version.values():
            for k, t in enumerate(sorted(times), 1):
                per_k[k].append(t)
        return dict(per_k)

    def layer_staleness(self):
        """Async and ssp with the pipelined exchange (each bucket of layers
        applied on arrival): [(shard, bucket, layers, [staleness of every
        applied gradient's bucket])] in forward order, bucket 0 of shard 0
        (the network's first layers) first; layers is the bucket's layer
        span from summary.json ("conv1..bn1"), or None. [] for a run without
        per-layer records."""
        per = defaultdict(list)
        for r in self.steps:
            for g in r["grads"]:
                if not g.get("accepted"):
                    continue
                for b, s in enumerate(g.get("layer_staleness", [])):
                    per[(r.get("shard", 0), b)].append(s)
        names = {(e["shard"], e["bucket"]): e.get("layers")
                 for e in self.summary.get("staleness_by_layer") or []}
        return [(shard, b, names.get((shard, b)), per[(shard, b)]) for shard, b in sorted(per)]


def quantile(xs, q):
    """The q-quantile of xs by linear interpolation (numpy's default)."""
    s = sorted(xs)
    if not s:
        return None
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def load(path):
    """The run directory `path` as a Run (RunError when it is not one)."""
    return Run(path)


def load_runs(paths):
    return [Run(p) for p in paths]


def table(rows, as_frame=None):
    """rows (a list of dicts) as a pandas DataFrame (as_frame True, or None
    when pandas imports) or as they are (False, or None without pandas)."""
    if as_frame is False:
        return rows
    try:
        import pandas
    except ImportError:
        if as_frame:
            raise RunError("pandas is not installed (pip install pandas); "
                           "as_frame=False gives lists of dicts") from None
        return rows
    return pandas.DataFrame(rows)


def evals_table(runs, as_frame=None):
    """The evaluations of several runs in one table, with a run column."""
    return table([dict({"run": r.name}, **e) for r in runs for e in r.evals], as_frame)


# MLflow's file store (what `mlflow ui --backend-store-uri DIR` and
# mlflow.MlflowClient("file:DIR") read): DIR/<experiment id>/meta.yaml, and
# per run DIR/<experiment id>/<run id>/ with meta.yaml, metrics/<key> (lines
# "timestamp_ms value step"), params/<key>, tags/<key> and artifacts/.
MLFLOW_STATUS = {"completed": 3, "stopped": 5, "failed": 4, "killed": 4, "running": 1,
                 "paused": 1, "unknown": 1}  # FINISHED, KILLED, FAILED, RUNNING


def _yaml(d):
    out = []
    for k, v in d.items():
        if isinstance(v, str):
            v = "'" + v.replace("'", "''") + "'"
        elif v is None:
            v = "null"
        elif v == []:
            v = "[]"
        out.append(f"{k}: {v}")
    return "\n".join(out) + "\n"


def _read_yaml_name(path):
    """The name: of an experiment's meta.yaml (the store's own, written by
    MLflow or by us: one key a line)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("name:"):
                    return line.split(":", 1)[1].strip().strip("'\"")
    except OSError:
        pass
    return None


def _experiment_dir(store, name):
    """The folder of the experiment called `name` in the store, made if new."""
    os.makedirs(store, exist_ok=True)
    ids = []
    for e in os.listdir(store):
        meta = os.path.join(store, e, "meta.yaml")
        if e.isdigit() and os.path.exists(meta):
            ids.append(int(e))
            if _read_yaml_name(meta) == name:
                return os.path.join(store, e), e
    exp_id = str(max(ids) + 1 if ids else 1)
    path = os.path.join(store, exp_id)
    os.makedirs(path)
    now = int(time.time() * 1000)
    with open(os.path.join(path, "meta.yaml"), "w") as f:
        f.write(_yaml({"artifact_location": "file://" + os.path.abspath(path),
                       "creation_time": now, "experiment_id": exp_id, "last_update_time": now,
                       "lifecycle_stage": "active", "name": name}))
    return path, exp_id


def _flat_params(config, prefix=""):
    out = {}
    for k, v in config.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flat_params(v, key + "."))
        else:
            out[key] = json.dumps(v) if isinstance(v, (list, dict)) else str(v).lower() \
                if isinstance(v, bool) else str(v)
    return out


def export_mlflow(run, store="mlruns", experiment="syncopt"):
    """Writes `run` into the MLflow file store `store` as a run of the
    experiment `experiment` (made if new): every config key as a parameter
    (train.mode, optim.lr, ...), per update of shard 0 the metrics loss, lr,
    step_time_s, gradients_used and dropped, per evaluation test_acc,
    test_acc_ema, test_loss, test_loss_ema, summary.json's numbers as
    summary.<key> at the last step, tags (status, mode, host, git commit)
    and config.toml, run.json and summary.json as artifacts. The MLflow run
    id is derived from run.json's run_id, so exporting a run again replaces
    its earlier export. Returns the run id."""
    exp_dir, exp_id = _experiment_dir(store, experiment)
    key = run.run_json.get("run_id") or os.path.abspath(run.path)
    run_id = uuid.uuid5(uuid.NAMESPACE_URL, "syncopt:" + key).hex
    rdir = os.path.join(exp_dir, run_id)
    if os.path.isdir(rdir):
        shutil.rmtree(rdir)
    for sub in ("metrics", "params", "tags", "artifacts"):
        os.makedirs(os.path.join(rdir, sub))
    launches = run.run_json.get("launches") or [{}]
    try:  # the first launch's start (ISO 8601, UTC), else config.toml's age
        start_ms = int(datetime.datetime.fromisoformat(launches[0]["start_utc"]).timestamp() * 1000)
    except (KeyError, TypeError, ValueError):
        cfg_path = os.path.join(run.path, "config.toml")
        start_ms = int(1000 * (os.path.getmtime(cfg_path) if os.path.exists(cfg_path) else time.time()))
    metrics = defaultdict(list)
    for r in run.shard0:
        ms = start_ms + int(1000 * r.get("t_apply", 0))
        for name, value in (("loss", r.get("loss")), ("lr", r.get("lr")),
                            ("step_time_s", r.get("t_apply", 0) - r.get("t_start", 0)),
                            ("gradients_used", r.get("used", r.get("n"))),
                            ("dropped", sum(1 for g in r.get("grads", []) if not g.get("accepted", True)))):
            if isinstance(value, (int, float)):
                metrics[name].append((ms, float(value), r["step"]))
    for e in run.evals:
        ms = start_ms + int(1000 * e.get("wall_s", 0))
        for name in ("test_acc", "test_acc_ema", "test_loss", "test_loss_ema"):
            if isinstance(e.get(name), (int, float)):
                metrics[name].append((ms, float(e[name]), e["step"]))
    last = run.shard0[-1]["step"] if run.shard0 else 0
    end_ms = start_ms + int(1000 * (run.summary.get("wall_s") or 0))
    for k, v in run.summary.items():
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            metrics["summary." + k].append((end_ms, float(v), last))
    for name, points in metrics.items():
        with open(os.path.join(rdir, "metrics", name), "w") as f:
            f.writelines(f"{ms} {repr(v)} {step}\n" for ms, v, step in points)
    for name, value in _flat_params(run.config).items():
        with open(os.path.join(rdir, "params", name), "w") as f:
            f.write(value)
    tags = {"mlflow.runName": run.name, "mlflow.source.name": "syncopt",
            "syncopt.status": run.status, "syncopt.mode": str(run.mode),
            "syncopt.run_dir": os.path.abspath(run.path)}
    build = launches[-1].get("syncopt") or {}
    if build.get("git_commit"):
        tags["mlflow.source.git.commit"] = str(build["git_commit"])
    if launches[-1].get("host"):
        tags["syncopt.host"] = str(launches[-1]["host"])
    for name, value in tags.items():
        with open(os.path.join(rdir, "tags", name), "w") as f:
            f.write(value)
    for name in ("config.toml", "run.json", "summary.json"):
        if os.path.exists(os.path.join(run.path, name)):
            shutil.copy(os.path.join(run.path, name), os.path.join(rdir, "artifacts", name))
    with open(os.path.join(rdir, "meta.yaml"), "w") as f:
        f.write(_yaml({"artifact_uri": "file://" + os.path.abspath(os.path.join(rdir, "artifacts")),
                       "end_time": end_ms if run.summary else None, "entry_point_name": "",
                       "experiment_id": exp_id, "lifecycle_stage": "active", "run_id": run_id,
                       "run_name": run.name, "run_uuid": run_id, "source_name": "",
                       "source_type": 4, "source_version": "", "start_time": start_ms,
                       "status": MLFLOW_STATUS.get(run.status, 1), "tags": [],
                       "user_id": os.environ.get("USER", "syncopt")}))
    return run_id


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="syncopt_runs.py", description="syncopt run directories from the shell.")
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mlflow", help="export runs to MLflow's file store")
    m.add_argument("runs", nargs="+", help="run directories (runs/<name>)")
    m.add_argument("--to", default="mlruns", help="the store (default mlruns)")
    m.add_argument("--experiment", default="syncopt", help="experiment name (default syncopt)")
    args = ap.parse_args(argv)
    try:
        for r in load_runs(args.runs):
            run_id = export_mlflow(r, args.to, args.experiment)
            print(f"{r.path} -> {args.to} (experiment {args.experiment}, run {run_id}, {r.status})")
    except RunError as e:
        print(f"syncopt_runs.py: {e}", file=sys.stderr)
        return 66
    print(f"mlflow ui --backend-store-uri {args.to}   # to browse them")
    return 0


if __name__ == "__main__":
    sys.exit(main())
