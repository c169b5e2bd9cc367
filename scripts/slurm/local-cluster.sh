#!/usr/bin/env bash
# A single-node SLURM cluster on this host, for trying and testing the sbatch
# scripts: Debian's slurm-wlm 22.05 and munge, run as root daemons.
#
#   scripts/slurm/local-cluster.sh start    # install what is missing, start, wait for an idle node
#   eval "$(scripts/slurm/local-cluster.sh env)"   # SLURM_CONF for sbatch, srun, squeue, ...
#   scripts/slurm/local-cluster.sh status
#   scripts/slurm/local-cluster.sh stop     # cancel every job, stop the three daemons
#
# Everything lives under $SYNCOPT_SLURM_DIR (default /tmp/syncopt-slurm):
# etc/slurm.conf, its own munge key and socket, state, spool, logs, pid files.
# Nothing in /etc is written and no system service is touched (the munge key
# that Debian's package creates in /etc/munge is not used), so a site's own
# slurm or munge on the same host is left alone as long as the ports differ
# (SYNCOPT_SLURM_PORT, default 6817 for slurmctld and 6818 for slurmd).
# Daemons are found and stopped by their pid files only.
#
# Choices, deliberately like many real sites:
# - MpiDefault=none: a bare `srun` gives no PMI at all, so Open MPI ranks fail
#   ("OMPI was not built with SLURM's PMI support"); launchers must ask for
#   `srun --mpi=pmix` (scripts/slurm/train.sbatch does). Override with
#   SYNCOPT_SLURM_MPI_DEFAULT=pmix.
# - The node has the real CPU count and memory (`slurmd -C`); a job with more
#   ranks than CPUs needs `sbatch --overcommit` (-O), or set SYNCOPT_SLURM_CPUS
#   to declare more CPUs than there are (slurmd then runs with config_overrides).
# - ProctrackType=proctrack/linuxproc (the process tree, no cgroups needed:
#   this works in containers, gVisor included). SYNCOPT_SLURM_PROCTRACK=cgroup
#   selects proctrack/cgroup where the host's cgroups allow it (it works in
#   this project's gVisor container too, in the cgroup v1 freezer; stop
#   removes the empty /sys/fs/cgroup/*/slurm_<node> it leaves).
# - Job ids start at SYNCOPT_SLURM_FIRST_JOB_ID (default 1) in a fresh state
#   dir and go on from there across restarts; runs are named after job ids,
#   so a new state dir with old runs/ around may meet a name already taken.
# - Jobs start in about a second: sched/builtin, batch_sched_delay=0, a 2 s
#   main loop; cred_expire=5 so a requeued job may start again after 5 s
#   instead of 120; KillWait=5; completed jobs stay visible to
#   `scontrol show job` for 30 min (MinJobAge=1800) since there is no
#   accounting database (sacct does not work here; jobcomp/filetxt keeps one
#   line per finished job in $SYNCOPT_SLURM_DIR/log/jobcomp.txt).
set -euo pipefail

STATE=${SYNCOPT_SLURM_DIR:-/tmp/syncopt-slurm}
TIMEOUT_S=${SYNCOPT_SLURM_TIMEOUT_S:-60}
PORT=${SYNCOPT_SLURM_PORT:-6817}
MPI_DEFAULT=${SYNCOPT_SLURM_MPI_DEFAULT:-none}
PROCTRACK=${SYNCOPT_SLURM_PROCTRACK:-linuxproc}
NODE=$(hostname -s)
CONF=$STATE/etc/slurm.conf
MUNGE_SOCKET=$STATE/munge/munge.socket.2
PID_MUNGED=$STATE/munge/munged.pid
PID_CTLD=$STATE/run/slurmctld.pid
PID_SLURMD=$STATE/run/slurmd.pid

die() { echo "local-cluster: $*" >&2; exit 1; }
say() { echo "local-cluster: $*"; }

# Debian packages: the daemons and clients, munge, and libpmix-dev, whose
# unversioned pmix2/lib/libpmix.so is what slurm's mpi_pmix plugin dlopens
# (with only libpmix2 installed `srun --mpi=list` still lists pmix but every
# --mpi=pmix step fails).
install_missing() {
  local packages=(slurmctld slurmd slurm-client slurm-wlm-basic-plugins munge libpmix-dev)
  local missing=() p
  for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    say "installing missing packages: ${missing[*]}"
    apt-get update -qq
    # policy-rc.d in containers stops the packages' own services from
    # starting; where it does not, they are separate from ours (own
    # socket, key, ports are the defaults though: see SYNCOPT_SLURM_PORT).
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
  fi
}

