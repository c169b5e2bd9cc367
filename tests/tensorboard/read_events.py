#!/usr/bin/env python3
"""Reads syncopt's TensorBoard event files with the real TensorBoard reader.

    read_events.py LOGDIR
        prints, as JSON, every run under LOGDIR (as `tensorboard --logdir LOGDIR`
        would list them) with its scalars and histograms.
    read_events.py --writer EXE --workdir DIR
        the CTest check: runs `EXE DIR` (tests/tensorboard/write_sample.cpp),
        which writes known values and prints them as JSON, then loads DIR with
        TensorBoard's readers and exits 1 unless they see exactly those tags,
        steps, wall times, scalar values (as float32) and histogram counts.

Needs the `tensorboard` package from PyPI (Debian has none); scripts/setup.sh
installs it. Without it this exits 1: a reader we could not run is a failure.
"""

import argparse
import bisect
import json
import math
import os
import shutil
import struct
import subprocess
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.backend.event_processing import plugin_event_multiplexer
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors as tb_errors
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow
    from tensorboard.util import tensor_util
except ImportError as e:
    sys.exit(
        f"read_events.py: cannot import tensorboard ({e}) with {sys.executable}; "
        f"install it with `{sys.executable} -m pip install tensorboard` or run scripts/setup.sh"
    )

# Keep everything: the defaults sample histograms down to one per tag.
KEEP_ALL = {
    event_accumulator.SCALARS: 0,
    event_accumulator.HISTOGRAMS: 0,
    event_accumulator.COMPRESSED_HISTOGRAMS: 0,
    event_accumulator.TENSORS: 0,
}


class Failures:
    def __init__(self):
        self.lines = []

    def check(self, ok, message):
        if not ok:
            self.lines.append(message)
        return ok


def run_dirs(logdir):
    """Run name -> directory holding event files, as TensorBoard names runs."""
    runs = {}
    for root, _dirs, files in os.walk(logdir):
        if any("tfevents" in f for f in files):
            runs[os.path.relpath(root, logdir)] = root
    return runs


def raw_records(path):
    """Every record of one event file through TensorBoard's own record reader,
    which checks both CRCs and raises DataLossError on a mismatch (the
    accumulators swallow that error and just stop reading)."""
    reader = pywrap_tensorflow.PyRecordReader_New(path)
    records = []
    while True:
        try:
            reader.GetNext()
        except tb_errors.OutOfRangeError:
            return records
        records.append(reader.record())


def load_run(directory):
    acc = event_accumulator.EventAccumulator(directory, size_guidance=KEEP_ALL)
    acc.Reload()
    tags = acc.Tags()
    run = {"file_version": acc.file_version, "scalars": {}, "histograms": {}}
    for tag in tags["scalars"]:
        run["scalars"][tag] = [[e.step, e.wall_time, e.value] for e in acc.Scalars(tag)]
    for tag in tags["histograms"]:
        run["histograms"][tag] = [
            [e.step, e.wall_time, histogram_dict(e.histogram_value)] for e in acc.Histograms(tag)
        ]
    return run


def histogram_dict(h):
    fields = ("min", "max", "num", "sum", "sum_squares")
    d = {k: getattr(h, k) for k in fields}
    d["bucket_limit"] = list(h.bucket_limit)
    d["bucket"] = list(h.bucket)
    return d


