#!/usr/bin/env python3
"""Real runs read back by the real TensorBoard (CTest tensorboard_runs).

    check_runs.py --syncopt EXE --mpirun MPIRUN --config SMOKE_TOML --workdir DIR

Trains small runs under DIR/runs (local; sync with b = 1 evaluating at shard
0; async with an evaluator rank, whose evaluations go to a second events
file; allreduce; a local one with run.tensorboard = false) and simulates one
(`syncopt simulate`, sync with b = 2 of 6, no evaluations), then reads
every run's tb/ with TensorBoard's EventAccumulator and checks it against the
run's own records, value by value:

  steps.jsonl (shard 0), per step, exactly once:
    train/loss, train/lr        the record's loss and lr (float32)
    train/steps_per_s           1 / the smoothed step time from t_apply
    sync/gradients_used         the record's used
    sync/drops                  its gradients not accepted
    sync/staleness_mean         mean staleness of the accepted ones
    sync/time_to_kth            arrival of the last accepted one
    sync/arrival_s              histogram: num = the record's gradients,
                                min, max, sums and buckets of their arrivals
    sync/staleness_by_layer/<b>-<layers>
                                the async run, each layer its own bucket of
                                the pipelined exchange: the mean of the
                                accepted gradients' layer_staleness[b]
    wall time                   t_apply on the calendar: the differences
                                between steps are t_apply's
  eval.jsonl, per line in order:
    eval/test_acc, eval/test_acc_ema, eval/test_loss, eval/test_loss_ema

and that TensorBoard's plugin multiplexer over DIR/runs (what `tensorboard
--logdir DIR/runs` serves) lists the runs side by side with those tags, and
no run for the one with run.tensorboard = false. Every trained run also
describes itself once: its config.toml as the text run/config (Text tab),
its command line as run/command, and every key of config.toml as an hparam
of the HParams plugin's session (parsed with the plugin's own protobuf
module), value by value. Without the tensorboard
package this fails (read_events.py exits 1 on import): never a skip.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import read_events  # noqa: E402  (exits 1 without tensorboard)
from read_events import Failures, float32  # noqa: E402

from tensorboard.backend.event_processing import plugin_event_multiplexer  # noqa: E402
from tensorboard.plugins.hparams import plugin_data_pb2  # noqa: E402
from tensorboard.util import tensor_util  # noqa: E402
import tomllib  # noqa: E402

STEP_SCALARS = [
    "train/loss",
    "train/lr",
    "train/steps_per_s",
    "sync/gradients_used",
    "sync/drops",
    "sync/staleness_mean",
    "sync/time_to_kth",
]
EVAL_SCALARS = ["eval/test_acc", "eval/test_acc_ema", "eval/test_loss", "eval/test_loss_ema"]
HISTOGRAMS = ["sync/arrival_s"]
RATE_WEIGHT = 0.1  # lib/metrics/run_board.cpp's kRateWeight

COMMON = [
    "--quiet",
    "--set", "model.name=mlp",
    "--set", "train.steps=40",
    "--set", "eval.every_steps=10",
]
# name -> (ranks, overrides); ranks 0 = the local trainer without mpirun,
# "sim" = syncopt simulate.
RUNS = {
    "local": (0, ["--set", "train.mode=local"]),
    "sync": (4, ["--set", "train.mode=sync", "--set", "train.backups=1",
                 "--set", "cluster.evaluator=false"]),
    # Each of the MLP's two layers its own bucket, applied on arrival.
    "async-evaluator": (5, ["--set", "train.mode=async", "--set", "cluster.evaluator=true",
                            "--set", "exchange.bucket_bytes=1"]),
    "allreduce": (2, ["--set", "train.mode=allreduce"]),
    "off": (0, ["--set", "train.mode=local", "--set", "run.tensorboard=false"]),
    "sim": ("sim", ["--set", "train.mode=sync", "--set", "train.backups=2",
                    "--set", "sim.workers=6"]),
}
# The events files each run's tb/ must hold, by file-name tag.
FILE_TAGS = {
    "local": ["steps"],
    "sync": ["steps"],
    "async-evaluator": ["eval", "steps"],
    "allreduce": ["steps"],
    "sim": ["sim"],
}


def train(args, runs_dir, name):
    ranks, overrides = RUNS[name]
    command = "simulate" if ranks == "sim" else "train"
    cmd = [args.syncopt, command, args.config, "--set", f"run.dir={runs_dir}",
           "--set", f"run.name={name}"] + COMMON + overrides
    if ranks and ranks != "sim":
        cmd = [args.mpirun, "-np", str(ranks)] + cmd
    t0 = time.time()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if out.returncode != 0:
        sys.stdout.write(out.stdout + out.stderr)
        sys.exit(f"check_runs.py: run {name} failed ({out.returncode}): {' '.join(cmd)}")
    print(f"trained {name} in {time.time() - t0:.1f}s")


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)


def check_scalar(f, where, got, want):
    """got: [step, wall, value] events; want: [(step, value)] in order."""
    if not f.check(len(got) == len(want), f"{where}: {len(got)} events, want {len(want)}"):
        return
    for (gstep, _w, gvalue), (step, value) in zip(got, want):
        f.check(
            (gstep, gvalue) == (step, float32(value)),
            f"{where}: read step {gstep} = {gvalue!r}, steps.jsonl/eval.jsonl has step {step} = "
            f"{value!r} (float32 {float32(value)!r})",
        )


def expected_rates(records):
    """train/steps_per_s as RunBoard computes it (same double arithmetic)."""
    rates, step_s, last_step, last_apply = [], 0.0, 0, 0.0
    for r in records:
        if last_step > 0 and r["step"] > last_step:
            dt = (r["t_apply"] - last_apply) / (r["step"] - last_step)
        else:
            dt = r["t_apply"] - r["t_start"]
        if dt > 0.0:
            step_s = (1.0 - RATE_WEIGHT) * step_s + RATE_WEIGHT * dt if step_s > 0.0 else dt
        last_step, last_apply = r["step"], r["t_apply"]
        rates.append((r["step"], 1.0 / step_s if step_s > 0.0 else None))
    return rates


# The per-layer staleness tags of the async run (model mlp: fc1, fc2).
LAYER_TAGS = ["sync/staleness_by_layer/00-fc1", "sync/staleness_by_layer/01-fc2"]


# The workers of each run that measure their phases (grads[].phases): the
# ranks/* scores are theirs (lib/metrics/run_board.cpp).
SCORED_WORKERS = {"sync": 3, "async-evaluator": 3, "allreduce": 2}
# Phases in which a rank waits for the others (metrics::waits_for_others).
WAIT_PHASES = {"reduce", "wait"}


def scored_workers(name, records):
    """The workers whose scores the run's board must carry. In sync and
    allreduce every worker is in every step. In async a step is one worker's
    gradient, and the MLP's 40 steps take about 30 ms: a worker that starts
    later than that is in no record (CI saw worker 2 alone make all 40), so
    async expects the workers that the records name, at least one of them."""
    n = SCORED_WORKERS.get(name, 0)
    if name.startswith("async"):
        return sorted({g["worker"] for r in records for g in r["grads"]
                       if g.get("phases") and 0 <= g["worker"] < n})
    return list(range(n))


def rank_tags(workers):
    if not workers:
        return []
    return (["ranks/relative_score_max"] +
            [f"ranks/relative_score/worker_{w}" for w in workers] +
            [f"ranks/individual_score/worker_{w}" for w in workers])


def scalar_tags(name, workers):
    return (STEP_SCALARS + (EVAL_SCALARS if name != "sim" else []) +
            (LAYER_TAGS if name == "async-evaluator" else []) + rank_tags(workers))


def expected_scores(records):
    """ranks/* as RunBoard::scores computes them from each record's phases:
    a worker's own work (its phases but the waits, summed in the phases'
    alphabetical order, as the C++ loop adds them), relative to the least of
    the step, and individual against its least own work so far."""
    want, least_own = {}, {}
    for r in records:
        scored = [(g["worker"], sum(v for k, v in sorted(g["phases"].items())
                                    if k not in WAIT_PHASES))
                  for g in r["grads"] if g.get("phases")]
        if not scored:
            continue
        least = min(work for _w, work in scored)
        relative = [(w, work / least if least > 0 else 1.0) for w, work in scored]
        want.setdefault("ranks/relative_score_max", []).append(
            (r["step"], max([1.0] + [x for _w, x in relative])))
        for (w, work), (_w, x) in zip(scored, relative):
            least_own[w] = min(least_own.get(w, work), work)
            want.setdefault(f"ranks/relative_score/worker_{w}", []).append((r["step"], x))
            if least_own[w] > 0:
                want.setdefault(f"ranks/individual_score/worker_{w}", []).append(
                    (r["step"], work / least_own[w]))
    return want


def check_run(f, run_dir, name):
    tb = os.path.join(run_dir, "tb")
    files = sorted(os.listdir(tb)) if os.path.isdir(tb) else []
    tags = sorted(fn.rsplit(".", 1)[-1] for fn in files)
    f.check(tags == FILE_TAGS[name], f"{name}: events files {files}, want tags {FILE_TAGS[name]}")
    for fn in files:
        path = os.path.join(tb, fn)
        try:
            n = len(read_events.raw_records(path))
        except Exception as e:  # DataLossError: a bad CRC or a torn record
            f.check(False, f"{path}: TensorBoard's record reader: {e}")
            continue
        f.check(n > 1, f"{path}: only {n} records")
    records = [r for r in jsonl(os.path.join(run_dir, "steps.jsonl")) if r.get("shard", 0) == 0]
    workers = scored_workers(name, records)
    f.check(bool(workers) == (name in SCORED_WORKERS),
            f"{name}: workers with phases in steps.jsonl: {workers}")
    run = read_events.load_run(tb)
    scalars, histos = run["scalars"], run["histograms"]
    f.check(
        sorted(scalars) == sorted(scalar_tags(name, workers)),
        f"{name}: scalar tags {sorted(scalars)}, want {sorted(scalar_tags(name, workers))}"
    )
    f.check(sorted(histos) == HISTOGRAMS, f"{name}: histogram tags {sorted(histos)}")

    steps = [r["step"] for r in records]
    f.check(len(set(steps)) == len(steps) > 0, f"{name}: steps.jsonl steps {steps}")

    def per_step(fn):
        return [(r["step"], fn(r)) for r in records]

    def accepted(r):
        return [g for g in r["grads"] if g["accepted"]]

    want = {
        "train/loss": per_step(lambda r: r["loss"]),
        "train/lr": per_step(lambda r: r["lr"]),
        "sync/gradients_used": per_step(lambda r: r["used"]),
        "sync/drops": per_step(lambda r: sum(1 for g in r["grads"] if not g["accepted"])),
        "sync/staleness_mean": [
            (r["step"], sum(g["staleness"] for g in accepted(r)) / len(accepted(r)))
            for r in records if accepted(r)
        ],
        "sync/time_to_kth": [
            (r["step"], max(g["arrival_s"] for g in accepted(r))) for r in records if accepted(r)
        ],
    }
    if name == "async-evaluator":
        layered = [r for r in records if any(g.get("layer_staleness") for g in accepted(r))]
        f.check(len(layered) == len(records) > 0,
                f"{name}: {len(layered)} of {len(records)} records have layer_staleness")
        for b, tag in enumerate(LAYER_TAGS):
            want[tag] = [(r["step"], sum(g["layer_staleness"][b] for g in accepted(r)) /
                          len(accepted(r))) for r in layered]
    scores = expected_scores(records)
    f.check(sorted(scores) == sorted(rank_tags(workers)),
            f"{name}: steps.jsonl's phases give score tags {sorted(scores)}")
    want.update(scores)
    for tag, events in want.items():
        check_scalar(f, f"{name} {tag}", scalars.get(tag, []), events)

    rates = scalars.get("train/steps_per_s", [])
    want_rates = [(s, v) for s, v in expected_rates(records) if v is not None]
    if f.check(len(rates) == len(want_rates), f"{name} train/steps_per_s: {len(rates)} events"):
        for (gstep, _w, gvalue), (step, value) in zip(rates, want_rates):
            f.check(
                gstep == step and close(gvalue, float32(value)),
                f"{name} train/steps_per_s: step {gstep} = {gvalue}, want step {step} = {value}",
            )

    # Wall times: the record's t_apply on the calendar, this run's.
    loss = scalars.get("train/loss", [])
    if loss and len(loss) == len(records):
        origin = loss[0][1] - records[0]["t_apply"]
        f.check(abs(origin - time.time()) < 3600, f"{name}: wall times start at {origin}")
        for (step, wall, _v), r in zip(loss, records):
            f.check(
                abs(wall - origin - r["t_apply"]) < 1e-5,
                f"{name} step {step}: wall time {wall} is t_apply {r['t_apply']} + "
                f"{wall - r['t_apply']}, not + {origin}",
            )

    got_h = histos.get("sync/arrival_s", [])
    if f.check(len(got_h) == len(records), f"{name} sync/arrival_s: {len(got_h)} events"):
        for (gstep, _w, h), r in zip(got_h, records):
            where = f"{name} sync/arrival_s step {r['step']}"
            f.check(gstep == r["step"], f"{where}: read at step {gstep}")
            f.check(h["num"] == len(r["grads"]), f"{where}: num {h['num']}, {len(r['grads'])} grads")
            read_events.check_histogram(f, where, h, [g["arrival_s"] for g in r["grads"]])

    if name == "sim":
        return records
    evals = jsonl(os.path.join(run_dir, "eval.jsonl"))
    f.check(len(evals) >= 2, f"{name}: eval.jsonl has {len(evals)} lines")
    for tag in EVAL_SCALARS:
        key = tag.split("/", 1)[1]
        check_scalar(f, f"{name} {tag}", scalars.get(tag, []), [(e["step"], e[key]) for e in evals])
    return records


def check_description(f, mux, run, run_dir):
    """run/config, run/command and the hparams of one run, against config.toml."""
    name = run.split("/")[0]
    with open(os.path.join(run_dir, "config.toml")) as fh:
        toml_text = fh.read()
    texts = mux.PluginRunToTagToContent("text").get(run, {})
    f.check(sorted(texts) == ["run/command", "run/config"], f"{name}: text tags {sorted(texts)}")
    if "run/config" in texts:
        events = mux.Tensors(run, "run/config")
        f.check(len(events) == 1, f"{name}: run/config written {len(events)} times")
        md = tensor_util.make_ndarray(events[0].tensor_proto).item().decode()
        shown = "\n".join(line[4:] for line in md.split("\n"))
        f.check(shown == toml_text, f"{name}: run/config is not config.toml:\n{md[:300]}")
    if "run/command" in texts:
        md = tensor_util.make_ndarray(mux.Tensors(run, "run/command")[0].tensor_proto).item()
        f.check(b"syncopt" in md and b"git " in md, f"{name}: run/command says {md[:200]!r}")
    content = mux.PluginRunToTagToContent("hparams").get(run, {})
    f.check(list(content) == ["_hparams_/session_start_info"], f"{name}: hparams tags {list(content)}")
    if not content:
        return
    data = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    info = data.session_start_info
    f.check(info.group_name == name, f"{name}: hparams session {info.group_name!r}")
    cfg = tomllib.loads(toml_text)
    want = {f"{sec}.{k}": v for sec, table in cfg.items() for k, v in table.items()}
    got = dict(info.hparams)
    f.check(sorted(got) == sorted(want), f"{name}: hparams keys differ: "
            f"{sorted(set(got) ^ set(want))}")
    for key, value in want.items():
        if key not in got:
            continue
        g = got[key]
        kind = g.WhichOneof("kind")
        if isinstance(value, bool):
            ok = kind == "bool_value" and g.bool_value == value
        elif isinstance(value, (int, float)):
            ok = kind == "number_value" and close(g.number_value, float(value))
        elif isinstance(value, str):
            ok = kind == "string_value" and g.string_value == value
        else:  # a list, as its TOML text
            ok = kind == "string_value" and json.loads(g.string_value) == value
        f.check(ok, f"{name}: hparam {key} = {g} in TensorBoard, {value!r} in config.toml")


def dashboard(f, runs_dir, records_of):
    """What `tensorboard --logdir runs_dir` serves: the plugin multiplexer.
    records_of: each run's shard-0 records, as check_run read them."""
    mux = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={"scalars": 0, "histograms": 0}
    )
    mux.AddRunsFromDirectory(runs_dir)
    mux.Reload()
    runs = sorted(mux.Runs())
    want = sorted(n + "/tb" for n in records_of)
    f.check(runs == want, f"dashboard runs {runs}, want {want}")
    scalars = mux.PluginRunToTagToContent("scalars")
    histos = mux.PluginRunToTagToContent("histograms")
    print(f"tensorboard --logdir {runs_dir} lists {len(runs)} runs:")
    for run in runs:
        st, ht = sorted(scalars.get(run, {})), sorted(histos.get(run, {}))
        name = run.split("/")[0]
        want_tags = sorted(scalar_tags(name, scored_workers(name, records_of.get(name, []))))
        f.check(st == want_tags, f"dashboard {run}: scalars {st}, want {want_tags}")
        f.check(ht == HISTOGRAMS, f"dashboard {run}: histograms {ht}")
        if run.split("/")[0] != "sim":
            check_description(f, mux, run, os.path.join(runs_dir, run.split("/")[0]))
        loss = mux.Tensors(run, "train/loss") if "train/loss" in st else []
        acc = mux.Tensors(run, "eval/test_acc") if "eval/test_acc" in st else []
        span = loss[-1].wall_time - loss[0].wall_time if loss else 0.0
        last_acc = (
            f"{float(tensor_util.make_ndarray(acc[-1].tensor_proto)):.4f} at step {acc[-1].step}"
            if acc else "-"
        )
        print(f"  {run}: {len(st)} scalar tags, {len(ht)} histogram tag; train/loss steps "
              f"{loss[0].step if loss else '-'}..{loss[-1].step if loss else '-'} over {span:.2f}s; "
              f"last eval/test_acc {last_acc}")


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--syncopt", required=True)
    ap.add_argument("--mpirun", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--workdir", required=True)
    args = ap.parse_args()
    shutil.rmtree(args.workdir, ignore_errors=True)
    runs_dir = os.path.join(args.workdir, "runs")
    os.makedirs(runs_dir)
    for name in RUNS:
        train(args, runs_dir, name)

    f = Failures()
    on = [n for n in RUNS if n != "off"]
    f.check(not os.path.exists(os.path.join(runs_dir, "off", "tb")),
            "run.tensorboard = false still wrote tb/")
    records_of = {}
    for name in on:
        records = records_of[name] = check_run(f, os.path.join(runs_dir, name), name)
        if name in ("sync", "sim"):
            # Backups drop gradients nearly every step: none means the drops
            # check compared nothing but zeros.
            drops = sum(1 for r in records for g in r["grads"] if not g["accepted"])
            f.check(drops > 0, f"the {name} run with backups recorded no drops")
    dashboard(f, runs_dir, records_of)
    for line in f.lines[:40]:
        print("MISMATCH:", line)
    if f.lines:
        print(f"FAILED: {len(f.lines)} mismatches between the runs' records and TensorBoard")
        return 1
    print(f"OK: {len(on)} runs read back by TensorBoard match steps.jsonl and eval.jsonl")
    return 0


if __name__ == "__main__":
    sys.exit(main())
