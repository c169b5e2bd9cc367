#!/usr/bin/env bash
# The main job on the default data set: installs what is missing, builds, and
# trains the reference CNN on Fashion-MNIST. By default the paper's method
# under mpirun (configs/fmnist-sync.toml: 1 parameter server, 1 evaluator,
# 5 workers, sync with N = 4, b = 1), ending with the run's report.
# Usage: scripts/run.sh [CONFIG] [--set key=value ...] [--dry-run]
#   SYNCOPT_NP=7 ranks for a distributed config (default 7); a config whose
#   train.mode is "local" runs as one process without mpirun.
#   SYNCOPT_BIN=/path/to/syncopt: use that binary; nothing is installed or
#   built (an installed syncopt, or a build elsewhere).
#   SYNCOPT_HOSTFILE=hosts: across hosts, Open MPI's host file (`node1
#   slots=2` lines); -np is then the sum of its slots unless SYNCOPT_NP says.
#   SYNCOPT_MAX_RESTARTS=K: a run that ends 69 because it lost workers is
#   resumed on the ranks left (--set run.reshape=true), up to K times
#   (default 0); README, "Elastic restarts".
#   SYNCOPT_MPIRUN_ARGS="...": more options for mpirun, split at spaces
#   (e.g. the network to use: --mca btl_tcp_if_include eth1 --mca
#   oob_tcp_if_include eth1).
#
# Exit status: the run's own (README, "Faults, stopping and resuming"): the
# exit code of its last launch (after any elastic restart) as the rank that
# ended it recorded it (in the file SYNCOPT_OUTCOME_FILE names, outside the
# run directory, so that a refused start, 73, or a full disk, 74, are told
# too), else its summary.json. A
# distributed run goes under `mpirun --enable-recovery`, so that a worker
# that dies is dropped and the run goes on; that mpirun exits 0 whatever the
# ranks did, so its status says nothing.
# The job ends once its outcome is recorded: when mpirun has not exited
# SYNCOPT_END_GRACE_S (5) seconds after the rank that ended the launch wrote
# it, this script ends mpirun (SIGTERM, then SIGKILL 2 s later). Open MPI
# 4.1's mpirun waits forever for the daemon of a host it cannot reach, and
# ignores SIGTERM while it does (docs/design.md §9).
# Ctrl-C (SIGINT), SIGTERM or SIGHUP to this script stop the run at a step
# boundary with a checkpoint (exit 75; SIGUSR1 to mpirun, which forwards it);
# a second one ends mpirun at once. Resume with the command it prints.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${SYNCOPT_BIN:-}" ]; then
  bin=$SYNCOPT_BIN
else
  scripts/setup.sh >/dev/null
  bin=build/syncopt
fi
config=${1:-configs/fmnist-sync.toml}
shift || true
# A fresh run directory each time, so an earlier run is never overwritten
# (the user's own --set run.name=... comes later and wins).
name="$(basename "$config" .toml)-$(date +%Y%m%d-%H%M%S)"
args=(train "$config" --set run.name="$name" "$@")
# Validates the config once, in one process (a bad key: its message and exit
# 78 here, not one per rank), and tells the mode and the run directory.
rc=0
resolved=$("$bin" "${args[@]}" --dry-run 2>&1) || rc=$?
if ((rc)); then
  echo "$resolved" >&2
  exit "$rc"
fi
value() {  # value SECTION KEY: from the resolved config that --dry-run prints
  awk -v sect="[$1]" -v key="$2" '/^\[/ { in_s = ($0 == sect) }
    in_s && $1 == key && $2 == "=" { v = $3; gsub(/^"|"$/, "", v); print v; exit }' <<<"$resolved"
}
mode=$(value train mode)
run_dir=$(value run dir)/$(value run name)
if [ "$mode" = "local" ]; then
  # One process: its exit status is the run's own, and it takes SIGINT and
  # SIGTERM itself (checkpoint, exit 75).
  exec "$bin" "${args[@]}"
fi

# Open MPI as root (containers, CI) and more ranks than cores need these;
# they belong to the launcher, never to the binary.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
hosts=()
hostfile=""
np=${SYNCOPT_NP:-7}
if [ -n "${SYNCOPT_HOSTFILE:-}" ]; then
  [ -r "$SYNCOPT_HOSTFILE" ] || { echo "run.sh: cannot read the host file $SYNCOPT_HOSTFILE (SYNCOPT_HOSTFILE)" >&2; exit 66; }
  hostfile=$SYNCOPT_HOSTFILE
  hosts=(--hostfile "$hostfile")
  if [ -z "${SYNCOPT_NP:-}" ]; then
    np=$(awk '!/^[ \t]*(#|$)/ { n = 1; for (i = 2; i <= NF; i++) if ($i ~ /^slots=/) { n = substr($i, 7) } s += n } END { print s + 0 }' "$hostfile")
  fi
