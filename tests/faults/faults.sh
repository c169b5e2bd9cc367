#!/usr/bin/env bash
# Fault scenarios run as users meet them (issues "Never hang, never lose
# work" and "Never hang, round two"): real signals to real ranks (SIGSTOP,
# SIGKILL, SIGTERM, SIGUSR1, SIGSTOP/SIGCONT of the whole job), a disk that
# fills up, a corrupt checkpoint, ranks started with different configs, a
# run directory in use, moved or copied, a run extended, integers out of
# range. Each scenario is one CTest (label faults) with a TIMEOUT; it prints
# what it measured (exit codes, seconds, what is on disk) and exits non-zero
# on the first broken promise (77: cannot run here, e.g. no root for the
# tmpfs).
#
#   tests/faults/faults.sh SYNCOPT_BINARY SCENARIO
set -uo pipefail
BIN=$(realpath "$1")
SCENARIO=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CFG=$SRC/configs/smoke.toml
WORK=$(mktemp -d /tmp/syncopt-faults-XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cleanup() {
  # Nothing of ours may outlive the test (a stopped rank included).
  pkill -CONT -f "run.dir=$WORK" 2>/dev/null
  pkill -KILL -f "run.dir=$WORK" 2>/dev/null
  if mountpoint -q "$WORK/full" 2>/dev/null; then umount "$WORK/full"; fi
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$SCENARIO]: $*" >&2
  for log in "$WORK"/*log*; do
    [ -f "$log" ] && { echo "--- $(basename "$log") (tail)" >&2; tail -60 "$log" >&2; }
  done
  exit 1
}
note() { echo "[$SCENARIO] $*"; }
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$(now) - $1:.1f}')"; }

# The pid of MPI rank R of the run named NAME (from Open MPI's environment
# of each process), waiting up to 20 s for it to appear.
rank_pid() {
  local name=$1 rank=$2
  for _ in $(seq 200); do
    for pid in $(pgrep -f "run.dir=$WORK --set run.name=$name( |$)"); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then
        echo "$pid"
        return 0
      fi
    done
    sleep 0.1
  done
  return 1
}

# Waits until the run has applied at least K updates (its steps.jsonl).
wait_steps() {
  local dir=$1 k=$2
  for _ in $(seq 600); do
    [ -f "$dir/steps.jsonl" ] && [ "$(wc -l <"$dir/steps.jsonl")" -ge "$k" ] && return 0
    sleep 0.05
  done
  fail "the run in $dir never reached $k updates"
}

# summary.json fields (python expressions on d, printed space-separated).
field() { python3 -c "import json,sys; d=json.load(open('$1/summary.json')); print($2)" 2>/dev/null; }
# The last launch of run.json (python expressions on l).
launch() { python3 -c "import json,sys; l=json.load(open('$1/run.json'))['launches'][-1]; print($2)" 2>/dev/null; }
# Whether $1 < $2 (seconds).
below() { python3 -c "import sys; sys.exit(0 if $1 < $2 else 1)"; }
# Every file of a directory with its checksum, for "nothing changed".
tree_sum() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 md5sum); }
# Waits up to 60 s for a line matching PATTERN in FILE.
wait_log() {
  for _ in $(seq 600); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  fail "never saw '$2' in $1"
}

# Options of a small, quick CNN job; the caller adds mode and length.
job() {
  echo "train $CFG --quiet --set run.dir=$WORK --set run.name=$1 --set model.name=cnn" \
       "--set train.batch=16 --set data.synthetic_train=2048 --set cluster.dead_after_s=3"
}

check_no_orphans() {
  sleep 0.5
  if pgrep -f "run.dir=$WORK" >/dev/null; then
    pgrep -af "run.dir=$WORK" >&2
    fail "processes of the run are left"
  fi
}

# The latest checkpoint of a run loads: sizes and CRC-32 verified, every
# float finite (syncopt checkpoints).
check_latest_loads() {
  local dir=$1
  "$BIN" checkpoints "$dir" >"$WORK/ck.log" 2>&1 || fail "the latest checkpoint of $dir does not load: $(cat "$WORK/ck.log")"
  note "$(grep '^latest' "$WORK/ck.log")"
}

case "$SCENARIO" in
sigstop_b1)
  # A worker stopped forever with b = 1: the run completes without it.
  mpirun --enable-recovery -np 4 "$BIN" $(job s) --set train.mode=sync --set train.backups=1 \
    --set train.steps=300 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/s" 20
  # SIGUSR2 (forwarded by mpirun): every rank dumps its flight recorder and
  # trains on (the run completes below).
  kill -USR2 $P
  for _ in $(seq 100); do [ "$(ls "$WORK/s/flight" 2>/dev/null | wc -l)" = 4 ] && break; sleep 0.1; done
  [ "$(ls "$WORK/s/flight" 2>/dev/null | wc -l)" = 4 ] || fail "SIGUSR2: flight dumps $(ls "$WORK/s/flight" 2>/dev/null), expected rank-0..3.jsonl"
  grep -q '"reason":"SIGUSR2"' "$WORK/s/flight/rank-3.jsonl" || fail "rank 3's dump does not say SIGUSR2"
  W=$(rank_pid s 3) || fail "no rank 3"
  kill -STOP "$W"
  T0=$(now)
  wait $P
  RC=$?
  note "mpirun exit $RC, $(secs "$T0")s after SIGSTOP of rank 3 (pid $W)"
  # The shard found rank 3 silent and dumped what it waited for: rank 3.
  "$BIN" report "$WORK/s" >"$WORK/report.log" 2>&1 || fail "syncopt report failed"
  grep -A3 '^  shard 0 (rank 0): .*rank 3 silent' "$WORK/report.log" | grep -q 'waited for .* from worker 2 (rank 3), posted' ||
    fail "the flight recorder does not say that shard 0 waited for rank 3: $(sed -n '/^flight recorder/,$p' "$WORK/report.log")"
  grep -q 'flight recorder: .*flight/rank-\*.jsonl' "$WORK/log" || fail "the ending message does not name the flight dumps"
  note "$(grep -A2 '^  shard 0 (rank 0): .*rank 3 silent' "$WORK/report.log" | tail -1)"
  [ "$(field "$WORK/s" "d['status'], d['exit_code']")" = "completed 0" ] || fail "summary: $(field "$WORK/s" "d.get('status'), d.get('exit_code'), d.get('error')")"
  [ "$(field "$WORK/s" "d['lost_workers'][0]['rank']")" = 3 ] || fail "lost_workers does not name rank 3"
  [ "$(field "$WORK/s" "d['steps']")" = 300 ] || fail "not every update was applied"
  note "lost_workers: $(field "$WORK/s" "d['lost_workers']")"
  python3 -c "import sys; sys.exit(0 if $(secs "$T0") < 300 else 1)"
  check_no_orphans
  ;;
sigstop_b0)
  # A worker stopped forever with b = 0: the run cannot go on; it says so
  # (exit 69 naming the rank) within dead_after_s + 15 s, with a checkpoint.
  mpirun -np 4 "$BIN" $(job s) --set train.mode=sync --set train.backups=0 \
    --set train.steps=2000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/s" 20
  W=$(rank_pid s 2) || fail "no rank 2"
  # Two busy loops slow rank 0's writing of summary.json: a worker that
  # exits 69 before rank 0 said WRITTEN makes mpirun kill rank 0 mid-write
  # (seen in CI on a loaded machine; about half the runs here without the wait).
  for _ in 1 2; do timeout 30 sh -c 'while :; do :; done' & HOGS="${HOGS:-} $!"; done
  kill -STOP "$W"
  T0=$(now)
  wait $P
  RC=$?
  T=$(secs "$T0")
  kill $HOGS 2>/dev/null
  note "mpirun exit $RC, $T s after SIGSTOP of rank 2 (pid $W)"
  python3 -c "import sys; sys.exit(0 if $T < 3 + 15 else 1)" || fail "took $T s (bound: dead_after_s 3 + 15)"
  [ "$(field "$WORK/s" "d['exit_code']")" = 69 ] || fail "summary exit_code $(field "$WORK/s" "d.get('exit_code')")"
  grep -q "rank 2 on" "$WORK/log" || fail "no message names rank 2"
  note "error: $(field "$WORK/s" "d['error']")"
  check_latest_loads "$WORK/s"
  check_no_orphans
  ;;
slow_alive)
  # A worker slower than dead_after_s per step is slow, not dead.
  mpirun -np 4 "$BIN" $(job s) --set train.mode=sync --set train.backups=1 --set train.steps=400 \
    --set cluster.dead_after_s=1 --set stragglers.model=fixed --set stragglers.workers=[2] \
    --set stragglers.mean_ms=2500 >"$WORK/log" 2>&1
  RC=$?
  note "mpirun exit $RC; slow worker's gradients: $(field "$WORK/s" "d['accepted_per_worker'][2] + d['drops_per_worker'][2]")"
  [ $RC = 0 ] || fail "exit $RC"
  [ "$(field "$WORK/s" "len(d['lost_workers'])")" = 0 ] || fail "a slow worker was declared dead"
  [ "$(field "$WORK/s" "d['drops_per_worker'][2] + d['accepted_per_worker'][2] >= 1")" = True ] ||
    fail "the slow worker's gradients never reached the shard"
  ;;
kill9_b1)
  # SIGKILL of a worker under mpirun --enable-recovery, b = 1: absorbed.
  mpirun --enable-recovery -np 4 "$BIN" $(job s) --set train.mode=sync --set train.backups=1 \
    --set train.steps=300 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/s" 20
  W=$(rank_pid s 3) || fail "no rank 3"
  kill -KILL "$W"
  T0=$(now)
  wait $P
  RC=$?
  note "mpirun exit $RC, $(secs "$T0")s after SIGKILL of rank 3"
  [ $RC = 0 ] || fail "mpirun exit $RC"
  [ "$(field "$WORK/s" "d['status'], d['exit_code'], d['steps']")" = "completed 0 300" ] ||
    fail "summary: $(field "$WORK/s" "d.get('status'), d.get('exit_code'), d.get('error')")"
  [ "$(field "$WORK/s" "d['lost_workers'][0]['rank']")" = 3 ] || fail "lost_workers does not name rank 3"
  check_no_orphans
  ;;
kill9_repeated)
  # kill -9 of a worker at a random moment, ten times (sync b = 1 under
  # --enable-recovery, a small MLP): every run completes. Now and then the
  # kill lands while the worker's gradient is being received (Open MPI:
  # "Read -1, expected N, errno = 3"); that receive cannot be cancelled,
  # and excluding the worker once ended the run with 70 (about 1 in 12
  # kills here). Counts how many runs met that case.
  RANDOM=11
  hits=0
  for i in $(seq 10); do
    mpirun --enable-recovery -np 4 "$BIN" $(job r$i) --set train.mode=sync --set train.backups=1 \
      --set model.name=mlp --set data.limit_train=2048 --set train.batch=32 --set train.steps=600 \
      --set stragglers.model=fixed --set stragglers.mean_ms=5 --set cluster.dead_after_s=2 \
      >"$WORK/log-r$i" 2>&1 &
    P=$!
    wait_steps "$WORK/r$i" $((20 + RANDOM % 150))
    W=$(rank_pid r$i 2) || fail "no rank 2 in run $i"
    kill -KILL "$W"
    wait $P
    RC=$?
    [ $RC = 0 ] || fail "run $i: mpirun exit $RC"
    [ "$(field "$WORK/r$i" "d['status'], d['exit_code'], d['steps']")" = "completed 0 600" ] ||
      fail "run $i: summary: $(field "$WORK/r$i" "d.get('status'), d.get('exit_code'), d.get('error')")"
    grep -q "mid-message" "$WORK/log-r$i" && hits=$((hits + 1))
    rm -f "$WORK/log-r$i"
  done
  note "10 kills absorbed; $hits of them while the worker's gradient was being received"
  check_no_orphans
  ;;
resume_local)
  # SIGTERM to a local run, then resume: bitwise the uninterrupted run.
  "$BIN" $(job full) --set train.steps=300 --set optim.schedule=linear_anneal >"$WORK/full.log" 2>&1 ||
    fail "uninterrupted run failed"
  "$BIN" $(job part) --set train.steps=300 --set optim.schedule=linear_anneal >"$WORK/part.log" 2>&1 &
  P=$!
  wait_steps "$WORK/part" 100
  kill -TERM $P
  T0=$(now)
  wait $P
  RC=$?
  note "exit $RC, $(secs "$T0")s after SIGTERM; summary: $(field "$WORK/part" "d['status'], d['stopped']")"
  [ $RC = 75 ] || fail "exit $RC, expected 75"
  python3 -c "import sys; sys.exit(0 if $(secs "$T0") < 10 else 1)" || fail "not under 10 s"
  check_latest_loads "$WORK/part"
  "$BIN" $(job part) --set train.steps=300 --set optim.schedule=linear_anneal --set run.resume=true \
    >"$WORK/resume.log" 2>&1 || fail "resume failed: $(tail -3 "$WORK/resume.log")"
  cmp "$WORK/full/params.f32" "$WORK/part/params.f32" || fail "parameters differ"
  cmp "$WORK/full/params_ema.f32" "$WORK/part/params_ema.f32" || fail "EMA differs"
  python3 "$SRC/tests/faults/same_steps.py" "$WORK/full" "$WORK/part" || fail "records differ"
  ;;
resume_bn)
  # SIGTERM to a local run of a model with batch norm and dropout that
  # evaluates every 50 steps, then resume: bitwise the uninterrupted run,
  # evaluations included (their statistics are recomputed from the
  # parameters, nothing of them is in the checkpoint; docs/bn.md).
  L='model.layers=[{type="conv",name="c1",out=8,pad=1,bias=false},{type="bn"},{type="relu",name="r1"},'
  L+='{type="conv",out=16,stride=2,pad=1,bias=false},{type="bn"},{type="add",from="r1",shortcut="projection"},'
  L+='{type="relu"},{type="dropout",rate=0.2},{type="gap"},{type="fc"}]'
  A="--set train.steps=300 --set eval.every_steps=50 --set eval.bn_batches=4 --set model.name=custom --set $L"
  "$BIN" $(job full) $A >"$WORK/full.log" 2>&1 || fail "uninterrupted run failed"
  "$BIN" $(job part) $A >"$WORK/part.log" 2>&1 &
  P=$!
  wait_steps "$WORK/part" 120
  kill -TERM $P
  wait $P
  RC=$?
  note "exit $RC at $(wc -l <"$WORK/part/steps.jsonl") records, $(wc -l <"$WORK/part/eval.jsonl") evaluations"
  [ $RC = 75 ] || fail "exit $RC, expected 75"
  "$BIN" $(job part) $A --set run.resume=true >"$WORK/resume.log" 2>&1 ||
    fail "resume failed: $(tail -3 "$WORK/resume.log")"
  cmp "$WORK/full/params.f32" "$WORK/part/params.f32" || fail "parameters differ"
  cmp "$WORK/full/params_ema.f32" "$WORK/part/params_ema.f32" || fail "EMA differs"
  python3 "$SRC/tests/faults/same_steps.py" "$WORK/full" "$WORK/part" || fail "records differ"
  python3 - "$WORK/full/eval.jsonl" "$WORK/part/eval.jsonl" <<'PY' || fail "evaluations differ"
import json, sys
keys = ("step", "test_loss", "test_acc", "test_loss_ema", "test_acc_ema")
a, b = ([tuple(json.loads(l)[k] for k in keys) for l in open(p) if l.strip()] for p in sys.argv[1:])
if a != b or len(a) != 6:
    sys.exit(f"{len(a)} vs {len(b)} evaluations; first difference: {next((x, y) for x, y in zip(a, b) if x != y) if a != b else 'none'}")
print(f"{len(a)} evaluations, the same test loss and accuracy (theta and EMA) at each")
PY
  ;;
resume_after_kill)
  # kill -9 of a local run between two periodic checkpoints, then resume:
  # the records written after the latest checkpoint are cut off (no step
  # twice) and the run ends bitwise as the uninterrupted one.
  A="--set train.steps=300 --set run.checkpoint_every_steps=100"
  "$BIN" $(job full) $A >"$WORK/full.log" 2>&1 || fail "uninterrupted run failed"
  # A step takes ~5 ms: a kill meant for step 150 can land on the
  # checkpoint at 200 on a loaded machine (seen once in CI), which would
  # test nothing; then the partial run is started again, up to 3 times.
  for attempt in 1 2 3; do
    rm -rf "$WORK/part"
    "$BIN" $(job part) $A >"$WORK/part.log" 2>&1 &
    P=$!
    wait_steps "$WORK/part" 150
    kill -KILL $P
    wait $P
    note "attempt $attempt: killed at $(wc -l <"$WORK/part/steps.jsonl") records, latest checkpoint $(cat "$WORK/part/checkpoints/latest")"
    [ "$(wc -l <"$WORK/part/steps.jsonl")" -gt "$(cat "$WORK/part/checkpoints/latest")" ] && break
  done
  [ "$(wc -l <"$WORK/part/steps.jsonl")" -gt "$(cat "$WORK/part/checkpoints/latest")" ] ||
    fail "no records after the latest checkpoint in 3 attempts: the scenario tests nothing"
  "$BIN" $(job part) $A --set run.resume=true >"$WORK/resume.log" 2>&1 ||
    fail "resume failed: $(tail -3 "$WORK/resume.log")"
  cmp "$WORK/full/params.f32" "$WORK/part/params.f32" || fail "parameters differ"
  python3 "$SRC/tests/faults/same_steps.py" "$WORK/full" "$WORK/part" || fail "records differ"
  ;;
resume_sync)
  # SIGUSR1 to mpirun (forwarded to every rank) for sync b = 0 on 4 ranks,
  # then resume: bitwise the uninterrupted run.
  A="--set train.mode=sync --set train.backups=0 --set train.steps=150 --set optim.ema=0.9"
  mpirun -np 4 "$BIN" $(job full) $A >"$WORK/full.log" 2>&1 || fail "uninterrupted run failed"
  mpirun -np 4 "$BIN" $(job part) $A >"$WORK/part.log" 2>&1 &
  P=$!
  wait_steps "$WORK/part" 60
  kill -USR1 $P
  T0=$(now)
  wait $P
  RC=$?
  note "mpirun exit $RC, $(secs "$T0")s after SIGUSR1; summary: $(field "$WORK/part" "d['status'], d['stopped']")"
  [ $RC = 75 ] || fail "exit $RC, expected 75"
  python3 -c "import sys; sys.exit(0 if $(secs "$T0") < 10 else 1)" || fail "not under 10 s"
  check_latest_loads "$WORK/part"
  mpirun -np 4 "$BIN" $(job part) $A --set run.resume=true >"$WORK/resume.log" 2>&1 ||
    fail "resume failed: $(tail -3 "$WORK/resume.log")"
  cmp "$WORK/full/params.f32" "$WORK/part/params.f32" || fail "parameters differ"
  cmp "$WORK/full/params_ema.f32" "$WORK/part/params_ema.f32" || fail "EMA differs"
  python3 "$SRC/tests/faults/same_steps.py" "$WORK/full" "$WORK/part" || fail "records differ"
  ;;
kill_during_save)
  # SIGKILL at random moments of a run that saves a checkpoint every step;
  # after each kill the latest checkpoint must load (the resume goes on).
  RANDOM=7
  "$BIN" $(job k) --set train.steps=4000 --set model.name=mlp --set run.checkpoint_every_steps=1 \
    >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/k" 5
  kill -KILL $P; wait $P 2>/dev/null
  for i in $(seq 10); do
    "$BIN" $(job k) --set train.steps=4000 --set model.name=mlp --set run.checkpoint_every_steps=1 \
      --set run.resume=true >"$WORK/log.$i" 2>&1 &
    P=$!
    sleep "0.$((RANDOM % 9 + 1))$((RANDOM % 10))"
    kill -KILL $P 2>/dev/null; wait $P 2>/dev/null
    check_latest_loads "$WORK/k"
    if grep -q "syncopt: error" "$WORK/log.$i"; then fail "resume $i: $(grep -A2 'syncopt: error' "$WORK/log.$i")"; fi
    note "kill $i: latest at step $(cat "$WORK/k/checkpoints/latest")"
  done
  "$BIN" $(job k) --set train.steps=4000 --set model.name=mlp --set run.checkpoint_every_steps=100 \
    --set run.resume=true >"$WORK/log.end" 2>&1 || fail "final resume: $(tail -3 "$WORK/log.end")"
  [ "$(field "$WORK/k" "d['steps']")" = 4000 ] || fail "the records do not hold every step once"
  ;;
corrupt)
  "$BIN" $(job c) --set train.steps=20 --set model.name=mlp >"$WORK/log" 2>&1 || fail "run failed"
  STEP=$(cat "$WORK/c/checkpoints/latest")
  PART="$WORK/c/checkpoints/$STEP/local.state"
  python3 -c "p='$PART'; b=bytearray(open(p,'rb').read()); b[len(b)//2]^=0xFF; open(p,'wb').write(b)"
  "$BIN" $(job c) --set train.steps=20 --set model.name=mlp --set run.resume=true >"$WORK/log2" 2>&1
  RC=$?
  note "corrupt part: exit $RC: $(grep -m1 -o 'local.state.*' "$WORK/log2")"
  [ $RC = 65 ] || fail "exit $RC, expected 65"
  grep -q "local.state" "$WORK/log2" && grep -qi "crc\|checksum" "$WORK/log2" || fail "the error does not name the file and the checksum"
  "$BIN" $(job none) --set train.steps=20 --set model.name=mlp --set run.resume=true >"$WORK/log3" 2>&1
  RC=$?
  note "no run at all: exit $RC"
  [ $RC = 66 ] || fail "exit $RC, expected 66"
  mkdir -p "$WORK/empty" && "$BIN" train "$CFG" --quiet --set run.dir="$WORK" --set run.name=empty \
    --set model.name=mlp >/dev/null 2>&1
  rm -rf "$WORK/empty/checkpoints"
  "$BIN" train "$CFG" --quiet --set run.dir="$WORK" --set run.name=empty --set model.name=mlp \
    --set run.resume=true >"$WORK/log4" 2>&1
  RC=$?
  note "a run without checkpoints: exit $RC"
  [ $RC = 66 ] || fail "exit $RC, expected 66"
  ;;
diverge_allreduce)
  # allreduce with a huge lr: exit 70, nothing non-finite saved, the last
  # finite checkpoint kept.
  mpirun -np 3 "$BIN" $(job d) --set train.mode=allreduce --set optim.lr=1e6 --set train.steps=60 \
    --set model.name=mlp --set run.checkpoint_every_steps=1 >"$WORK/log" 2>&1
  RC=$?
  note "mpirun exit $RC; summary: $(field "$WORK/d" "d['status'], d['exit_code']")"
  [ "$(field "$WORK/d" "d['exit_code']")" = 70 ] || fail "summary exit_code is not 70"
  check_latest_loads "$WORK/d"
  ;;
disk_full)
  # The run directory on a 3 MB tmpfs: a write fails with the OS reason
  # (exit 74) and the previous checkpoint stays intact.
  [ "$(id -u)" = 0 ] || { echo "skip: mounting a tmpfs needs root"; exit 77; }
  mkdir -p "$WORK/full"
  mount -t tmpfs -o size=3m tmpfs "$WORK/full" || { echo "skip: cannot mount a tmpfs here"; exit 77; }
  "$BIN" train "$CFG" --quiet --set run.dir="$WORK/full" --set run.name=f --set model.name=mlp \
    --set train.steps=3000 --set run.checkpoint_every_steps=10 \
    --set run.keep_checkpoints=50 >"$WORK/log" 2>&1
  RC=$?
  note "exit $RC: $(grep -m1 -o 'cannot.*' "$WORK/log")"
  [ $RC = 74 ] || fail "exit $RC, expected 74"
  grep -q "No space left on device" "$WORK/log" || fail "the error does not say why"
  check_latest_loads "$WORK/full/f"
  ;;
config_mismatch)
  # Ranks started with different configs: one config error (78) naming them.
  mpirun -np 2 "$BIN" $(job m) --set train.mode=sync : -np 2 "$BIN" $(job m) --set train.mode=sync \
    --set model.name=mlp >"$WORK/log" 2>&1
  RC=$?
  note "mpirun exit $RC: $(grep -m1 -o 'the resolved config.*' "$WORK/log")"
  [ $RC = 78 ] || fail "exit $RC, expected 78"
  grep -q "rank(s) 2 3" "$WORK/log" || fail "the error does not name ranks 2 and 3"
  [ "$(grep -c 'the resolved config' "$WORK/log")" = 1 ] || fail "not printed once"
  ;;
sigstop_rank0 | sigstop_rank0_eval)
  # The only parameter server stopped for good (SIGSTOP of rank 0): the
  # workers (and the evaluator) find it silent; one of them records the
  # outcome in its place and ends it, and mpirun exits within
  # dead_after_s + 15 s. With the evaluator the launcher is a plain mpirun,
  # which ends every rank once one is killed: the outcome must be on disk first.
  if [ "$SCENARIO" = sigstop_rank0 ]; then
    NP=4 EXTRA=() LAUNCH=(--enable-recovery)
  else
    NP=5 EXTRA=(--set cluster.evaluator=true --set eval.every_s=1) LAUNCH=()
  fi
  mpirun "${LAUNCH[@]}" -np $NP "$BIN" $(job s) --set train.mode=sync --set train.backups=1 \
    --set train.steps=100000 --set model.name=mlp "${EXTRA[@]}" >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/s" 1
  sleep 1
  R0=$(rank_pid s 0) || fail "no rank 0"
  kill -STOP "$R0"
  T0=$(now)
  wait $P
  RC=$?
  T=$(secs "$T0")
  note "mpirun exit $RC, $T s after SIGSTOP of rank 0 (pid $R0)"
  below "$T" 18 || fail "took $T s (bound: dead_after_s 3 + 15)"
  for _ in $(seq 20); do [ "$(ps -o stat= -p "$R0" 2>/dev/null | cut -c1)" = T ] || break; sleep 0.1; done
  [ "$(ps -o stat= -p "$R0" 2>/dev/null | cut -c1)" = T ] && fail "rank 0 (pid $R0) is still stopped"
  [ "$(field "$WORK/s" "d['status'], d['exit_code']")" = "failed 69" ] ||
    fail "summary: $(field "$WORK/s" "d.get('status'), d.get('exit_code')")"
  [ "$(field "$WORK/s" "d['reported_by']['rank'] != 0")" = True ] || fail "summary not reported by a surviving rank"
  field "$WORK/s" "d['reason']" | grep -q "rank 0 on" || fail "the reason does not name rank 0"
  [ "$(launch "$WORK/s" "l['status'], l['exit_code']")" = "failed 69" ] || fail "run.json's launch: $(launch "$WORK/s" "l.get('status'), l.get('exit_code')")"
  note "summary.json: failed 69, reported by $(field "$WORK/s" "d['reported_by']"): $(field "$WORK/s" "d['reason']")"
  # Every worker found rank 0 silent and dumped what it waited for: shard 0,
  # which left no dump of its own.
  "$BIN" report "$WORK/s" >"$WORK/report.log" 2>&1 || fail "syncopt report failed"
  [ "$SCENARIO" = sigstop_rank0 ] && for r in 1 2 3; do
    [ -f "$WORK/s/flight/rank-$r.jsonl" ] || fail "rank $r wrote no flight dump"
    grep -A3 "^  worker $((r - 1)) (rank $r): .*rank 0 silent" "$WORK/report.log" | grep -q 'from shard 0 (rank 0), posted' ||
      fail "rank $r's flight dump does not say it waited for shard 0: $(sed -n '/^flight recorder/,$p' "$WORK/report.log")"
  done
  grep -q 'left no dump.*: shard 0 (rank 0)' "$WORK/report.log" || fail "the report does not name shard 0 as left without a dump"
  note "$(grep -A2 '^  worker 0 (rank 1): ' "$WORK/report.log" | tail -1)"
  [ "$(grep -c 'syncopt: error' "$WORK/log")" = 1 ] || fail "not one error message: $(grep 'syncopt: error' "$WORK/log")"
  check_no_orphans
  ;;
allreduce_kill9 | allreduce_sigstop)
  # One rank of allreduce killed (under mpirun --enable-recovery) or stopped:
  # exit 69 within dead_after_s + 15 s, one error naming the rank, the
  # records and a checkpoint of the last step every rank applied. The
  # stopped case then resumes that checkpoint with every rank: it ends
  # bitwise as the uninterrupted run.
  A="--set train.mode=allreduce --set model.name=mlp --set stragglers.model=fixed --set stragglers.mean_ms=2"
  if [ "$SCENARIO" = allreduce_kill9 ]; then SIG=KILL LAUNCH=(--enable-recovery); else SIG=STOP LAUNCH=(); fi
  mpirun "${LAUNCH[@]}" -np 3 "$BIN" $(job a) $A --set train.steps=100000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/a" 1
  sleep 1
  W=$(rank_pid a 2) || fail "no rank 2"
  kill -$SIG "$W"
  T0=$(now)
  wait $P
  RC=$?
  T=$(secs "$T0")
  note "mpirun exit $RC, $T s after SIG$SIG of rank 2 (pid $W)"
  below "$T" 18 || fail "took $T s (bound: dead_after_s 3 + 15)"
  [ "$(field "$WORK/a" "d['status'], d['exit_code']")" = "failed 69" ] ||
    fail "summary: $(field "$WORK/a" "d.get('status'), d.get('exit_code')")"
  [ "$(grep -c 'error' "$WORK/log")" = 1 ] || fail "not one error message: $(grep error "$WORK/log")"
  grep 'error' "$WORK/log" | grep -q "rank 2 on" || fail "the error does not name rank 2"
  STEPS=$(field "$WORK/a" "d['steps']")
  [ "$(wc -l <"$WORK/a/steps.jsonl")" = "$STEPS" ] || fail "$(wc -l <"$WORK/a/steps.jsonl") records for $STEPS steps"
  check_latest_loads "$WORK/a"
  [ "$(cat "$WORK/a/checkpoints/latest")" = "$STEPS" ] || fail "latest checkpoint $(cat "$WORK/a/checkpoints/latest"), last step $STEPS"
  note "records and checkpoint at step $STEPS; lost_workers $(field "$WORK/a" "[w['rank'] for w in d['lost_workers']]")"
  check_no_orphans
  if [ $SIG = STOP ]; then
    END=$((STEPS + 200))
    mpirun -np 3 "$BIN" $(job full) $A --set train.steps=$END >"$WORK/full.log" 2>&1 || fail "uninterrupted run failed"
    mpirun -np 3 "$BIN" $(job a) $A --set train.steps=$END --set run.resume=true >"$WORK/resume.log" 2>&1 ||
      fail "resume failed: $(tail -3 "$WORK/resume.log")"
    cmp "$WORK/full/params.f32" "$WORK/a/params.f32" || fail "parameters differ from the uninterrupted run"
    python3 "$SRC/tests/faults/same_steps.py" "$WORK/full" "$WORK/a" || fail "records differ"
  fi
  ;;
pause_all)
  # The whole job stopped for 3 x dead_after_s and continued (what scontrol
  # suspend/resume and Ctrl-Z + fg do): a pause is not a death. sync b = 1
  # with an evaluator, then allreduce: both complete, nobody lost.
  for mode in sync allreduce; do
    if [ $mode = sync ]; then NP=5 A="--set cluster.evaluator=true --set eval.every_s=1"; else NP=3 A=""; fi
    mpirun --enable-recovery -np $NP "$BIN" $(job p$mode) --set train.mode=$mode --set model.name=mlp \
      --set stragglers.model=fixed --set stragglers.mean_ms=5 --set train.steps=600 $A >"$WORK/log-$mode" 2>&1 &
    P=$!
    wait_steps "$WORK/p$mode" 1
    sleep 1
    PIDS=$(pgrep -f "run.dir=$WORK --set run.name=p$mode( |$)")
    # shellcheck disable=SC2086
    kill -STOP $PIDS
    sleep 9
    # shellcheck disable=SC2086
    kill -CONT $PIDS
    T0=$(now)
    wait $P
    RC=$?
    note "$mode: mpirun exit $RC, $(secs "$T0") s after SIGCONT; summary $(field "$WORK/p$mode" "d['status'], d['exit_code'], d['steps'], 'lost', d['lost_workers']")"
    [ "$(field "$WORK/p$mode" "d['status'], d['exit_code'], d['steps']")" = "completed 0 600" ] ||
      fail "$mode: summary $(field "$WORK/p$mode" "d.get('status'), d.get('exit_code'), d.get('error')")"
    [ "$(field "$WORK/p$mode" "len(d['lost_workers'])")" = 0 ] || fail "$mode: workers lost to a pause"
    grep -q "not running for" "$WORK/log-$mode" || fail "$mode: no rank said it was paused"
  done
  check_no_orphans
  ;;
run_lock)
  # One job at a time in a run directory. A run holds it (stopped, so that
  # it writes nothing meanwhile); a resume and a new start of the same run
  # exit 73 naming the holder and change nothing; the run then completes.
  # kill -9 leaves a stale lock that the next resume takes over; two
  # resumes at once: one trains, one is refused, the records stay whole.
  A="--set model.name=mlp --set stragglers.model=fixed --set stragglers.mean_ms=5 --set train.steps=2000 --set run.checkpoint_every_steps=50"
  "$BIN" $(job l) $A >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/l" 60
  kill -STOP $P
  tree_sum "$WORK/l" >"$WORK/before"
  "$BIN" $(job l) $A --set run.resume=true >"$WORK/log2" 2>&1
  RC=$?
  "$BIN" $(job l) $A --set run.overwrite=true >"$WORK/log3" 2>&1
  RC3=$?
  tree_sum "$WORK/l" >"$WORK/after"
  note "resume of a run in use: exit $RC: $(grep -o 'in use by.*' "$WORK/log2" | cut -c1-120)"
  note "overwrite of a run in use: exit $RC3"
  [ $RC = 73 ] && [ $RC3 = 73 ] || fail "exit $RC and $RC3, expected 73"
  grep -q "in use by host $(hostname), pid $P" "$WORK/log2" || fail "the error does not name the holder (pid $P)"
  diff "$WORK/before" "$WORK/after" >/dev/null || fail "the refused starts changed the run directory"
  kill -CONT $P
  wait $P || fail "the run holding the lock failed"
  # A stale lock: its holder killed while it trains (not after a fixed
  # sleep: the 2000 steps left take ~1.3 s here, and a kill after 2 s found
  # the run done and the lock released, which tested nothing).
  "$BIN" $(job l) $A --set train.steps=4000 --set run.resume=true >"$WORK/log4" 2>&1 &
  P=$!
  wait_steps "$WORK/l" 2100
  kill -KILL $P
  wait $P 2>/dev/null
  RC4=$?
  [ $RC4 = 137 ] || fail "the resume to be killed ended by itself (exit $RC4) before the kill"
  [ "$(python3 -c "import json; print(json.load(open('$WORK/l/run.lock'))['pid'])")" = "$P" ] ||
    fail "run.lock does not name the killed holder $P (a stale lock is what this tests)"
  # Two resumes at once.
  "$BIN" $(job l) $A --set train.steps=4000 --set run.resume=true >"$WORK/log5" 2>&1 &
  P5=$!
  "$BIN" $(job l) $A --set train.steps=4000 --set run.resume=true >"$WORK/log6" 2>&1 &
  P6=$!
  wait $P5
  RC5=$?
  wait $P6
  RC6=$?
  note "after a kill -9, two resumes at once: exits $RC5 and $RC6"
  [ "$(echo $RC5 $RC6 | tr ' ' '\n' | sort | tr '\n' ' ')" = "0 73 " ] || fail "exits $RC5 $RC6, expected one 0 and one 73"
  "$BIN" report "$WORK/l" >"$WORK/report.log" 2>&1 || fail "syncopt report: $(tail -2 "$WORK/report.log")"
  [ "$(field "$WORK/l" "d['steps']")" = 4000 ] || fail "the records do not hold every step once"
  ;;
outcome_attempts)
  # Every launch leaves its outcome: a run fails (b = 0, a worker stopped:
  # 69); a resume of it with another lr is refused (78) before training:
  # run.json records that launch, summary.json stays the run's (69); run.sh
  # exits with the launch's code (78), and with 73 when the run is in use.
  mpirun -np 4 "$BIN" $(job o) --set train.mode=sync --set train.backups=0 --set model.name=mlp \
    --set stragglers.model=fixed --set stragglers.mean_ms=5 --set train.steps=100000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/o" 1
  W=$(rank_pid o 3) || fail "no rank 3"
  kill -STOP "$W"
  wait $P
  [ "$(field "$WORK/o" "d['exit_code']")" = 69 ] || fail "the first launch: summary $(field "$WORK/o" "d.get('exit_code')")"
  cp "$WORK/o/summary.json" "$WORK/summary-69.json"
  R="--set run.dir=$WORK --set run.name=o --set train.mode=sync --set train.backups=0 --set model.name=mlp --set stragglers.model=fixed --set stragglers.mean_ms=5 --set train.steps=100000 --set train.batch=16 --set data.synthetic_train=2048 --set cluster.dead_after_s=3 --set run.resume=true"
  # shellcheck disable=SC2086
  SYNCOPT_BIN="$BIN" SYNCOPT_NP=4 "$SRC/scripts/run.sh" "$CFG" $R --set optim.lr=0.1 >"$WORK/log2" 2>&1 </dev/null
  RC=$?
  note "resume with another lr through run.sh: exit $RC; run.json: $(launch "$WORK/o" "l['status'], l['exit_code']"); summary.json: $(field "$WORK/o" "d['exit_code']")"
  [ $RC = 78 ] || fail "run.sh exit $RC, expected 78: $(tail -3 "$WORK/log2")"
  [ "$(launch "$WORK/o" "l['status'], l['exit_code']")" = "failed 78" ] || fail "run.json does not record the refused launch"
  cmp -s "$WORK/o/summary.json" "$WORK/summary-69.json" || fail "the refused launch changed summary.json"
  # The run in use by another job (stopped meanwhile): run.sh, whose mpirun
  # --enable-recovery exits 0, says 73 (from the outcome file).
  mpirun -np 4 "$BIN" $(job held) --set train.mode=sync --set model.name=mlp --set stragglers.model=fixed \
    --set stragglers.mean_ms=5 --set train.steps=2000 >"$WORK/log3" 2>&1 &
  P=$!
  wait_steps "$WORK/held" 1
  pkill -STOP -f "run.dir=$WORK --set run.name=held( |$)"
  SYNCOPT_BIN="$BIN" SYNCOPT_NP=4 "$SRC/scripts/run.sh" "$CFG" --set run.dir="$WORK" --set run.name=held \
    --set train.mode=sync --set model.name=mlp --set run.resume=true >"$WORK/log4" 2>&1 </dev/null
  RC=$?
  pkill -CONT -f "run.dir=$WORK --set run.name=held( |$)"
  wait $P
  note "run.sh resuming a run in use: exit $RC"
  [ $RC = 73 ] || fail "run.sh exit $RC, expected 73: $(tail -3 "$WORK/log4")"
  ;;
disk_full_mpi)
  # The disk fills while rank 0 writes steps.jsonl under mpirun: its clear
  # message, and from every other rank one line saying it ends because rank
  # 0 did (exit 74), not "shard 0 silent"; the outcome file says 74.
  [ "$(id -u)" = 0 ] || { echo "skip: mounting a tmpfs needs root"; exit 77; }
  mkdir -p "$WORK/full"
  mount -t tmpfs -o size=3m tmpfs "$WORK/full" || { echo "skip: cannot mount a tmpfs here"; exit 77; }
  SYNCOPT_OUTCOME_FILE="$WORK/outcome.json" mpirun --enable-recovery -np 4 "$BIN" train "$CFG" --quiet \
    --set run.dir="$WORK/full" --set run.name=f --set model.name=mlp --set train.mode=sync \
    --set train.steps=100000 --set run.tensorboard=false --set cluster.dead_after_s=3 >"$WORK/log" 2>&1
  RC=$?
  note "mpirun exit $RC; outcome file: $(cat "$WORK/outcome.json" 2>/dev/null | cut -c1-100)"
  grep -q "No space left on device" "$WORK/log" || fail "no message says why"
  grep -q "silent" "$WORK/log" && fail "a rank reported rank 0 as silent: $(grep silent "$WORK/log")"
  [ "$(grep -c 'ends with exit 74' "$WORK/log")" = 3 ] || fail "not one line from each other rank: $(grep -c 'ends with exit 74' "$WORK/log")"
  [ "$(python3 -c "import json; print(json.load(open('$WORK/outcome.json'))['exit_code'])")" = 74 ] ||
    fail "the outcome file does not say 74"
  ;;
moved_copied)
  # A stopped run copied: its own config.toml resumes the copy, where it
  # is, as a new run (its own run_id); the original is untouched. The
  # original moved, resumed by a relative path: the same run, moved.
  # The CNN at batch 32 (~7 ms a step here): the stop lands long before the
  # end (a local run has no stragglers to slow it: the MLP's 400 steps took
  # 0.1 s and sometimes ended before the signal came).
  A="--set train.batch=32 --set train.steps=400"
  "$BIN" $(job orig) $A >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/orig" 100
  kill -TERM $P
  wait $P
  [ $? = 75 ] || fail "the run was not stopped with a checkpoint"
  ID=$(python3 -c "import json; print(json.load(open('$WORK/orig/run.json'))['run_id'])")
  mkdir -p "$WORK/elsewhere"
  cp -r "$WORK/orig" "$WORK/elsewhere/copy"
  tree_sum "$WORK/orig" >"$WORK/before"
  "$BIN" train "$WORK/elsewhere/copy/config.toml" --quiet --set run.resume=true >"$WORK/log2" 2>&1 ||
    fail "resuming the copy failed: $(tail -3 "$WORK/log2")"
  tree_sum "$WORK/orig" >"$WORK/after"
  diff "$WORK/before" "$WORK/after" >/dev/null || fail "resuming the copy changed the original"
  COPY_ID=$(python3 -c "import json; print(json.load(open('$WORK/elsewhere/copy/run.json'))['run_id'])")
  [ "$(field "$WORK/elsewhere/copy" "d['status'], d['steps']")" = "completed 400" ] || fail "the copy did not complete"
  [ "$COPY_ID" != "$ID" ] || fail "the copy kept the original's run_id"
  [ "$(launch "$WORK/elsewhere/copy" "l['copied_from']['run_id']")" = "$ID" ] || fail "the copy does not say what it was copied from"
  note "copy resumed where it is: completed, run_id $COPY_ID (copied from $ID), original unchanged"
  mv "$WORK/orig" "$WORK/moved"
  (cd "$WORK" && "$BIN" train moved/config.toml --quiet --set run.resume=true >"$WORK/log3" 2>&1) ||
    fail "resuming the moved run by a relative path failed: $(tail -3 "$WORK/log3")"
  [ "$(field "$WORK/moved" "d['status'], d['steps']")" = "completed 400" ] || fail "the moved run did not complete"
  [ "$(python3 -c "import json; print(json.load(open('$WORK/moved/run.json'))['run_id'])")" = "$ID" ] || fail "the moved run lost its run_id"
  [ ! -e "$WORK/orig" ] || fail "resuming the moved run wrote to its old place"
  note "moved run resumed by a relative path: completed, same run_id, moved_from $(launch "$WORK/moved" "l['moved_from']")"
  ;;
extend)
  # A completed run extended: --set train.steps=<more> (with the schedule's
  # total following) continues it, locally and under mpirun; each step is
  # recorded once; another changed key is refused with the list.
  A="--set model.name=mlp --set optim.schedule=linear_anneal"
  "$BIN" $(job x) $A --set train.steps=100 >"$WORK/log" 2>&1 || fail "the run failed"
  "$BIN" $(job x) $A --set train.steps=150 --set run.resume=true >"$WORK/log2" 2>&1 ||
    fail "extending failed: $(tail -3 "$WORK/log2")"
  [ "$(field "$WORK/x" "d['status'], d['steps']")" = "completed 150" ] || fail "summary: $(field "$WORK/x" "d.get('status'), d.get('steps')")"
  python3 - "$WORK/x" 150 <<'PY' || fail "records of the extended run"
import json, sys
run, n = sys.argv[1], int(sys.argv[2])
recs = [json.loads(l) for l in open(f"{run}/steps.jsonl")]
steps = [r["step"] for r in recs]
assert steps == list(range(1, n + 1)), f"steps {steps[:3]}...{steps[-3:]} ({len(steps)})"
lr = {r["step"]: r["lr"] for r in recs}
# linear_anneal over the whole run: the lr of the continuation follows the new total.
assert lr[101] > lr[100] and lr[150] < lr[101], (lr[100], lr[101], lr[150])
print(f"    steps 1..{n} once each; lr {lr[100]:.4g} at step 100 (old end), {lr[101]:.4g} at 101, {lr[150]:.4g} at {n}")
PY
  [ "$(launch "$WORK/x" "l['changed']")" = "['train.steps: 100 -> 150']" ] || fail "run.json does not say what changed: $(launch "$WORK/x" "l.get('changed')")"
  "$BIN" $(job x) $A --set train.steps=200 --set optim.lr=0.1 --set run.resume=true >"$WORK/log3" 2>&1
  RC=$?
  note "extend with another lr too: exit $RC: $(grep -o 'optim.lr: .*' "$WORK/log3" | head -1)"
  [ $RC = 78 ] || fail "exit $RC, expected 78"
  grep -q "optim.lr: 0.01 in the run, 0.1 now" "$WORK/log3" || fail "the difference is not listed"
  mpirun -np 4 "$BIN" $(job xs) $A --set train.mode=sync --set train.steps=60 >"$WORK/log4" 2>&1 || fail "the sync run failed"
  mpirun -np 4 "$BIN" $(job xs) $A --set train.mode=sync --set train.steps=90 --set run.resume=true >"$WORK/log5" 2>&1 ||
    fail "extending the sync run failed: $(tail -3 "$WORK/log5")"
  [ "$(field "$WORK/xs" "d['status'], d['steps']")" = "completed 90" ] || fail "sync summary: $(field "$WORK/xs" "d.get('status'), d.get('steps')")"
  note "local 100 -> 150 and sync 60 -> 90 steps: completed"
  ;;
config_ranges)
  # Integers past what the code can hold are config errors (78) naming the
  # key; compute.threads above the CPUs is capped with a warning; an empty
  # config file is a usage error (64) naming it.
  for kv in train.batch=4294967297 model.mlp_hidden=4294967297; do
    "$BIN" train "$CFG" --quiet --set run.dir="$WORK" --set run.name=r --set model.name=mlp \
      --set train.steps=5 --set "$kv" >"$WORK/log" 2>&1
    RC=$?
    note "$kv: exit $RC: $(grep -o "${kv%%=*} = .*" "$WORK/log" | head -1)"
    [ $RC = 78 ] || fail "$kv: exit $RC, expected 78"
    [ ! -e "$WORK/r" ] || fail "$kv: a run directory was made"
  done
  "$BIN" train "$CFG" --quiet --set run.dir="$WORK" --set run.name=t --set model.name=mlp \
    --set train.steps=5 --set compute.threads=100000 >"$WORK/log" 2>&1
  RC=$?
  note "compute.threads=100000: exit $RC: $(grep -o 'compute.threads = 100000 is .*' "$WORK/log")"
  [ $RC = 0 ] || fail "exit $RC: $(tail -3 "$WORK/log")"
  grep -q "compute.threads = 100000 is more than" "$WORK/log" || fail "no warning about the cap"
  : >"$WORK/empty.toml"
  "$BIN" train "$WORK/empty.toml" --set run.dir="$WORK" >"$WORK/log" 2>&1
  RC=$?
  note "an empty config file: exit $RC"
  [ $RC = 64 ] || fail "exit $RC, expected 64"
  grep -q "$WORK/empty.toml: the config file is empty" "$WORK/log" || fail "the error does not name the file"
  ;;
finalize_wait)
  # A worker killed just before the end of an async run over TCP: the shard
  # declares it dead after the others were told to stop. They wait for the
  # shard's word before MPI_Finalize, which would wait for the dead rank
  # (15 s); the job ends about dead_after_s after the kill.
  # Not quiet: rank 0's progress lines say how far the run is.
  mpirun --enable-recovery --mca btl tcp,self -np 4 "$BIN" train "$CFG" --set run.dir="$WORK" --set run.name=fw \
    --set train.mode=async --set model.name=mlp --set train.batch=16 --set data.synthetic_train=2048 \
    --set stragglers.model=fixed --set stragglers.mean_ms=5 --set train.steps=1500 --set run.progress=lines \
    --set run.progress_every_steps=100 --set cluster.dead_after_s=3 >"$WORK/log" 2>&1 &
  P=$!
  wait_log "$WORK/log" "step 1300/1500"
  W=$(rank_pid fw 3) || fail "no rank 3"
  kill -KILL "$W"
  T0=$(now)
  wait $P
  RC=$?
  T=$(secs "$T0")
  note "mpirun exit $RC, $T s after kill -9 of rank 3 near the end; summary $(field "$WORK/fw" "d['status'], d['steps'], [w['rank'] for w in d['lost_workers']]")"
  [ "$(field "$WORK/fw" "d['status'], d['steps']")" = "completed 1500" ] || fail "the run did not complete"
  grep -q "did not return" "$WORK/log" && fail "MPI_Finalize waited: $(grep 'did not return' "$WORK/log" | head -1)"
  below "$T" 8 || fail "took $T s (dead_after_s is 3)"
  check_no_orphans
  ;;
dead_evaluator)
  # The evaluator killed: the run ends (69) without anyone waiting for the
  # final evaluation that will not come.
  mpirun --enable-recovery -np 5 "$BIN" $(job de) --set train.mode=sync --set model.name=mlp \
    --set cluster.evaluator=true --set eval.every_s=1 --set stragglers.model=fixed --set stragglers.mean_ms=5 \
    --set train.steps=100000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/de" 1
  sleep 1
  E=$(rank_pid de 1) || fail "no rank 1"
  kill -KILL "$E"
  T0=$(now)
  wait $P
  T=$(secs "$T0")
  note "mpirun done $T s after kill -9 of the evaluator; summary $(field "$WORK/de" "d['status'], d['exit_code'], d['final_eval']")"
  [ "$(field "$WORK/de" "d['exit_code']")" = 69 ] || fail "summary exit_code $(field "$WORK/de" "d.get('exit_code')")"
  grep -q "final evaluation did not arrive" "$WORK/log" && fail "rank 0 waited for the dead evaluator's evaluation"
  below "$T" 7 || fail "took $T s (dead_after_s 3; no wait for the evaluation)"
  check_no_orphans
  ;;
not_evaluated)
  # Stopped and failed runs say "not evaluated", never a 0.00 % accuracy.
  mpirun -np 5 "$BIN" $(job ne) --set train.mode=sync --set model.name=mlp --set cluster.evaluator=true \
    --set stragglers.model=fixed --set stragglers.mean_ms=5 --set train.steps=100000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/ne" 1
  kill -USR1 $P
  wait $P
  RC=$?
  "$BIN" report "$WORK/ne" >>"$WORK/log" 2>&1
  note "stopped run: exit $RC, test_acc $(field "$WORK/ne" "d['test_acc']"); $(grep -m1 'final test accuracy' "$WORK/log")"
  [ $RC = 75 ] || fail "exit $RC, expected 75"
  [ "$(field "$WORK/ne" "d['test_acc'], d['test_acc_ema']")" = "None None" ] || fail "summary holds an accuracy"
  grep -q "accuracy.*0\.00%" "$WORK/log" && fail "a 0.00 % accuracy is printed: $(grep 'accuracy.*0\.00%' "$WORK/log")"
  [ "$(grep -c 'final test accuracy: not evaluated' "$WORK/log")" = 2 ] || fail "the run and its report do not say 'not evaluated'"
  ;;
lost_workers_shard)
  # The second parameter server killed: the run ends (69) and lost_workers
  # lists no worker (they ended because the shard did, they were not lost).
  mpirun --enable-recovery -np 5 "$BIN" $(job ls) --set train.mode=sync --set train.backups=1 --set cluster.ps=2 \
    --set model.name=mlp --set stragglers.model=fixed --set stragglers.mean_ms=5 --set train.steps=100000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/ls" 1
  sleep 1
  S1=$(rank_pid ls 1) || fail "no rank 1"
  kill -KILL "$S1"
  T0=$(now)
  wait $P
  note "mpirun done $(secs "$T0") s after kill -9 of shard 1; summary $(field "$WORK/ls" "d['exit_code'], d['lost_workers']")"
  [ "$(field "$WORK/ls" "d['exit_code']")" = 69 ] || fail "summary exit_code $(field "$WORK/ls" "d.get('exit_code')")"
  [ "$(field "$WORK/ls" "len(d['lost_workers'])")" = 0 ] || fail "lost_workers lists live workers: $(field "$WORK/ls" "d['lost_workers']")"
  check_no_orphans
  ;;
resume_ranks)
  # A resume with fewer ranks than the run: one message, saying how to
  # resume and how to start anew under another name.
  mpirun -np 5 "$BIN" $(job rr) --set train.mode=sync --set model.name=mlp --set train.steps=30 >"$WORK/log" 2>&1 || fail "the run failed"
  mpirun -np 4 "$BIN" $(job rr) --set train.mode=sync --set model.name=mlp --set train.steps=30 --set run.resume=true >"$WORK/log2" 2>&1
  RC=$?
  note "resume with 4 of 5 ranks: mpirun exit $RC: $(grep -m1 -o 'cannot resume.*' "$WORK/log2" | cut -c1-150)"
  [ "$(grep -c 'syncopt: error' "$WORK/log2")" = 1 ] || fail "not one message: $(grep -c 'syncopt: error' "$WORK/log2")"
  grep -q "mpirun -np 5" "$WORK/log2" && grep -q "run.name=rr-np4" "$WORK/log2" || fail "the message does not say what to do"
  grep -q "start a fresh run" "$WORK/log2" && fail "advises a fresh run of the same name"
  [ "$(launch "$WORK/rr" "l['exit_code']")" = 78 ] || fail "run.json does not record the refused launch"
  ;;
clean_stop)
  # A stop as a user sees it (issue 28): scripts/run.sh (mpirun
  # --enable-recovery) stopped by SIGTERM, and a plain mpirun stopped by
  # SIGUSR1, each end with the report and no PMIX ERROR line, and the resume
  # command each prints, run as printed, completes the run.
  A="--set train.mode=sync --set train.backups=1 --set train.steps=300"
  resume_as_printed() {  # resume_as_printed LOG DIR: runs LOG's "continue with" line
    local line
    line=$(sed -n 's/^stopped (.*) with a checkpoint: continue with //p' "$1")
    [ -n "$line" ] || fail "no resume command in $(basename "$1"): $(tail -3 "$1")"
    note "printed: $line"
    eval "timeout -k 5 120 $line" >"$1.resume" 2>&1 </dev/null
    [ "$(field "$2" "d['status'], d['steps']")" = "completed 300" ] ||
      fail "the printed command did not complete the run: $(tail -3 "$1.resume")"
    ! grep -q "PMIX ERROR" "$1.resume" || fail "PMIX ERROR lines after the resume"
  }
  (cd "$SRC" && SYNCOPT_BIN="$BIN" SYNCOPT_NP=4 exec scripts/run.sh $(job rs | cut -d' ' -f2-) $A) \
    >"$WORK/runsh.log" 2>&1 </dev/null &
  P=$!
  wait_steps "$WORK/rs" 20
  kill -TERM $P
  wait $P
  RC=$?
  note "run.sh exit $RC after SIGTERM; the end of its output:"
  tail -4 "$WORK/runsh.log" | sed 's/^/    /'
  [ $RC = 75 ] || fail "run.sh exit $RC, expected 75"
  ! grep -q "PMIX ERROR" "$WORK/runsh.log" || fail "$(grep -c "PMIX ERROR" "$WORK/runsh.log") PMIX ERROR lines after a stop under run.sh"
  grep -q "continue with mpirun --enable-recovery .*-np 4 " "$WORK/runsh.log" ||
    fail "the resume command does not name run.sh's mpirun line"
  resume_as_printed "$WORK/runsh.log" "$WORK/rs"
  mpirun -np 4 "$BIN" $(job mp) $A >"$WORK/mpirun.log" 2>&1 &
  P=$!
  wait_steps "$WORK/mp" 20
  kill -USR1 $P
  wait $P
  RC=$?
  [ $RC = 75 ] || fail "mpirun exit $RC, expected 75"
  ! grep -q "PMIX ERROR" "$WORK/mpirun.log" || fail "PMIX ERROR lines after a stop under mpirun"
  grep -q "continue with mpirun -np 4 $BIN train $WORK/mp/config.toml --set run.resume=true" "$WORK/mpirun.log" ||
    fail "the resume command is not mpirun's line: $(grep 'continue with' "$WORK/mpirun.log")"
  resume_as_printed "$WORK/mpirun.log" "$WORK/mp"
  check_no_orphans
  ;;
*)
  echo "unknown scenario $SCENARIO" >&2
  exit 2
  ;;
esac
note "ok"
