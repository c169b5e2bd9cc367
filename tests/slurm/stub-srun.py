#!/usr/bin/env python3
"""A stand-in for srun in tests/slurm/test_elastic.sh: it starts nothing,
but records one launch of `syncopt train` the way rank 0 would (run.json's
entry with its layout and $SYNCOPT_RESTART, summary.json, the outcome
file), with the ending $STUB_END asks for: "lost" (69, ranks 3 and 4 of
1 shard + K workers, b = 1, lost), "shard" (69, the shard lost: no lost
worker) or "completed" (0). It appends its command line and
$SYNCOPT_RESTART to $STUB_LOG."""
import json, os, sys

args = sys.argv[1:]
name, rdir = "run", "runs"
for i, a in enumerate(args):
    if a == "--set" and i + 1 < len(args):
        k, _, v = args[i + 1].partition("=")
        if k == "run.name":
            name = v
        elif k == "run.dir":
            rdir = v
with open(os.environ["STUB_LOG"], "a") as f:
    f.write("srun " + " ".join(args) + "\n")
    f.write("SYNCOPT_RESTART=" + os.environ.get("SYNCOPT_RESTART", "") + "\n")
run = os.path.join(rdir, name)
os.makedirs(run, exist_ok=True)
world = int(os.environ.get("SLURM_NTASKS", "1"))
end = os.environ.get("STUB_END", "completed")
code = 0 if end == "completed" else 69
launch_id = os.environ["SYNCOPT_LAUNCH_ID"]
lost = [{"rank": r, "worker": r - 1, "host": "n2", "pid": 1000 + r} for r in (3, 4)] if end == "lost" else []
path = os.path.join(run, "run.json")
doc = json.load(open(path)) if os.path.exists(path) else {"launches": []}
entry = {"launch_id": launch_id, "exit_code": code,
         "layout": {"mode": "sync", "world": world, "shards": 1, "evaluator_rank": None,
                    "workers": world - 1, "N": world - 2, "b": 1}}
if os.environ.get("SYNCOPT_RESTART"):
    entry["restart"] = json.loads(os.environ["SYNCOPT_RESTART"])
doc["launches"].append(entry)
json.dump(doc, open(path, "w"))
summary = {"launch_id": launch_id, "exit_code": code, "steps": 40, "lost_workers": lost,
           "reason": "the parameter server rank 0 is silent" if end == "shard" else ""}
json.dump(summary, open(os.path.join(run, "summary.json"), "w"))
json.dump({"exit_code": code, "launch_id": launch_id}, open(os.environ["SYNCOPT_OUTCOME_FILE"], "w"))
sys.exit(code)