fi
# shellcheck disable=SC2206  # split at spaces, as documented
extra=(${SYNCOPT_MPIRUN_ARGS:-})
# --dry-run: every rank says where it runs (host, node-local rank, device);
# nothing is trained or written.
for a in "$@"; do
  [ "$a" = --dry-run ] && exec mpirun "${hosts[@]}" "${extra[@]}" -np "$np" "$bin" "${args[@]}" </dev/null
done

# One launch of the run: mpirun with "${args[@]}" on $np ranks; sets $code
# to the launch's exit code (empty when no rank recorded one), $launch_id
# and $mpirun_rc.
# mpirun runs in a session of its own (setsid), so that Ctrl-C at the
# terminal reaches this script only and becomes SIGUSR1 to mpirun (mpirun's
# own SIGINT/SIGTERM handling kills the ranks); stdin from /dev/null, as
# nothing reads it. Its stderr stays the terminal, so rank 0 still draws the
# live progress line (lib/metrics/records.cpp).
# The two --mca settings keep mpirun quiet at a clean end: under
# --enable-recovery, Open MPI 4.1's mpirun tells the PMIx server of every rank
# that exits non-zero (75 after a stop, 69) or without MPI_Finalize, and
# Debian's PMIx 4.2 refuses that notice with one "PMIX ERROR: BAD-PARAM in
# file ../../../src/event/pmix_event_notification.c at line 1033" per other
# rank (a C program of ten lines that calls MPI_Finalize and returns 75 shows
# it too). Under --enable-recovery neither setting changes what mpirun does:
# it neither aborts the job for such an exit nor reports its status. A rank
# killed by a signal still gets one line: that one is a real death.
launch() {
  # This launch's name, and where the rank that ends it writes its outcome.
  launch_id=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  outcome=${TMPDIR:-/tmp}/syncopt-outcome-$launch_id.json
  setsid env SYNCOPT_LAUNCH_ID="$launch_id" SYNCOPT_OUTCOME_FILE="$outcome" SYNCOPT_RESTART="$restart_json" \
    mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 --mca orte_allowed_exit_without_sync 1 \
    "${hosts[@]}" "${extra[@]}" -x SYNCOPT_LAUNCH_ID -x SYNCOPT_OUTCOME_FILE -x SYNCOPT_RESTART -np "$np" \
    "$bin" "${args[@]}" </dev/null &
  mpirun_pid=$!
  stops=0
  trap 'stop_run INT' INT
  trap 'stop_run TERM' TERM
  trap 'stop_run HUP' HUP
  end_after_outcome &
  ender_pid=$!
  mpirun_rc=0
  while :; do
    # wait returns early (status > 128) when a trapped signal arrives.
    wait "$mpirun_pid" && mpirun_rc=0 || mpirun_rc=$?
    kill -0 "$mpirun_pid" 2>/dev/null || break
  done
  kill "$ender_pid" 2>/dev/null || true
  wait "$ender_pid" 2>/dev/null || true
  trap - INT TERM HUP

  # The run's verdict: what the rank that ended this launch wrote, else this
  # launch's summary.json.
  code=$(python3 - "$outcome" "$run_dir/summary.json" "$launch_id" <<'PY' 2>/dev/null
import json, sys
outcome, summary, launch = sys.argv[1:]
for path, need in ((outcome, None), (summary, launch)):
    try:
        d = json.load(open(path))
    except (OSError, ValueError):
        continue
    if need is None or d.get("launch_id") == need:
        print(d["exit_code"])
        break
PY
  ) || code=""
  rm -f "$outcome"
}
# shellcheck disable=SC2317  # run by the traps
stop_run() {
  stops=$((stops + 1))
  if ((stops == 1)); then
    echo >&2
    echo "run.sh: SIG$1: asking the ranks to stop with a checkpoint (SIGUSR1 to mpirun); again to end mpirun at once" >&2
    kill -USR1 "$mpirun_pid" 2>/dev/null || true
  else
    echo "run.sh: SIG$1 again: SIGTERM to mpirun" >&2
    kill -TERM "$mpirun_pid" 2>/dev/null || true
  fi
}
# Ends mpirun once the outcome has been on disk for SYNCOPT_END_GRACE_S.
# shellcheck disable=SC2317  # run in the background
end_after_outcome() {
  local grace=${SYNCOPT_END_GRACE_S:-5} since=""
  while kill -0 "$mpirun_pid" 2>/dev/null; do
    if [ -z "$since" ] && [ -s "$outcome" ]; then since=$EPOCHREALTIME; fi
    if [ -n "$since" ] && awk -v a="$since" -v b="$EPOCHREALTIME" -v g="$grace" 'BEGIN { exit !(b - a >= g) }'; then
      echo "run.sh: the outcome is recorded ($outcome) but mpirun has not exited ${grace}s later (a host it cannot reach: it waits for that host's daemon); ending it" >&2
      kill -TERM "$mpirun_pid" 2>/dev/null
      sleep 2
      if kill -KILL "$mpirun_pid" 2>/dev/null; then echo "run.sh: mpirun ignored SIGTERM: SIGKILL" >&2; fi
      return
    fi
    sleep 0.2
  done
}