def float32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def check_histogram(f, where, got, values):
    finite = [v for v in values if v is not None and math.isfinite(v)]
    limits, counts = got["bucket_limit"], got["bucket"]
    f.check(got["num"] == len(finite), f"{where}: num {got['num']} != {len(finite)}")
    f.check(len(limits) == len(counts), f"{where}: {len(limits)} limits, {len(counts)} buckets")
    f.check(sum(counts) == got["num"], f"{where}: buckets sum to {sum(counts)}, num {got['num']}")
    f.check(
        all(a < b for a, b in zip(limits, limits[1:])), f"{where}: limits not increasing {limits}"
    )
    if not finite:
        f.check(counts and not any(counts), f"{where}: empty histogram has counts {counts}")
        return
    f.check(got["min"] == min(finite), f"{where}: min {got['min']} != {min(finite)}")
    f.check(got["max"] == max(finite), f"{where}: max {got['max']} != {max(finite)}")
    sums = (("sum", math.fsum(finite)), ("sum_squares", math.fsum(v * v for v in finite)))
    for key, want in sums:
        f.check(
            math.isclose(got[key], want, rel_tol=1e-12, abs_tol=1e-300),
            f"{where}: {key} {got[key]} != {want}",
        )
    # Bin the values ourselves with the limits the file claims, under
    # TensorBoard's semantics (bucket i is [limit[i-1], limit[i]), the first
    # starting at min), and demand the same counts.
    mine = [0] * len(limits)
    for v in finite:
        i = min(bisect.bisect_right(limits, v), len(limits) - 1)
        left = limits[i - 1] if i > 0 else got["min"]
        f.check(left <= v, f"{where}: value {v} left of its bucket [{left}, {limits[i]})")
        mine[i] += 1
    f.check(mine == counts, f"{where}: counts {counts}, values bin to {mine}")
    f.check(counts[0] > 0 and counts[-1] > 0, f"{where}: leading/trailing empty buckets {counts}")


def check_against(f, logdir, expected):
    dirs = run_dirs(logdir)
    f.check(
        sorted(dirs) == sorted(r + "/tb" for r in expected["runs"]),
        f"runs found {sorted(dirs)}, expected {sorted(expected['runs'])}",
    )
    loaded = {}
    for name, want in expected["runs"].items():
        directory = os.path.join(logdir, name, "tb")
        where = name
        # Strict pass: every byte of every file is a well-framed record, and
        # the first record of each file is the file version.
        n_records = 0
        for fname in sorted(os.listdir(directory)):
            path = os.path.join(directory, fname)
            try:
                records = raw_records(path)
            except tb_errors.DataLossError as e:
                f.check(False, f"{path}: TensorBoard's record reader: {e}")
                continue
            n_records += len(records)
            first = event_pb2.Event.FromString(records[0]) if records else None
            f.check(
                first is not None and first.file_version == "brain.Event:2",
                f"{path}: first record is not the file version: {first}",
            )
        want_records = 1 + sum(len(v) for v in want.get("scalars", {}).values())
        want_records += sum(len(v) for v in want.get("histograms", {}).values())
        f.check(n_records == want_records, f"{where}: {n_records} records, wrote {want_records}")

        got = loaded[name] = load_run(directory)
        f.check(got["file_version"] == 2.0, f"{where}: file_version {got['file_version']}")
        f.check(
            sorted(got["scalars"]) == sorted(want.get("scalars", {})),
            f"{where}: scalar tags {sorted(got['scalars'])}",
        )
        f.check(
            sorted(got["histograms"]) == sorted(want.get("histograms", {})),
            f"{where}: histogram tags {sorted(got['histograms'])}",
        )
        for tag, events in want.get("scalars", {}).items():
            have = got["scalars"].get(tag, [])
            f.check(len(have) == len(events), f"{where} {tag}: {len(have)} events")
            for (step, wall, value), (gstep, gwall, gvalue) in zip(events, have):
                f.check(
                    (gstep, gwall, gvalue) == (step, wall, float32(value)),
                    f"{where} {tag}: read {(gstep, gwall, gvalue)}, "
                    f"wrote {(step, wall, value)} (float32 {float32(value)!r})",
                )
        for tag, events in want.get("histograms", {}).items():
            have = got["histograms"].get(tag, [])
            f.check(len(have) == len(events), f"{where} {tag}: {len(have)} events")
            for (step, wall, values), (gstep, gwall, gvalue) in zip(events, have):
                f.check((gstep, gwall) == (step, wall), f"{where} {tag}: {gstep}, {gwall}")
                check_histogram(f, f"{where} {tag} step {step}", gvalue, values)
    check_dashboard_view(f, logdir, expected)
    return loaded