# The pid in a pid file if that process is alive and runs the expected
# program, else nothing (a stale pid file, or a reused pid, never counts).
alive_pid() {
  local file=$1 exe=$2 pid
  [ -s "$file" ] || return 1
  pid=$(tr -dc '0-9' <"$file")
  [ -n "$pid" ] && [ -d "/proc/$pid" ] || return 1
  # Debian installs the daemons as alternatives (slurmd -> slurmd-wlm).
  [ "$(readlink "/proc/$pid/exe" 2>/dev/null || true)" = "$(readlink -f "$(command -v "$exe")")" ] || return 1
  echo "$pid"
}

wait_for() {  # wait_for SECONDS DESCRIPTION COMMAND...
  local limit=$1 what=$2 t0=$SECONDS
  shift 2
  until "$@"; do
    if ((SECONDS - t0 >= limit)); then
      return 1
    fi
    sleep 0.5
  done
  [ -n "$what" ] && say "$what after $((SECONDS - t0)) s"
  return 0
}

write_conf() {
  local cpus mem sockets cores threads hw
  hw=$(slurmd -C | head -n1)
  field() { sed -n "s/.* $1=\([0-9]*\).*/\1/p" <<<"$hw"; }
  cpus=$(field CPUs) sockets=$(field SocketsPerBoard) cores=$(field CoresPerSocket)
  threads=$(field ThreadsPerCore) mem=$(field RealMemory)
  local node_line="NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus Sockets=$sockets CoresPerSocket=$cores ThreadsPerCore=$threads RealMemory=$mem State=UNKNOWN"
  local slurmd_params=""
  if [ -n "${SYNCOPT_SLURM_CPUS:-}" ]; then
    node_line="NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$SYNCOPT_SLURM_CPUS RealMemory=$mem State=UNKNOWN"
    slurmd_params="SlurmdParameters=config_overrides"
  fi
  mkdir -p "$STATE"/{etc,ctld,run,log} "$STATE/spool/slurmd-$NODE"
  cat >"$CONF" <<EOF
# Written by scripts/slurm/local-cluster.sh; rewritten on every start.
ClusterName=syncopt-local
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=5
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/slurmd-%n
SlurmctldPidFile=$PID_CTLD
SlurmdPidFile=$PID_SLURMD
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=$MPI_DEFAULT
ProctrackType=proctrack/$PROCTRACK
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0,sched_interval=2
JobRequeue=1
FirstJobId=${SYNCOPT_SLURM_FIRST_JOB_ID:-1}
KillWait=5
MinJobAge=1800
InactiveLimit=0
ReturnToService=2
SlurmdTimeout=300
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
$slurmd_params
$node_line
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
  if [ "$PROCTRACK" = cgroup ]; then
    printf 'CgroupPlugin=autodetect\nIgnoreSystemd=yes\n' >"$STATE/etc/cgroup.conf"
  fi
}

start_munged() {
  if alive_pid "$PID_MUNGED" munged >/dev/null; then return; fi
  mkdir -p "$STATE/munge"
  chmod 0700 "$STATE/munge"
  if [ ! -s "$STATE/munge/munge.key" ]; then
    mungekey --create --keyfile="$STATE/munge/munge.key"
    say "created munge key $STATE/munge/munge.key"
  fi
  chmod 0400 "$STATE/munge/munge.key"
  # --force: take over a socket left by an unclean stop.
  munged --force --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$PID_MUNGED" --log-file="$STATE/munge/munged.log" \
    --seed-file="$STATE/munge/munged.seed"
  wait_for 10 "munged up" test -S "$MUNGE_SOCKET" || die "munged did not start: see $STATE/munge/munged.log"
}

# Our slurmctld alive (not another cluster's on the same port) and answering.
ctld_up() {
  alive_pid "$PID_CTLD" slurmctld >/dev/null && SLURM_CONF=$CONF scontrol ping 2>/dev/null | grep -q "is UP"
}

start_slurmctld() {
  if alive_pid "$PID_CTLD" slurmctld >/dev/null; then return; fi
  slurmctld -f "$CONF"
  wait_for "$TIMEOUT_S" "slurmctld up" ctld_up || die "slurmctld did not answer within ${TIMEOUT_S} s: see $STATE/log/slurmctld.log"
}

