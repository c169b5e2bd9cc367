#!/usr/bin/env python3
"""Two runs' steps.jsonl hold the same steps, each once, with the same loss
and lr (a resumed run against the uninterrupted one)."""
import json
import sys

def steps(d):
    recs = [json.loads(l) for l in open(f"{d}/steps.jsonl") if l.strip()]
    return {(r["shard"], r["step"]): r for r in recs}, len(recs)

a, na = steps(sys.argv[1])
b, nb = steps(sys.argv[2])
if na != len(a) or nb != len(b):
    sys.exit(f"duplicated steps: {na} records, {len(a)} distinct; {nb}, {len(b)}")
if a.keys() != b.keys():
    sys.exit(f"different steps: {sorted(a.keys() ^ b.keys())[:5]}")
for k in sorted(a):
    if a[k]["loss"] != b[k]["loss"] or a[k]["lr"] != b[k]["lr"]:
        sys.exit(f"step {k}: loss {a[k]['loss']} vs {b[k]['loss']}, lr {a[k]['lr']} vs {b[k]['lr']}")
print(f"{len(a)} steps, the same loss and lr at every one")
