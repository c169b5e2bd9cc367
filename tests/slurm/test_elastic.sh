#!/bin/bash
# Elastic restarts, the decisions (issue "Keep going", point 3; docs/design.md
# §10): scripts/elastic_restart.py on a run's records, and
# scripts/slurm/train.sbatch run as a file with SLURM's variables set, a
# stand-in srun (tests/slurm/stub-srun.py records a launch as rank 0 would)
# and a stand-in scontrol (Requeue=1; `requeue` logged). No slurmctld: what a
# real SLURM does with `scontrol requeue` (the job pending again, then started
# with SLURM_RESTART_COUNT=1 on the nodes it gets) is played here by running
# the script again with those variables. Needs python3.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
WORK=$(mktemp -d /tmp/syncopt-elastic-unit-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail=0
bad() { echo "FAIL $*"; fail=1; }
ok() { echo "ok   $*"; }

# The stand-ins on PATH.
mkdir -p "$WORK/bin"
ln -s "$SRC/tests/slurm/stub-srun.py" "$WORK/bin/srun"
cat >"$WORK/bin/scontrol" <<'EOF'
#!/bin/bash
case $1 in
  show) echo "JobId=$3 Requeue=1" ;;
  requeue) echo "requeue $2" >>"$STUB_LOG" ;;
esac
EOF
chmod +x "$WORK/bin/scontrol"
export PATH=$WORK/bin:$PATH SYNCOPT_BIN=$SRC/tests/slurm/stub-syncopt.sh STUB_LOG=$WORK/stub.log
# sbatch JOB NTASKS RESTART_COUNT END: train.sbatch as job JOB; its exit
# code in $rc, its log in $WORK/job.log.
sbatch() {
  : >"$STUB_LOG"
  (cd "$WORK" && SLURM_JOB_ID=$1 SLURM_NTASKS=$2 SLURM_RESTART_COUNT=$3 STUB_END=$4 \
    bash "$SRC/scripts/slurm/train.sbatch" configs/smoke.toml >"$WORK/job.log" 2>&1)
  rc=$?
}
restart_field() { sed -n 's/^SYNCOPT_RESTART=//p' "$STUB_LOG" | python3 -c "import json,sys; r=json.load(sys.stdin); print($1)" 2>/dev/null; }

# 1. A run of 1 shard + 4 workers (b = 1) loses ranks 3 and 4: 69, requeued.
sbatch 101 5 0 lost
if [ $rc = 69 ] && grep -q "requeue 101" "$STUB_LOG" && grep -q "run lost workers" "$WORK/job.log"; then
  ok "a 69 that lost workers is requeued"
else bad "the 69 (exit $rc): $(cat "$STUB_LOG") $(tail -2 "$WORK/job.log")"; fi
# 2. Requeued onto 2 tasks: 1 worker left, b = 1 needs 2: refused, 69, nothing launched.
sbatch 101 2 1 completed
if [ $rc = 69 ] && ! grep -q "^srun" "$STUB_LOG" && grep -q "needs at least 2" "$WORK/job.log" &&
  grep -q "at least 3" "$WORK/job.log"; then
  ok "too few tasks for the mode are refused, saying how many it needs"
else bad "2 tasks (exit $rc): $(cat "$STUB_LOG") $(tail -2 "$WORK/job.log")"; fi
# 3. Requeued onto 3 tasks (1 shard + 2 workers): resumed with run.reshape, recorded.
sbatch 101 3 1 completed
if [ $rc = 0 ] && grep -q "^srun .*--set run.resume=true.*--set run.reshape=true" "$STUB_LOG" &&
  [ "$(restart_field "r['number'], r['by'], r['world'], sorted(r['lost_ranks'])")" = \
    "1 scripts/slurm/train.sbatch {'from': 5, 'to': 3} [3, 4]" ]; then
  ok "the requeued job resumes on its 3 tasks with run.reshape; SYNCOPT_RESTART says which restart"
else bad "3 tasks (exit $rc): $(cat "$STUB_LOG") $(tail -2 "$WORK/job.log")"; fi
# 4. SYNCOPT_MAX_RESTARTS=0: the 69 stays the job's end.
SYNCOPT_MAX_RESTARTS=0 sbatch 102 5 0 lost
if [ $rc = 69 ] && ! grep -q requeue "$STUB_LOG" && grep -q "not requeued" "$WORK/job.log"; then
  ok "SYNCOPT_MAX_RESTARTS=0: not requeued"
else bad "SYNCOPT_MAX_RESTARTS=0 (exit $rc): $(cat "$STUB_LOG")"; fi
# 5. A 69 that lost no worker (the shard): not requeued, saying why.
sbatch 103 5 0 shard
if [ $rc = 69 ] && ! grep -q requeue "$STUB_LOG" && grep -q "lost no worker" "$WORK/job.log"; then
  ok "a 69 that lost no worker is not requeued"
else bad "a dead shard (exit $rc): $(cat "$STUB_LOG") $(tail -2 "$WORK/job.log")"; fi

# 6. run.sh's decision (--lost) with a host file: the lost ranks' slots go;
# a host left without one goes; a lost rank on a host not in the file refuses.
run=$WORK/runs/smoke-101
printf 'n1 slots=2\nn2 slots=2\nn3 slots=1\n' >"$WORK/hosts"
cat >"$run/summary.json" <<EOF
{"launch_id": "L", "exit_code": 69, "steps": 7, "lost_workers": [{"rank": 3, "host": "n2.cluster"}, {"rank": 4, "host": "n2"}]}
EOF
echo '{"launches": [{"launch_id": "L", "layout": {"mode": "sync", "world": 5, "shards": 1, "workers": 4, "N": 3, "b": 1}}]}' >"$run/run.json"
out=$("$SRC/scripts/elastic_restart.py" "$run" --launch L --lost --number 1 --max 3 --by run.sh \
  --hostfile "$WORK/hosts" --hostfile-out "$WORK/hosts2" 2>"$WORK/why")
if [ "$(head -n1 <<<"$out")" = 3 ] && [ "$(cat "$WORK/hosts2")" = "$(printf 'n1 slots=2\nn3 slots=1')" ]; then
  ok "run.sh's host file loses the lost ranks' slots: $(tr '\n' ' ' <"$WORK/hosts2")($(cat "$WORK/why"))"
else bad "the host file: $out / $(cat "$WORK/hosts2" 2>/dev/null) / $(cat "$WORK/why")"; fi
printf 'n1 slots=4\n' >"$WORK/hosts"
"$SRC/scripts/elastic_restart.py" "$run" --launch L --lost --number 1 --max 3 --by run.sh \
  --hostfile "$WORK/hosts" --hostfile-out "$WORK/hosts2" >/dev/null 2>"$WORK/why"
rc=$?
if [ $rc = 3 ] && grep -q "host 'n2.cluster'" "$WORK/why"; then
  ok "a lost rank's host missing from the host file refuses (3)"
else bad "a host not in the file: exit $rc, $(cat "$WORK/why")"; fi
# Another launch's summary is not this one's: no restart.
"$SRC/scripts/elastic_restart.py" "$run" --launch OTHER --lost --number 1 --max 3 --by run.sh >/dev/null 2>&1
[ $? = 1 ] && ok "another launch's summary: no restart" || bad "another launch's summary was used"
exit $fail