# Elastic restarts (docs/design.md §10): a launch that ended 69 because it
# lost workers is resumed on the ranks left (its lost ranks' slots out of the
# host file), with run.resume and run.reshape, up to SYNCOPT_MAX_RESTARTS
# (default 0: a restart changes N, so it is asked for) times; each restart
# is recorded in run.json (the launch's `restart`, from $SYNCOPT_RESTART).
max_restarts=${SYNCOPT_MAX_RESTARTS:-0}
[[ $max_restarts =~ ^[0-9]+$ ]] || { echo "run.sh: SYNCOPT_MAX_RESTARTS must be a whole number, not '$max_restarts'" >&2; exit 64; }
restart_json=""
restarts=0
outcome=""
shrunk=""  # the host file less the lost slots, once there is one
why=$(mktemp "${TMPDIR:-/tmp}/syncopt-restart.XXXXXX")
trap 'rm -f "$outcome" "$shrunk" "$why"' EXIT
while :; do
  launch
  if [ "$code" != 69 ] || ((restarts >= max_restarts)); then break; fi
  restarts=$((restarts + 1))
  shrink=()
  if [ -n "$hostfile" ]; then
    next=$(mktemp "${TMPDIR:-/tmp}/syncopt-hosts.XXXXXX")
    shrink=(--hostfile "$hostfile" --hostfile-out "$next")
  fi
  rc=0
  decision=$(scripts/elastic_restart.py "$run_dir" --launch "$launch_id" --lost --number "$restarts" \
    --max "$max_restarts" --by scripts/run.sh "${shrink[@]}" 2>"$why") || rc=$?
  if ((rc)); then
    echo "run.sh: $run_dir ended 69; no elastic restart: $(cat "$why")" >&2
    [ -n "$hostfile" ] && rm -f "$next"
    break
  fi
  np=$(sed -n 1p <<<"$decision")
  restart_json=$(sed -n 2p <<<"$decision")
  if [ -n "$hostfile" ]; then
    rm -f "$shrunk"
    shrunk=$next
    hostfile=$shrunk
    hosts=(--hostfile "$hostfile")
  fi
  if ((restarts == 1)); then args+=(--set run.resume=true --set run.reshape=true); fi
  echo "run.sh: $run_dir ended 69 (lost workers): elastic restart $restarts of $max_restarts (SYNCOPT_MAX_RESTARTS): $(cat "$why"); resuming on $np ranks with --set run.resume=true --set run.reshape=true" >&2
done
# (The EXIT trap removes the restart's files.)
if [ -z "$code" ]; then
  # No verdict: every rank died before one could be written.
  echo "run.sh: no rank recorded how this launch of $run_dir ended (mpirun exited $mpirun_rc): the run failed; see the messages above" >&2
  ((mpirun_rc)) && exit "$mpirun_rc"
  exit 70
fi
# A completed run has just printed its report and where it is: nothing to add.
case $code in
  0) ;;
  75)
    again=("$config" "$@")
    case " $* " in *" run.name="* | *" --set=run.name="*) ;; *) again+=(--set "run.name=$(basename "$run_dir")") ;; esac
    # After an elastic restart the run is on fewer ranks than it began with.
    if ((restarts)); then
      again=(SYNCOPT_NP="$np" scripts/run.sh "${again[@]}")
      [ -n "$shrunk" ] && echo "run.sh: its ranks ran on the host file less the lost ranks' slots: $(tr '\n' ' ' <"$shrunk")" >&2
    else
      again=(scripts/run.sh "${again[@]}")
    fi
    echo "run.sh: $run_dir stopped with a checkpoint (exit 75); resume with: ${again[*]} --set run.resume=true" >&2
    ;;
  *)
    echo "run.sh: $run_dir ended with exit code $code (summary.json); see the messages above" >&2
    if [ "$code" = 69 ] && ((max_restarts == 0)); then
      echo "run.sh: a run that lost workers can go on with the ranks left: SYNCOPT_MAX_RESTARTS=K restarts it (README, \"Elastic restarts\")" >&2
    fi
    ;;
esac
exit "$code"
