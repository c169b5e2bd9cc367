#!/usr/bin/env bash
# Many hosts, for real: a cluster of network namespaces on this machine
# (tests/cluster/cluster.sh: node1..node3, veth links to a bridge of the
# test's own), Open MPI across them over TCP with a host file, launched as
# the README says (scripts/run.sh with SYNCOPT_HOSTFILE), and the network
# faults users meet: a link taken down and brought back. Each scenario is a
# CTest (label cluster), root only (exit 77, skipped, otherwise); it prints
# what it measured (exit codes, seconds from the fault) and exits non-zero
# on the first broken promise. Every namespace, link and process is removed
# on every exit path, a failure or the test's own deadline included, and
# checked.
#
#   tests/cluster/test_cluster.sh SYNCOPT_BINARY SCENARIO
#
# launch            the README's host-file command on 3 hosts completes;
#                   run.json and --dry-run name the hosts and ranks
# worker_host_b2    node2's link down at step 60, b = 2: absorbed, completes
# worker_host_b0    the same with b = 0: 69 with a checkpoint, then resumed
# ps_host           node1 (the parameter server's and mpirun's) cut off: 69,
#                   recorded once, saying node1 was the one cut off
# short_cut         node2's link down for 2 s (< dead_after_s): time only
# slurm             slurmd on every host: SYNCOPT_PS_NODE=own sbatch --nodes=3
#                   of train.sbatch, the parameter server alone on node1
set -uo pipefail
BIN=$(realpath "$1")
SCENARIO=$2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
SKIP=77
# The test ends itself before CTest's TIMEOUT would kill it without a trap.
BUDGET_S=${SYNCOPT_CLUSTER_BUDGET_S:-150}
DEAD_S=5

say() { echo "[$SCENARIO] $*"; }
if [ "$(id -u)" -ne 0 ]; then
  say "SKIP: network namespaces need root (CI and containers run as root)"
  exit "$SKIP"
fi
for tool in ip unshare tc; do
  command -v "$tool" >/dev/null || { say "SKIP: no $tool (scripts/setup.sh --tests installs iproute2 and util-linux)"; exit "$SKIP"; }
done
if ! ip netns add "so$$probe" 2>/dev/null; then
  say "SKIP: cannot create a network namespace here (ip netns add)"
  exit "$SKIP"
fi
ip netns del "so$$probe"

# shellcheck source=tests/cluster/cluster.sh
source "$SRC/tests/cluster/cluster.sh"
# Not under /tmp: each slurmd has a /tmp of its own (scenario slurm).
WORK=$(mktemp -d /var/tmp/syncopt-cluster-XXXXXX)
FAILED=0
# shellcheck disable=SC2317  # run by the traps
finish() {
  local rc=$?
  trap - EXIT TERM INT
  if [ -n "${WATCHDOG:-}" ]; then pkill -P "$WATCHDOG" 2>/dev/null; kill "$WATCHDOG" 2>/dev/null; fi
  slurm_down
  if ! cluster_down; then
    echo "FAIL [$SCENARIO]: the cluster was not removed completely" >&2
    FAILED=1
  fi
  for _ in $(seq 50); do pgrep -f "$WORK" >/dev/null || break; sleep 0.1; done
  if pgrep -f "$WORK" >/dev/null; then
    pgrep -af "$WORK" >&2
    echo "FAIL [$SCENARIO]: processes of the run are left" >&2
    FAILED=1
  else
    say "nothing left behind: no namespace, link or process"
  fi
  rm -rf "$WORK"
  ((FAILED)) && rc=1
  exit "$rc"
}
trap finish EXIT
trap 'echo "FAIL [$SCENARIO]: the test ran past its ${BUDGET_S}s" >&2; FAILED=1; exit 1' TERM INT
(sleep "$BUDGET_S" && kill -TERM $$) 2>/dev/null &
WATCHDOG=$!