start_slurmd() {
  if alive_pid "$PID_SLURMD" slurmd >/dev/null; then return; fi
  slurmd -f "$CONF" -N "$NODE"
}

node_state() { SLURM_CONF=$CONF sinfo -h -N -n "$NODE" -o %T 2>/dev/null || true; }
# Registered and usable: the compact state has no flag suffix (* not
# responding, ~ powered off, # powering up, ! or % powering down, $ maintenance).
node_ready() {
  case "$(SLURM_CONF=$CONF sinfo -h -N -n "$NODE" -o %t 2>/dev/null)" in
    idle | mix | alloc | comp) return 0 ;;
    *) return 1 ;;
  esac
}

cmd_start() {
  [ "$(id -u)" -eq 0 ] || die "must run as root: the daemons launch jobs as any user"
  install_missing
  local running=0
  alive_pid "$PID_MUNGED" munged >/dev/null && running=$((running + 1))
  alive_pid "$PID_CTLD" slurmctld >/dev/null && running=$((running + 1))
  alive_pid "$PID_SLURMD" slurmd >/dev/null && running=$((running + 1))
  if ((running == 3)) && node_ready; then
    say "already running (node $NODE $(node_state)); $STATE"
    return 0
  fi
  # A configuration is only (re)written while no slurm daemon of ours runs.
  if ! alive_pid "$PID_CTLD" slurmctld >/dev/null && ! alive_pid "$PID_SLURMD" slurmd >/dev/null; then
    write_conf
  fi
  start_munged
  start_slurmctld
  start_slurmd
  if ! wait_for "$TIMEOUT_S" "node $NODE ready" node_ready; then
    echo "local-cluster: node $NODE is '$(node_state)' after ${TIMEOUT_S} s; last log lines:" >&2
    tail -n 20 "$STATE/log/slurmd.log" "$STATE/log/slurmctld.log" >&2 || true
    exit 1
  fi
  # A node left DOWN or DRAINED by an earlier unclean stop comes back here.
  SLURM_CONF=$CONF scontrol update nodename="$NODE" state=resume 2>/dev/null || true
  say "running: node $NODE $(node_state); use: export SLURM_CONF=$CONF"
}

stop_daemon() {  # stop_daemon PIDFILE EXE
  local pid
  pid=$(alive_pid "$1" "$2") || return 0
  kill -TERM "$pid"
  if ! wait_for 15 "" bash -c "! [ -d /proc/$pid ]"; then
    say "$2 (pid $pid) ignored SIGTERM for 15 s: SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  say "stopped $2 (pid $pid)"
}

cmd_stop() {
  if alive_pid "$PID_CTLD" slurmctld >/dev/null; then
    # Our jobs end first, so that no job step outlives its slurmd.
    SLURM_CONF=$CONF scancel --full --quiet --partition=debug 2>/dev/null || true
    jobs_gone() { [ -z "$(SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null)" ]; }
    wait_for 30 "" jobs_gone || say "some jobs did not end within 30 s"
  fi
  stop_daemon "$PID_SLURMD" slurmd
  stop_daemon "$PID_CTLD" slurmctld
  stop_daemon "$PID_MUNGED" munged
  # proctrack/cgroup leaves its (empty) slurm_<node> cgroups behind; rmdir
  # removes a cgroup only when it holds no process.
  if grep -q '^ProctrackType=proctrack/cgroup' "$CONF" 2>/dev/null; then
    find /sys/fs/cgroup/*/"slurm_$NODE" -depth -type d -exec rmdir {} + 2>/dev/null || true
  fi
}

cmd_status() {
  local name file exe pid rc=0
  for name in munged:"$PID_MUNGED" slurmctld:"$PID_CTLD" slurmd:"$PID_SLURMD"; do
    exe=${name%%:*} file=${name#*:}
    if pid=$(alive_pid "$file" "$exe"); then
      echo "$exe: running, pid $pid"
    else
      echo "$exe: not running"
      rc=1
    fi
  done
  if ((rc == 0)); then
    SLURM_CONF=$CONF sinfo -N -l || true
    SLURM_CONF=$CONF squeue || true
  fi
  echo "state dir: $STATE   SLURM_CONF=$CONF"
  return "$rc"
}

case "${1:-}" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  *) echo "usage: $0 start|stop|status|env   (state in \$SYNCOPT_SLURM_DIR, default /tmp/syncopt-slurm)" >&2; exit 64 ;;
esac
