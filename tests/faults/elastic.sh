#!/usr/bin/env bash
# Elastic restarts (issue "Keep going", point 3; docs/design.md §10):
# scripts/run.sh under mpirun, two workers of 1 shard + 4 (sync, b = 1,
# N = 3) killed with SIGKILL, so that the run ends 69; with
# SYNCOPT_MAX_RESTARTS=2 run.sh resumes it on the 3 ranks left (1 shard +
# 2 workers, N = 1) to completion: every step once in steps.jsonl, the
# restart in run.json (launches[].restart, and the reshape). With
# SYNCOPT_MAX_RESTARTS=0 (the default) a run that loses a worker with b = 0
# ends 69 as before, and run.sh says how to have it go on.
#
#   tests/faults/elastic.sh SYNCOPT_BINARY
set -uo pipefail
BIN=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CFG=$SRC/configs/smoke.toml
WORK=$(mktemp -d /tmp/syncopt-elastic-XXXXXX)
cleanup() {
  pkill -KILL -f "run.dir=$WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL [elastic]: $*" >&2
  for log in "$WORK"/log*; do
    [ -f "$log" ] && { echo "--- $(basename "$log") (tail)" >&2; tail -40 "$log" >&2; }
  done
  exit 1
}
note() { echo "[elastic] $*"; }
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$(now) - $1:.1f}')"; }

# The pids of MPI ranks R... of the run named NAME (Open MPI's environment).
rank_pids() {
  local name=$1 found
  shift
  for _ in $(seq 200); do
    found=()
    for pid in $(pgrep -f "run.dir=$WORK --set run.name=$name( |$)"); do
      for r in "$@"; do
        tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$r" && found+=("$pid")
      done
    done
    [ "${#found[@]}" = $# ] && { echo "${found[@]}"; return 0; }
    sleep 0.1
  done
  return 1
}
wait_steps() {
  for _ in $(seq 600); do
    [ -f "$1/steps.jsonl" ] && [ "$(wc -l <"$1/steps.jsonl")" -ge "$2" ] && return 0
    sleep 0.05
  done
  fail "the run in $1 never reached $2 updates"
}
# scripts/run.sh with this binary on NP ranks; its options after the config.
run_sh() {
  local np=$1
  shift
  SYNCOPT_BIN="$BIN" SYNCOPT_NP=$np "$SRC/scripts/run.sh" "$CFG" --quiet --set run.dir="$WORK" "$@" </dev/null
}
M="--set model.name=mlp --set train.batch=16 --set data.synthetic_train=2048 --set cluster.dead_after_s=2 --set train.mode=sync
   --set stragglers.model=fixed --set stragglers.mean_ms=5"

# 1. Two workers of 1 shard + 4 (N = 3, b = 1) killed: 69, restarted on 3 ranks.
T0=$(now)
# shellcheck disable=SC2086
SYNCOPT_MAX_RESTARTS=2 run_sh 5 --set run.name=el $M --set train.backups=1 --set train.steps=300 >"$WORK/log" 2>&1 &
P=$!
# The pids first, so that the kill lands near step 30 (each step takes
# 5 ms or more: stragglers.mean_ms), far from the end.
pids=$(rank_pids el 3 4) || fail "no ranks 3 and 4"
read -r -a W <<<"$pids"
wait_steps "$WORK/el" 30
kill -KILL "${W[@]}"
wait $P
RC=$?
note "run.sh exit $RC, $(secs "$T0") s from the start; $(grep -m1 -o 'elastic restart 1 of 2.*' "$WORK/log" | cut -c1-200)"
[ $RC = 0 ] || fail "run.sh exit $RC, expected 0 after an elastic restart"
python3 - "$WORK/el" <<'PY' || fail "the records"
import collections, json, sys
d = sys.argv[1]
s = json.load(open(f"{d}/summary.json"))
assert (s["status"], s["steps"], s["N"], s["b"], s["workers"]) == ("completed", 300, 1, 1, 2), \
    f"summary: {s['status']} {s['steps']} N {s['N']} b {s['b']} workers {s['workers']}"
launches = json.load(open(f"{d}/run.json"))["launches"]
assert [l["exit_code"] for l in launches] == [69, 0], \
    f"exit codes of the launches {[l['exit_code'] for l in launches]}, expected [69, 0]" + \
    (": the run completed before the kill, the scenario tested nothing" if len(launches) == 1 else "")
first, second = launches
assert first["layout"]["world"] == 5 and "restart" not in first, first.get("restart")
r = second.get("restart") or sys.exit(f"run.json: the second launch records no restart: {list(second)}")
assert (r["number"], r["max"], r["by"], r["after_exit_code"]) == (1, 2, "scripts/run.sh", 69), r
assert r["after_launch"] == first["launch_id"], r
assert sorted(r["lost_ranks"]) == [3, 4] and r["world"] == {"from": 5, "to": 3}, r
assert second["layout"]["world"] == 3 and second["resumed"], second["layout"]
assert second["reshape"]["to"]["workers"] == 2, second["reshape"]
seen = collections.Counter(json.loads(l)["step"] for l in open(f"{d}/steps.jsonl") if l.strip())
twice = sorted(k for k, n in seen.items() if n > 1)
assert not twice and sorted(seen) == list(range(1, 301)), f"steps twice {twice[:5]}, {len(seen)} distinct"
print(f"[elastic] lost ranks {r['lost_ranks']} at step {r['at_step']}; restart 1 resumed at step "
      f"{second['reshape']['step']} on 3 ranks (N 3 -> 1); 300 steps, each once")
PY

"$BIN" report "$WORK/el" >"$WORK/log-report" 2>&1 || fail "syncopt report: exit $?"
grep -q "^elastic restart 1 of 2 by scripts/run.sh: after exit 69 .* on 3 ranks (was 5); ended 0" "$WORK/log-report" ||
  fail "syncopt report does not show the restart: $(tail -3 "$WORK/log-report")"

# 2. SYNCOPT_MAX_RESTARTS=0: a worker of 1 shard + 2 (b = 0) killed ends 69.
# shellcheck disable=SC2086
SYNCOPT_MAX_RESTARTS=0 run_sh 3 --set run.name=z $M --set train.backups=0 --set train.steps=100000 >"$WORK/log-z" 2>&1 &
P=$!
pids=$(rank_pids z 2) || fail "no rank 2"
read -r -a W <<<"$pids"
wait_steps "$WORK/z" 20
kill -KILL "${W[@]}"
wait $P
RC=$?
note "SYNCOPT_MAX_RESTARTS=0: run.sh exit $RC; $(grep -m1 -o 'run.sh: a run that lost workers.*' "$WORK/log-z" | cut -c1-120)"
[ $RC = 69 ] || fail "run.sh exit $RC, expected 69"
[ "$(python3 -c "import json; print(len(json.load(open('$WORK/z/run.json'))['launches']))")" = 1 ] ||
  fail "SYNCOPT_MAX_RESTARTS=0 launched again"
grep -q "SYNCOPT_MAX_RESTARTS=K restarts it" "$WORK/log-z" || fail "run.sh does not say how to go on"