def check_dashboard_view(f, logdir, expected):
    """What `tensorboard --logdir` serves: the plugin multiplexer lists every
    run side by side and converts legacy summaries to the scalars and
    histograms plugins' tensors (histograms as [left, right, count] rows)."""
    mux = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={"scalars": 0, "histograms": 0}
    )
    mux.AddRunsFromDirectory(logdir)
    mux.Reload()
    runs = mux.Runs()
    for name, want in expected["runs"].items():
        run = name + "/tb"
        if not f.check(run in runs, f"dashboard: run {run} missing from {sorted(runs)}"):
            continue
        scalars = mux.PluginRunToTagToContent("scalars").get(run, {})
        histos = mux.PluginRunToTagToContent("histograms").get(run, {})
        f.check(sorted(scalars) == sorted(want["scalars"]), f"dashboard {run}: {sorted(scalars)}")
        f.check(sorted(histos) == sorted(want["histograms"]), f"dashboard {run}: {sorted(histos)}")
        for tag, events in want["scalars"].items():
            if tag not in scalars:
                continue
            got = [
                (e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                for e in mux.Tensors(run, tag)
            ]
            f.check(
                got == [(s, float32(v)) for s, _w, v in events],
                f"dashboard {run} {tag}: {got[:3]}...",
            )
        for tag, events in want["histograms"].items():
            if tag not in histos:
                continue
            tensors = mux.Tensors(run, tag)
            f.check(len(tensors) == len(events), f"dashboard {run} {tag}: {len(tensors)} events")
            for e, (step, _wall, values) in zip(tensors, events):
                rows = tensor_util.make_ndarray(e.tensor_proto)
                n = sum(1 for v in values if v is not None and math.isfinite(v))
                f.check(
                    rows.ndim == 2 and rows.shape[1] == 3 and rows[:, 2].sum() == n,
                    f"dashboard {run} {tag} step {step}: rows {rows.tolist()}",
                )
                if n:
                    finite = [v for v in values if v is not None and math.isfinite(v)]
                    f.check(
                        rows[0, 0] == min(finite) and rows[-1, 1] == max(finite),
                        f"dashboard {run} {tag} step {step}: range {rows[0, 0]}..{rows[-1, 1]}",
                    )


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("logdir", nargs="?")
    ap.add_argument("--writer", help="write_sample executable to run and check against")
    ap.add_argument("--workdir", help="where --writer writes (emptied first)")
    args = ap.parse_args()
    if args.writer:
        if not args.workdir:
            ap.error("--writer needs --workdir")
        shutil.rmtree(args.workdir, ignore_errors=True)
        os.makedirs(args.workdir)
        out = subprocess.run(
            [args.writer, args.workdir], check=True, capture_output=True, text=True
        )
        expected = json.loads(out.stdout)
        f = Failures()
        try:
            loaded = check_against(f, args.workdir, expected)
        except Exception:
            # Whatever made the reader trip, show what was found before it.
            for line in f.lines:
                print("MISMATCH:", line)
            raise
        n_scalars = sum(len(v) for r in loaded.values() for v in r["scalars"].values())
        n_histos = sum(len(v) for r in loaded.values() for v in r["histograms"].values())
        print(
            f"tensorboard reader: {len(loaded)} runs, "
            f"{n_scalars} scalar and {n_histos} histogram events"
        )
        for line in f.lines:
            print("MISMATCH:", line)
        if f.lines:
            print(f"FAILED: {len(f.lines)} mismatches between what was written and what was read")
            return 1
        print("OK: TensorBoard read back exactly what syncopt wrote")
        return 0
    if not args.logdir:
        ap.error("give a LOGDIR or --writer")
    runs = {name: load_run(d) for name, d in sorted(run_dirs(args.logdir).items())}
    json.dump(runs, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