fail() {
  echo "FAIL [$SCENARIO]: $*" >&2
  for log in "$WORK"/*.log "$WORK"/slurm/log/*.log; do
    [ -f "$log" ] && { echo "--- $(basename "$log") (tail)" >&2; tail -25 "$log" >&2; }
  done
  FAILED=1
  exit 1
}
now() { date +%s.%N; }
since() { python3 -c "print(f'{$(now) - $1:.1f}')"; }
below() { python3 -c "import sys; sys.exit(0 if $1 < $2 else 1)"; }
# summary.json fields, and the last launch of run.json (python on d / l).
field() { python3 -c "import json; d=json.load(open('$1/summary.json')); print($2)" 2>/dev/null; }
launch() { python3 -c "import json; l=json.load(open('$1/run.json'))['launches'][-1]; print($2)" 2>/dev/null; }
# The longest time between two consecutive updates (steps.jsonl), seconds.
stall() {
  python3 -c "
import json
t = [json.loads(l)['t_apply'] for l in open('$1/steps.jsonl') if json.loads(l).get('shard', 0) == 0]
print(f'{max(b - a for a, b in zip(t, t[1:])):.1f}')"
}
# Seconds from $2 (date +%s.%N) to the last change of summary.json in $1.
written_after() { python3 -c "import os; print(f'{os.path.getmtime(\"$1/summary.json\") - $2:.1f}')"; }
# Seconds between the update applied when the fault came (the $2-th record)
# and the one at step $3 (shard 0's records of $1).
between_steps() {
  python3 -c "
import json
t = {}
for l in open('$1/steps.jsonl'):
    r = json.loads(l)
    if r.get('shard', 0) == 0: t[r['step']] = r['t_apply']
s = sorted(t)
print(f'{t[$3] - t[s[$2 - 1]]:.1f}')"
}
wait_steps() {
  for _ in $(seq 1200); do
    [ -f "$1/steps.jsonl" ] && [ "$(wc -l <"$1/steps.jsonl")" -ge "$2" ] && return 0
    sleep 0.05
  done
  fail "the run in $1 never reached $2 updates"
}
# Waits up to $2 s until no process is left on node $1; prints the seconds.
wait_host_empty() {
  local t0
  t0=$(now)
  for _ in $(seq $(($2 * 10))); do
    [ -z "$(cluster_pids "$1")" ] && { since "$t0"; return 0; }
    sleep 0.1
  done
  ps -o pid,args -p "$(cluster_pids "$1" | tr '\n' ',' | sed 's/,$//')" >&2
  return 1
}

cluster_up 3 || fail "the cluster did not come up"
# The README's host file: the parameter server and the evaluator on node1.
printf 'node1 slots=2\nnode2 slots=2\nnode3 slots=2\n' >"$WORK/hosts"
# A small CNN job; the caller adds length, b and the name.
job() {
  echo "$SRC/configs/fmnist-sync.toml --quiet --set run.dir=$WORK --set run.name=$1" \
    "--set data.name=synthetic --set data.synthetic_train=4096 --set data.synthetic_test=256" \
    "--set train.batch=16 --set eval.every_s=0 --set optim.schedule=constant" \
    "--set cluster.dead_after_s=$DEAD_S --set run.checkpoint_every_steps=50"
}
# The same job's options for train.sbatch, which names the run itself.
job_args() {
  echo "$SRC/configs/fmnist-sync.toml --quiet --set data.name=synthetic --set data.synthetic_train=4096" \
    "--set data.synthetic_test=256 --set train.batch=16 --set eval.every_s=0 --set cluster.dead_after_s=$DEAD_S"
}
# A SLURM cluster on the three hosts (scenario slurm): Debian's slurm-wlm
# 22.05 as scripts/slurm/local-cluster.sh configures it, one slurmd per
# host. slurm_down (from finish) stops it.
SLURM_DIR=$WORK/slurm
SLURM_CONF=$SLURM_DIR/slurm.conf
slurm_up() {
  local i
  for p in slurmctld slurmd munged sbatch; do
    command -v "$p" >/dev/null || { say "SKIP: no $p (scripts/setup.sh --tests installs slurm-wlm and munge)"; exit "$SKIP"; }
  done
  mkdir -p "$SLURM_DIR"/{ctld,log,spool,munge}
  chmod 0700 "$SLURM_DIR/munge"
  mungekey --create --keyfile="$SLURM_DIR/munge/munge.key" && chmod 0400 "$SLURM_DIR/munge/munge.key"
  munged --force --socket="$SLURM_DIR/munge/sock" --key-file="$SLURM_DIR/munge/munge.key" \
    --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
    --seed-file="$SLURM_DIR/munge/seed" || return 1
  {
    echo "ClusterName=syncopt-ns"
    echo "SlurmctldHost=node1($(cluster_addr 1))"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$SLURM_DIR/munge/sock,cred_expire=5"
    echo "StateSaveLocation=$SLURM_DIR/ctld"
    echo "SlurmdSpoolDir=$SLURM_DIR/spool/slurmd-%n"
    echo "SlurmctldPidFile=$SLURM_DIR/slurmctld.pid"
    echo "SlurmdPidFile=$SLURM_DIR/slurmd-%n.pid"
    echo "SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$SLURM_DIR/log/slurmd-%n.log"
    echo "MpiDefault=none"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_CPU"
    echo "SchedulerType=sched/builtin"
    echo "SchedulerParameters=batch_sched_delay=0,sched_interval=2"
    echo "SlurmdParameters=config_overrides"
    echo "ReturnToService=2"
    echo "KillWait=5"
    echo "MinJobAge=1800"
    echo "AccountingStorageType=accounting_storage/none"
    echo "JobAcctGatherType=jobacct_gather/none"
    for i in $(seq "$CLUSTER_HOSTS"); do
      echo "NodeName=node$i NodeAddr=$(cluster_addr "$i") CPUs=2 RealMemory=1000 State=UNKNOWN"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$SLURM_CONF"
  cluster_exec 1 slurmctld -f "$SLURM_CONF" || return 1
  # Each slurmd with a /tmp of its own, as on separate machines: the pmix
  # plugin of every node creates /tmp/spmix_appdir_<uid>_<job>.<step>.
  for i in $(seq "$CLUSTER_HOSTS"); do
    mkdir -p "$SLURM_DIR/tmp-node$i" "$SLURM_DIR/spool/slurmd-node$i"
    # shellcheck disable=SC2016  # expanded by the host's shell
    cluster_exec "$i" sh -c 'mount --bind "$0" /tmp && exec slurmd -f "$1"' "$SLURM_DIR/tmp-node$i" "$SLURM_CONF" || return 1
  done
  for _ in $(seq 150); do
    [ "$(cluster_exec 1 env SLURM_CONF="$SLURM_CONF" sinfo -h -o %t 2>/dev/null)" = idle ] && return 0
    sleep 0.2
  done
  tail -5 "$SLURM_DIR"/log/*.log >&2
  return 1
}
# shellcheck disable=SC2317  # run by finish
slurm_down() {
  local f
  [ -d "$SLURM_DIR" ] || return 0
  cluster_exec 1 env SLURM_CONF="$SLURM_CONF" scancel --full --quiet --partition=debug 2>/dev/null
  # The daemons of the hosts go with the namespaces (cluster_down); munged
  # runs on this machine.
  f=$SLURM_DIR/munge/munged.pid
  [ -s "$f" ] && kill "$(cat "$f")" 2>/dev/null
}

# scripts/run.sh on node1, as a user on the first host of the host file.
run_sh() {
  cluster_exec 1 env SYNCOPT_BIN="$BIN" SYNCOPT_HOSTFILE="$WORK/hosts" CLUSTER_PREFIX="$CLUSTER_PREFIX" \
    SYNCOPT_MPIRUN_ARGS="${CLUSTER_MPI[*]}" "$SRC/scripts/run.sh" "$@"
}

case "$SCENARIO" in
launch)
  # shellcheck disable=SC2046  # job's words
  run_sh $(job l) --dry-run >"$WORK/dry.log" 2>&1 || fail "--dry-run failed"
  grep -A3 '^# hosts: 3' "$WORK/dry.log" || fail "--dry-run does not list the three hosts"
  grep -qx 'node1: ranks 0 ps0, 1 eval' "$WORK/dry.log" || fail "--dry-run: not the PS and evaluator on node1"
  T0=$(now)
  # shellcheck disable=SC2046
  run_sh $(job l) --set train.steps=60 >"$WORK/run.log" 2>&1
  RC=$?
  say "run.sh exit $RC in $(since "$T0")s"
  [ "$RC" = 0 ] || fail "run.sh exited $RC"
  [ "$(field "$WORK/l" "d['status'], d['steps']")" = "completed 60" ] || fail "summary: $(field "$WORK/l" "d")"
  hosts=$(launch "$WORK/l" "' '.join(h['host'] + ':' + ','.join(map(str, h['ranks'])) for h in l['hosts'])")
  say "run.json hosts: $hosts"
  [ "$hosts" = "node1:0,1 node2:2,3 node3:4,5" ] || fail "run.json hosts: $hosts"
  [ "$(launch "$WORK/l" "' '.join(r['host'] for r in l['ranks'])")" = "node1 node1 node2 node2 node3 node3" ] ||
    fail "run.json ranks: $(launch "$WORK/l" "l['ranks']")"
  ;;
worker_host_b2 | short_cut)
  b=2
  [ "$SCENARIO" = short_cut ] && b=1
  # shellcheck disable=SC2046
  run_sh $(job w) --set train.backups=$b --set train.steps=250 >"$WORK/run.log" 2>&1 &
  P=$!
  wait_steps "$WORK/w" 60
  cluster_link 2 down
  T0=$(now)
  F=$(wc -l <"$WORK/w/steps.jsonl")
  if [ "$SCENARIO" = short_cut ]; then
    sleep 2
    cluster_link 2 up
    say "node2's link down for $(since "$T0")s (dead_after_s $DEAD_S)"
  fi
  wait $P
  RC=$?
  T=$(since "$T0")
  say "run.sh exit $RC, ${T}s after node2's link went down; longest step $(stall "$WORK/w")s"
  [ "$RC" = 0 ] || fail "run.sh exited $RC"
  [ "$(field "$WORK/w" "d['status'], d['steps']")" = "completed 250" ] || fail "summary: $(field "$WORK/w" "d")"
  lost=$(field "$WORK/w" "' '.join(sorted(str(l['rank']) + '@' + l['host'] for l in d['lost_workers']))")
  say "lost_workers: $lost"
  if [ "$SCENARIO" = short_cut ]; then
    [ -z "$lost" ] || fail "a cut shorter than dead_after_s lost workers: $lost"
    below "$(stall "$WORK/w")" "$DEAD_S" || fail "a step took $(stall "$WORK/w")s"
  else
    [ "$lost" = "2@node2 3@node2" ] || fail "lost_workers: $lost"
    for w in 0 1; do
      at=$(field "$WORK/w" "d['lost_workers'][$w]['step']")
      X=$(between_steps "$WORK/w" "$F" "$at")
      say "worker at rank $((w + 2)) excluded at step $at, ${X}s after the cut (dead_after_s $DEAD_S)"
      below "$X" "$DEAD_S + 5" || fail "excluded ${X}s after the cut"
    done
    say "processes left on node2 while its link is down: $(cluster_pids 2 | wc -l)"
    say "partition: $(field "$WORK/w" "d['partition']['detail']")"
    [ "$(field "$WORK/w" "d['partition']['cut_off']")" = "['node2']" ] || fail "summary.json partition: $(field "$WORK/w" "d.get('partition')")"
    below "$(stall "$WORK/w")" "$DEAD_S + 5" || fail "the run stalled $(stall "$WORK/w")s (dead_after_s $DEAD_S)"
    cluster_link 2 up
    S=$(wait_host_empty 2 30) || fail "node2 keeps processes 30 s after its link came back"
    say "node2 empty ${S}s after its link came back"
  fi
  ;;
worker_host_b0)
  # shellcheck disable=SC2046
  run_sh $(job z) --set train.backups=0 --set train.steps=250 >"$WORK/run.log" 2>&1 &
  P=$!
  wait_steps "$WORK/z" 60
  cluster_link 2 down
  T0=$(now)
  wait $P
  RC=$?
  T=$(since "$T0")
  say "run.sh exit $RC, ${T}s after node2's link went down (bound: dead_after_s $DEAD_S + 15)"
  say "summary.json written $(written_after "$WORK/z" "$T0")s after the cut"
  [ "$RC" = 69 ] || fail "run.sh exited $RC, not 69"
  below "$T" "$DEAD_S + 15" || fail "took ${T}s"
  [ "$(field "$WORK/z" "d['exit_code']")" = 69 ] || fail "summary: $(field "$WORK/z" "d")"
  say "reason: $(field "$WORK/z" "d['reason']")"
  "$BIN" checkpoints "$WORK/z" >"$WORK/ck.log" 2>&1 || fail "the latest checkpoint does not load"
  say "$(grep '^latest' "$WORK/ck.log")"
  say "processes left on node2 while its link is down: $(cluster_pids 2 | wc -l)"
  cluster_link 2 up
  S=$(wait_host_empty 2 30) || fail "node2 keeps processes 30 s after its link came back"
  say "node2 empty ${S}s after its link came back"
  # shellcheck disable=SC2046
  run_sh $(job z) --set train.backups=0 --set train.steps=250 --set run.resume=true >"$WORK/resume.log" 2>&1
  RC=$?
  [ "$RC" = 0 ] || fail "the resume exited $RC"
  [ "$(field "$WORK/z" "d['status'], d['steps']")" = "completed 250" ] || fail "resumed summary: $(field "$WORK/z" "d")"
  say "resumed to step 250: completed"
  ;;
ps_host)
  # shellcheck disable=SC2046
  run_sh $(job p) --set train.backups=1 --set train.steps=250 >"$WORK/run.log" 2>&1 &
  P=$!
  wait_steps "$WORK/p" 60
  cluster_link 1 down
  T0=$(now)
  wait $P
  RC=$?
  T=$(since "$T0")
  say "run.sh exit $RC, ${T}s after node1's link went down (bound: dead_after_s $DEAD_S + 15)"
  say "summary.json written $(written_after "$WORK/p" "$T0")s after the cut"
  [ "$RC" = 69 ] || fail "run.sh exited $RC, not 69"
  below "$T" "$DEAD_S + 15" || fail "took ${T}s"
  [ "$(field "$WORK/p" "d['exit_code'], d['reported_by']['rank']")" = "69 0" ] || fail "summary: $(field "$WORK/p" "d")"
  [ "$(field "$WORK/p" "'ended_by' in d")" = False ] || fail "a rank other than 0 wrote summary.json: $(field "$WORK/p" "d['ended_by']")"
  [ "$(field "$WORK/p" "d['partition']['cut_off']")" = "['node1']" ] || fail "summary.json partition: $(field "$WORK/p" "d.get('partition')")"
  say "reason: $(field "$WORK/p" "d['reason']")"
  if grep -q "this rank recorded the outcome" "$WORK/run.log"; then fail "a worker recorded the outcome too"; fi
  [ "$(launch "$WORK/p" "l['exit_code']")" = 69 ] || fail "run.json: $(launch "$WORK/p" "l")"
  say "processes left on node2, node3 while node1 is cut off: $(cluster_pids 2 | wc -l), $(cluster_pids 3 | wc -l)"
  cluster_link 1 up
  for i in 2 3; do
    S=$(wait_host_empty $i 30) || fail "node$i keeps processes 30 s after node1's link came back"
    say "node$i empty ${S}s after node1's link came back"
  done
  ;;
slurm)
  # Debian's slurmd once per host (its own NodeName, NodeAddr, spool, pid
  # and log), slurmctld on node1, munge on this machine (a socket file all
  # hosts see), then the README's SYNCOPT_PS_NODE=own line, scaled down.
  # Every slurmd gets a /tmp of its own (slurm_up), so the nodes cannot see
  # a build or a checkout that lies under /tmp.
  for path in "$BIN" "$SRC"; do
    case "$path/" in
    /tmp/*) fail "$path lies under /tmp, which every SLURM node of this test replaces with a /tmp of its own (the pmix plugin's files would collide): build and test from a checkout outside /tmp" ;;
    esac
  done
  slurm_up || fail "the SLURM cluster did not come up"
  export OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=$CLUSTER_IF OMPI_MCA_oob_tcp_if_include=$CLUSTER_IF
  T0=$(now)
  # shellcheck disable=SC2046
  JOB=$(cluster_exec 1 env SLURM_CONF="$SLURM_CONF" SYNCOPT_PS_NODE=own SYNCOPT_BIN="$BIN" \
    sbatch --parsable -D "$WORK" -o "$WORK/slurm-%j.log" --nodes=3 --ntasks-per-node=2 --overcommit \
    "$SRC/scripts/slurm/train.sbatch" $(job_args) --set train.steps=60) || fail "sbatch failed"
  say "job $JOB submitted"
  for _ in $(seq 900); do
    state=$(cluster_exec 1 env SLURM_CONF="$SLURM_CONF" scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*JobState=\([A-Z]*\).*/\1/p')
    case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
    sleep 0.2
  done
  exit_code=$(cluster_exec 1 env SLURM_CONF="$SLURM_CONF" scontrol show job "$JOB" | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p')
  say "job $JOB: $state $exit_code in $(since "$T0")s"
  cp "$WORK/slurm-$JOB.log" "$WORK/job.log" 2>/dev/null
  [ "$state" = COMPLETED ] || fail "job $JOB: $state $exit_code"
  run=$(ls -d "$WORK"/runs/fmnist-sync-"$JOB" 2>/dev/null) || fail "no run directory fmnist-sync-$JOB"
  [ "$(field "$run" "d['status'], d['steps']")" = "completed 60" ] || fail "summary: $(field "$run" "d")"
  hosts=$(launch "$run" "' '.join(h['host'] + ':' + ','.join(map(str, h['ranks'])) for h in l['hosts'])")
  say "run.json hosts: $hosts; launcher $(launch "$run" "l['launcher']")"
  [ "$hosts" = "node1:0,1 node2:2,3 node3:4,5" ] || fail "not the PS and evaluator alone on node1: $hosts"
  ;;
*)
  fail "unknown scenario $SCENARIO"
  ;;
esac
say "PASS"
