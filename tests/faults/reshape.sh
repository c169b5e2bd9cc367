#!/usr/bin/env bash
# Resuming on another shape (issue "Keep going", point 2; docs/design.md
# §10): a stopped run resumes on other shards, workers or ranks. CTest
# stops it at about step $SYNCOPT_RESHAPE_STOP (default 60, to keep the
# suite short); the issue's figure is SYNCOPT_RESHAPE_STOP=300. The parameters at the resume point are the checkpoint's (each
# reshaped launch, told to train to the checkpoint's step, evaluates the
# same θ and θ̄ as the run's own shape: the same test loss, bit for bit);
# the run then goes on to completion with every step once in steps.jsonl.
# Prints how long each resume took (launch to exit).
#
#   tests/faults/reshape.sh SYNCOPT_BINARY ps|allreduce
set -uo pipefail
BIN=$(realpath "$1")
SCENARIO=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
CFG=$SRC/configs/smoke.toml
WORK=$(mktemp -d /tmp/syncopt-reshape-XXXXXX)
STOP=${SYNCOPT_RESHAPE_STOP:-60}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cleanup() {
  pkill -KILL -f "run.dir=$WORK" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

fail() {
  echo "FAIL [$SCENARIO]: $*" >&2
  for log in "$WORK"/log*; do
    [ -f "$log" ] && { echo "--- $(basename "$log") (tail)" >&2; tail -30 "$log" >&2; }
  done
  exit 1
}
note() { echo "[$SCENARIO] $*"; }
now() { date +%s.%N; }
secs() { python3 -c "print(f'{$(now) - $1:.1f}')"; }
field() { python3 -c "import json,sys; d=json.load(open('$1/summary.json')); print($2)" 2>/dev/null; }
# Rank 0's reading and cutting of the checkpoint, as run.json records it.
cut_s() { python3 -c "import json; print(f\"{json.load(open('$1/run.json'))['launches'][-1]['reshape']['seconds']:.3f}\")" 2>/dev/null; }

job() {
  echo "train $CFG --quiet --set run.dir=$WORK --set run.name=$1 --set model.name=mlp" \
       "--set train.batch=16 --set data.synthetic_train=2048 --set cluster.dead_after_s=10" \
       "--set run.checkpoint_every_s=3600"
}

wait_steps() {
  local dir=$1 k=$2
  for _ in $(seq 1200); do
    [ -f "$dir/steps.jsonl" ] && [ "$(wc -l <"$dir/steps.jsonl")" -ge "$k" ] && return 0
    sleep 0.05
  done
  fail "the run in $dir never reached $k updates"
}

# Every (shard, step) once; shard 0 has 1..TOTAL; the other shards
# FROM..TOTAL (a shard added by the reshape records from there on).
steps_once() {
  python3 - "$1/steps.jsonl" "$2" "$3" <<'PY'
import collections, json, sys
path, total, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
seen = collections.Counter()
for line in open(path):
    if line.strip():
        r = json.loads(line)
        seen[(r["shard"], r["step"])] += 1
twice = [k for k, n in seen.items() if n > 1]
if twice:
    sys.exit(f"recorded twice: {sorted(twice)[:5]}")
for s in sorted({k[0] for k in seen}):
    steps = sorted(k[1] for k in seen if k[0] == s)
    first = 1 if s == 0 else min(steps)
    if steps != list(range(first, total + 1)) or (s > 0 and first not in (1, start + 1)):
        sys.exit(f"shard {s}: steps {steps[:3]}..{steps[-3:]} ({len(steps)}), expected {first}..{total}")
print(f"{sum(seen.values())} records, every (shard, step) once")
PY
}

case "$SCENARIO" in
ps)
  MODE="--set train.mode=sync --set train.backups=1"
  # 1 shard + 5 workers, stopped by SIGUSR1 to mpirun at about step STOP.
  mpirun -np 6 "$BIN" $(job r) $MODE --set cluster.ps=1 --set train.steps=3000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/r" "$STOP"
  kill -USR1 $P
  wait $P
  RC=$(field "$WORK/r" "d['exit_code']")
  [ "$RC" = 75 ] || fail "the stop: exit $RC"
  C=$(cat "$WORK/r/checkpoints/latest")
  note "1 shard + 5 workers stopped at step $C"
  "$BIN" checkpoints "$WORK/r" >"$WORK/log-ck" 2>&1 || fail "syncopt checkpoints: exit $?"
  grep -q "or on another shape: S' shards" "$WORK/log-ck" || fail "syncopt checkpoints does not say it can resume on another shape: $(cat "$WORK/log-ck")"
  # Without run.reshape another shape is refused (78), and that refusal
  # changes nothing about what the run resumes with.
  mpirun -np 5 "$BIN" $(job r) $MODE --set cluster.ps=2 --set train.steps=$C --set run.resume=true \
    >"$WORK/log-refused" 2>&1
  RC=$(python3 -c "import json; print(json.load(open('$WORK/r/run.json'))['launches'][-1]['exit_code'])")
  [ "$RC" = 78 ] || fail "2 shards + 3 workers without run.reshape: exit $RC, expected 78"
  grep -q "6 ranks: 1 shard, 5 workers" "$WORK/log-refused" && grep -q "run.reshape=true" "$WORK/log-refused" ||
    fail "the refusal names neither the checkpoint's layout nor run.reshape: $(grep -m1 'cannot resume' "$WORK/log-refused")"
  "$BIN" checkpoints "$WORK/r" 2>&1 | grep -q "it resumes with 6 rank(s)" ||
    fail "after the refusal, syncopt checkpoints: $("$BIN" checkpoints "$WORK/r" 2>&1 | grep resumes)"
  # Two copies resumed to the checkpoint's step: 2 shards + 3 workers and
  # 1 shard + 6. The stopped run wrote its θ and θ̄ at step C (params.f32,
  # params_ema.f32); each copy, its own removed, writes them anew from the
  # parts it cut: byte for byte the same.
  for shape in a:2:5 b:1:7; do
    IFS=: read -r name ps np <<<"$shape"
    cp -a "$WORK/r" "$WORK/$name"
    rm -f "$WORK/$name/params.f32" "$WORK/$name/params_ema.f32"
    T0=$(now)
    mpirun -np $np "$BIN" $(job $name) $MODE --set cluster.ps=$ps --set train.steps=$C \
      --set run.resume=true --set run.reshape=true >"$WORK/log-$name" 2>&1
    T=$(secs "$T0")
    [ "$(field "$WORK/$name" "d['status'], d['steps']")" = "completed $C" ] ||
      fail "$name ($ps shards, -np $np): $(field "$WORK/$name" "d['status'], d['steps'], d.get('error')")"
    for f in params.f32 params_ema.f32; do
      cmp "$WORK/r/$f" "$WORK/$name/$f" || fail "$name ($ps shards, -np $np): $f differs from the checkpoint's"
    done
    note "$ps shard(s), -np $np resumed at step $C in $T s (launch to exit; read and cut in $(cut_s "$WORK/$name") s); θ and θ̄ bitwise the checkpoint's"
  done
  # On to step C + 40 on the new shapes: completed, every step once.
  END=$((C + 40))
  for shape in a:2:5 b:1:7; do
    IFS=: read -r name ps np <<<"$shape"
    mpirun -np $np "$BIN" $(job $name) $MODE --set cluster.ps=$ps --set train.steps=$END \
      --set run.resume=true --set run.reshape=true >"$WORK/log-$name-on" 2>&1
    [ "$(field "$WORK/$name" "d['status'], d['steps'], d['N']")" = "completed $END $((np - ps - 1))" ] ||
      fail "$name on to $END: $(field "$WORK/$name" "d")"
    steps_once "$WORK/$name" $END $C || fail "$name: steps.jsonl"
  done
  note "2 shards + 3 workers and 1 shard + 6 workers completed $END steps, each once"
  ;;
