#!/usr/bin/env python3
"""Elastic restarts (docs/design.md §10, "Elastic restarts"): whether a run
that ended 69 for lost workers can go on with the ranks that are left, and
with how many. scripts/run.sh and scripts/slurm/train.sbatch ask it after a
launch ended 69 (run.sh) or when a requeued job starts (train.sbatch); it
reads the run's own records, summary.json and run.json, and decides.

    elastic_restart.py RUN_DIR --number N --max M --by WHO
        [--launch ID] (--lost | --np NP) [--hostfile IN --hostfile-out OUT]

--lost: the new world is the launch's minus the lost workers (run.sh);
--np NP: the new world is NP, the ranks the job has now (train.sbatch).
--launch ID: the launch that ended (its summary.json must be that one's);
without it, the summary must be the last launch's of run.json.
--hostfile IN: the slot of every lost rank is taken out of Open MPI's host
file IN (`host slots=K` lines), written to OUT; a host left with no slot
goes (a host cut off loses all its ranks, so it is not used again).

Exit status and output:
  0  restart: stdout has the new world (ranks) on its first line and the
     JSON object for $SYNCOPT_RESTART (run.json's launches[].restart) on
     its second; stderr says what was lost and what the run goes on with.
  1  not a run that ended 69 for lost workers (a dead shard or evaluator,
     another exit code, no records): stderr says why; nothing to restart.
  2  too few ranks are left for the mode: stderr says how many it needs
     and what to do.
  3  a lost rank's host is not in the host file: stderr says which.
"""
import argparse
import json
import os
import sys


def fail(code, message):
    print(message, file=sys.stderr)
    sys.exit(code)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError) as e:
        fail(1, f"{path}: cannot be read ({e}): not restarted")


def ended_launch(run_dir, launch):
    """summary.json and the run.json entry of the launch that ended."""
    summary = load(os.path.join(run_dir, "summary.json"))
    launches = load(os.path.join(run_dir, "run.json")).get("launches") or []
    want = launch or (launches[-1].get("launch_id") if launches else None)
    if summary.get("launch_id") != want:
        fail(1, f"{run_dir}/summary.json is not the last launch's ({want}): "
                "it ended before it could record anything; not restarted")
    entry = next((l for l in launches if l.get("launch_id") == want), None)
    if entry is None or not isinstance(entry.get("layout"), dict):
        fail(1, f"{run_dir}/run.json has no layout of launch {want}: not restarted")
    return summary, entry


def min_workers(layout):
    """The fewest workers the mode resumes on (as `syncopt checkpoints`
    says): sync modes keep b, so N' = K' - b >= 1; the others need one;
    allreduce needs 2 ranks."""
    if layout.get("mode") == "allreduce":
        return 2
    b = layout.get("b")
    return b + 1 if isinstance(b, int) and not isinstance(b, bool) else 1


def same_host(a, b):
    return a == b or a.split(".")[0] == b.split(".")[0]


def shrink_hostfile(path, out, lost):
    """Takes one slot per lost rank off its host's line."""
    try:
        lines = open(path).read().splitlines()
    except OSError as e:
        fail(3, f"cannot read the host file {path} ({e})")
    rows = []  # [host, slots, other words]
    for line in lines:
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        slots = 1
        rest = []
        for w in words[1:]:
            if w.startswith("slots="):
                slots = int(w[len("slots="):])
            else:
                rest.append(w)
        rows.append([words[0], slots, rest])
    for l in lost:
        host = str(l.get("host", ""))
        row = next((r for r in rows if r[1] > 0 and same_host(r[0], host)), None)
        if row is None:
            fail(3, f"lost rank {l.get('rank')} ran on host '{host}', which has no slot left in "
                    f"the host file {path}: not restarted; take that host out of the file and "
                    "resume by hand (--set run.resume=true --set run.reshape=true)")
        row[1] -= 1
    with open(out, "w") as f:
        for host, slots, rest in rows:
            if slots > 0:
                f.write(" ".join([host, f"slots={slots}"] + rest) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--number", type=int, required=True, help="this restart's number (1..)")
    p.add_argument("--max", type=int, required=True, help="SYNCOPT_MAX_RESTARTS")
    p.add_argument("--by", required=True, help="the script that restarts")
    p.add_argument("--launch", help="the id of the launch that ended")
    how = p.add_mutually_exclusive_group(required=True)
    how.add_argument("--lost", action="store_true", help="go on without the lost ranks")
    how.add_argument("--np", type=int, help="go on with NP ranks")
    p.add_argument("--hostfile", help="Open MPI host file of the launch that ended")
    p.add_argument("--hostfile-out", help="where the host file without the lost slots goes")
    a = p.parse_args()

    summary, entry = ended_launch(a.run_dir, a.launch)
    code = summary.get("exit_code")
    lost = summary.get("lost_workers") or []
    if code != 69:
        fail(1, f"the launch ended {code}, not 69: not an elastic restart")
    if not lost:
        fail(1, "the launch ended 69 but lost no worker (a parameter server or the evaluator "
                f"was lost: {summary.get('reason', '?')}); not restarted: resume it by hand with "
                "its ranks (--set run.resume=true)")
    layout = entry["layout"]
    world, workers = int(layout["world"]), int(layout["workers"])
    servers = world - workers  # shards and the evaluator
    new_world = world - len(lost) if a.lost else a.np
    new_workers = new_world - servers
    need = min_workers(layout)
    what = "ranks" if layout.get("mode") == "allreduce" else "workers"
    lost_text = ", ".join(f"rank {l.get('rank')} on {l.get('host', '?')}" for l in lost)
    if new_workers < need:
        fail(2, f"{new_workers} {what[:-1]}(s) would be left ({world} ranks, lost {lost_text}; "
                f"{new_world} now) and mode {layout.get('mode')} with b = {layout.get('b')} "
                f"needs at least {need} (N' = K' - b >= 1): not restarted. Resume with more "
                f"ranks (at least {servers + need}: --set run.resume=true --set run.reshape=true), "
                "or start anew with a smaller train.backups under another run.name")
    if a.hostfile:
        shrink_hostfile(a.hostfile, a.hostfile_out, lost)
    record = {
        "number": a.number, "max": a.max, "by": a.by,
        "after_launch": summary.get("launch_id"), "after_exit_code": code,
        "at_step": summary.get("steps"),
        "lost_ranks": [l.get("rank") for l in lost],
        "world": {"from": world, "to": new_world},
    }
    b = layout.get("b")
    if layout.get("mode") == "allreduce":
        shape = f"{new_world} ranks"
    elif isinstance(b, int) and not isinstance(b, bool):
        shape = f"{servers} server rank(s) and {new_workers} workers (N {layout.get('N')} -> {new_workers - b}, b {b})"
    else:
        shape = f"{servers} server rank(s) and {new_workers} workers (b {b})"
    print(f"lost {lost_text}; goes on with {shape}", file=sys.stderr)
    print(new_world)
    print(json.dumps(record, separators=(",", ":")))


if __name__ == "__main__":
    main()
