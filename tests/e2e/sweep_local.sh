#!/usr/bin/env bash
# scripts/sweep.sh end to end: a sweep file with a grid line (a range of
# values, run names from ${...}), a distributed line, a line that fails and
# comments, run two at a time; every run through the right launcher (run.json
# says mpirun with 3 ranks, or none), the table of exit codes, the script's
# exit status (the first failure's), a typo shared by a grid said once, and
# Ctrl-C stopping the run that is going with a checkpoint (75) and starting
# no more.
# Usage: sweep_local.sh SYNCOPT_EXE REPO
set -uo pipefail
exe=$1 repo=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export SYNCOPT_BIN=$exe OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
fails=0
check() {  # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "ok   $what"; else echo "FAIL $what"; fails=$((fails + 1)); fi
}
fast="--set model.name=mlp --set train.steps=6 --set run.tensorboard=false --set run.dir=$tmp/runs"
cat >"$tmp/s.txt" <<EOF
# a local grid, a distributed run and a run whose data is missing
# ntasks: 3
$repo/configs/smoke.toml -m optim.lr=0.01:0.02:0.01 $fast --set run.name=g-lr\${optim.lr}

$repo/configs/smoke.toml --set train.mode=sync --set train.backups=0 $fast
$repo/configs/smoke.toml --set data.name=idx --set data.path=$tmp/nothing $fast --set run.name=nodata
EOF
cd "$tmp" || exit 1
"$repo/scripts/sweep.sh" s.txt -j 2 --logs logs >out1.txt 2>&1
rc=$?
cat out1.txt
check "exit status: the first failed run's (66)" test "$rc" = 66
check "two runs start before any ends (-j 2)" \
  bash -c "grep -E '\] (start|.*: exit)' out1.txt | head -2 | grep -c start | grep -qx 2"
for name in g-lr0.01 g-lr0.02; do
  check "$name completed, one process" python3 -c "
import json, sys
s = json.load(open('$tmp/runs/$name/summary.json')); j = json.load(open('$tmp/runs/$name/run.json'))
sys.exit(not (s['status'] == 'completed' and j['launches'][0]['launcher'] == 'none'))"
done
check "the unnamed distributed line: smoke-s_2, under mpirun with 3 ranks" python3 -c "
import json, sys
j = json.load(open('$tmp/runs/smoke-s_2/run.json'))['launches'][0]
s = json.load(open('$tmp/runs/smoke-s_2/summary.json'))
sys.exit(not (s['status'] == 'completed' and j['launcher'] == 'mpirun' and j['layout']['world'] == 3))"
check "the table: three completed, nodata 66 with its log" \
  bash -c "grep -q 'g-lr0.01 *0 completed' out1.txt && grep -q 'smoke-s_2 *0 completed' out1.txt &&
           grep -q 'nodata *66 failed (see $tmp/logs/3-nodata.log)' out1.txt"
check "the failed run's log says why" grep -q "no such file" "$tmp/logs/3-nodata.log"

# A typo in a grid's key: said once, 78, nothing runs.
echo "$repo/configs/smoke.toml -m optim.lrr=0.1,0.2 -m train.batch=8,16 $fast" >"$tmp/typo.txt"
"$repo/scripts/sweep.sh" typo.txt >out2.txt 2>&1
rc=$?
cat out2.txt
check "a typo in -m: exit 78" test "$rc" = 78
check "a typo in -m: said once, with the nearest key" \
  bash -c "test \$(grep -c 'unknown key optim.lrr' out2.txt) = 1 && grep -q 'did you mean optim.lr?' out2.txt"

# Ctrl-C (SIGTERM here: a command started in the background ignores
# SIGINT): the run going stops with a checkpoint, the next never starts.
cat >"$tmp/long.txt" <<EOF
$repo/configs/smoke.toml --set model.name=mlp --set train.steps=2000000 --set run.dir=$tmp/runs --set run.name=long --set run.progress=lines --set run.progress_every_steps=100
$repo/configs/smoke.toml $fast --set run.name=never
EOF
"$repo/scripts/sweep.sh" long.txt --logs logs2 >"$tmp/long.out" 2>&1 &
pid=$!
for _ in $(seq 1 120); do
  grep -q "step [1-9]" "$tmp/logs2/0-long.log" 2>/dev/null && break
  sleep 0.5
done
kill -TERM "$pid"
wait "$pid"
rc=$?
cat "$tmp/long.out"
check "stopped: exit 75" test "$rc" = 75
check "stopped: the run with a checkpoint, the next not started" \
  bash -c "grep -q 'long *75 stopped' '$tmp/long.out' && grep -q 'never *not started' '$tmp/long.out' &&
           test ! -d '$tmp/runs/never' && test -f '$tmp/runs/long/checkpoints/latest'"
echo "$fails check(s) failed"
exit $((fails > 0))