allreduce)
  MODE="--set train.mode=allreduce"
  mpirun -np 4 "$BIN" $(job r) $MODE --set train.steps=3000 >"$WORK/log" 2>&1 &
  P=$!
  wait_steps "$WORK/r" "$STOP"
  kill -USR1 $P
  wait $P
  RC=$(field "$WORK/r" "d['exit_code']")
  [ "$RC" = 75 ] || fail "the stop: exit $RC"
  C=$(cat "$WORK/r/checkpoints/latest")
  note "4 ranks stopped at step $C"
  for np in 3 6; do
    cp -a "$WORK/r" "$WORK/n$np"
    rm -f "$WORK/n$np/params.f32" "$WORK/n$np/params_ema.f32"
    T0=$(now)
    mpirun -np $np "$BIN" $(job n$np) $MODE --set train.steps=$C --set run.resume=true \
      --set run.reshape=true >"$WORK/log-$np" 2>&1
    T=$(secs "$T0")
    [ "$(field "$WORK/n$np" "d['status'], d['steps']")" = "completed $C" ] ||
      fail "-np $np: $(field "$WORK/n$np" "d['status'], d['steps'], d.get('error')")"
    for f in params.f32 params_ema.f32; do
      cmp "$WORK/r/$f" "$WORK/n$np/$f" || fail "-np $np: $f differs from the checkpoint's"
    done
    python3 -c "
import json, sys
l = json.load(open('$WORK/n$np/run.json'))['launches'][-1]
r = l.get('reshape') or sys.exit('run.json: the launch records no reshape: ' + str(list(l)))
assert r['from']['world'] == 4 and r['to']['world'] == $np and r['step'] == $C, r
" || fail "-np $np: run.json's reshape"
    note "-np $np resumed at step $C in $T s (launch to exit; read and cut in $(cut_s "$WORK/n$np") s); the replica and θ̄ bitwise the checkpoint's"
  done
  END=$((C + 40))
  for np in 3 6; do
    mpirun -np $np "$BIN" $(job n$np) $MODE --set train.steps=$END --set run.resume=true \
      --set run.reshape=true >"$WORK/log-$np-on" 2>&1
    [ "$(field "$WORK/n$np" "d['status'], d['steps']")" = "completed $END" ] || fail "-np $np on to $END: $(field "$WORK/n$np" "d")"
    steps_once "$WORK/n$np" $END $C || fail "-np $np: steps.jsonl"
  done
  note "3 and 6 ranks completed $END steps, each once"
  ;;
*)
  echo "unknown scenario $SCENARIO" >&2
  exit 64
  ;;
esac
