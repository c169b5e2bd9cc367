#!/usr/bin/env bash
# Runs a sweep file on this machine, N runs at a time, each through
# scripts/run.sh: one process for a config whose train.mode is "local",
# `mpirun --enable-recovery -np K` for any other (with run.sh's outcome
# file, signals and exit codes). The sweep file is what `syncopt sweep
# --out` writes and scripts/slurm/sweep.sbatch reads: one run per line, a
# config path and `syncopt train` arguments split at white space; blank and
# # lines skipped; a line with -m key=v1,v2 is a grid, expanded in place by
# `syncopt sweep`.
#
# Usage: scripts/sweep.sh SWEEP_FILE [-j N] [--np K] [--logs DIR] [--list]
#   -j N       runs at a time (default 1)
#   --np K     ranks of each distributed run (default: the file's "# ntasks: K"
#              line, else $SYNCOPT_NP, else 7)
#   --logs DIR each run's output in DIR/<index>-<run name>.log (default
#              sweep-logs/<sweep file name> in the working directory)
#   --list     print the runs and exit
#   SYNCOPT_BIN=/path/to/syncopt: the binary (default build/syncopt, built by
#   scripts/setup.sh when missing)
#
# A line without --set run.name= runs as <config>-<sweep file name>_<index>.
# Runs go where run.sh puts them (run.dir, relative paths from the
# repository). An existing run directory is never overwritten: that run
# fails with 73 and the others go on. Ctrl-C (or SIGTERM) stops the runs
# that are going at a step boundary with a checkpoint (75) and starts no
# more; a second one ends distributed runs at once (SIGTERM to mpirun).
# Exit status: 0 when every run completed, else the first failed run's exit
# code (in the file's order); every run's is in the table at the end.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
home=$(cd "$here/.." && pwd)
log() { echo "sweep.sh: $*" >&2; }
die() {
  log "$1"
  exit "$2"
}

sweep="" jobs=1 np="" logs="" list=0
while (($#)); do
  case $1 in
    -j) jobs=${2:-}; shift 2 || die "-j needs a number" 64 ;;
    -j*) jobs=${1#-j}; shift ;;
    --np) np=${2:-}; shift 2 || die "--np needs a number" 64 ;;
    --logs) logs=${2:-}; shift 2 || die "--logs needs a folder" 64 ;;
    --list) list=1; shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
    -*) die "unknown option $1 (see scripts/sweep.sh --help)" 64 ;;
    *)
      [ -z "$sweep" ] || die "one sweep file only (found '$sweep' and '$1')" 64
      sweep=$1
      shift
      ;;
  esac
done
[ -n "$sweep" ] || die "usage: scripts/sweep.sh SWEEP_FILE [-j N] [--np K] [--logs DIR] [--list]" 64
[[ $jobs =~ ^[1-9][0-9]*$ ]] || die "-j $jobs: expected a number of runs at a time >= 1" 64
[ -f "$sweep" ] || die "sweep file '$sweep' not found (working directory $PWD)" 66
sweep=$(cd "$(dirname "$sweep")" && pwd)/$(basename "$sweep")
stem=$(basename "$sweep" .txt)
if [ -z "$np" ]; then
  np=$(sed -n 's/^# ntasks: *\([0-9][0-9]*\).*/\1/p' "$sweep" | head -n 1)
  np=${np:-${SYNCOPT_NP:-7}}
fi
[[ $np =~ ^[1-9][0-9]*$ ]] || die "--np $np: expected a number of ranks >= 1" 64

if [ -n "${SYNCOPT_BIN:-}" ]; then
  bin=$SYNCOPT_BIN
else
  bin=$home/build/syncopt
  [ -x "$bin" ] || (cd "$home" && scripts/setup.sh >/dev/null) || die "the build failed" 70
fi
export SYNCOPT_BIN=$bin

# A config path as the user wrote it: from the working directory, else the
# repository (where run.sh runs).
abs_config() {
  if [ -f "$1" ]; then
    echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"
  else
    echo "$1"
  fi
}

lines=()
while IFS= read -r line || [ -n "$line" ]; do
  trimmed=${line#"${line%%[![:space:]]*}"}
  [ -z "${trimmed//[[:space:]]/}" ] && continue
  [ "${trimmed:0:1}" = "#" ] && continue
  read -r -a words <<<"$trimmed"
  words[0]=$(abs_config "${words[0]}")
  if [[ " ${words[*]:1} " != *" -m "* && " ${words[*]:1} " != *" --multi "* ]]; then
    lines+=("${words[*]}")
    continue
  fi
  # A grid line: its runs, as `syncopt sweep` expands them (every problem once).
  grid=$(cd "$home" && "$bin" sweep "${words[@]}") ||
    die "$sweep: the grid line '$trimmed' does not expand (see the message above)" 78
  while IFS= read -r run; do lines+=("$run"); done <<<"$grid"
done <"$sweep"
count=${#lines[@]}
((count > 0)) || die "$sweep has no runs" 65

names=()
for i in "${!lines[@]}"; do
  name=$(sed -n 's/.*--set run\.name=\([^ ]*\).*/\1/p' <<<"${lines[$i]}")
  if [ -z "$name" ]; then
    read -r -a words <<<"${lines[$i]}"
    name=$(basename "${words[0]}" .toml)-${stem}_$i
    lines[i]="${lines[$i]} --set run.name=$name"
  fi
  names+=("$name")
done
if ((list)); then
  for i in "${!lines[@]}"; do echo "$i: ${lines[$i]}"; done
  exit 0
fi

logs=${logs:-sweep-logs/$stem}
mkdir -p "$logs" || die "cannot create the log folder $logs" 73
logs=$(cd "$logs" && pwd)
cores=$(nproc 2>/dev/null || echo 1)
log "$count runs from $sweep, $jobs at a time, $np ranks each distributed run; logs in $logs/"
((jobs * np > cores)) &&
  log "note: up to $((jobs * np)) ranks on $cores cores: runs share cores (timings with them)"

declare -A pid_of=() start_of=()
codes=()
stopping=0
# shellcheck disable=SC2317  # run by the traps
# SIGTERM to each run: run.sh (distributed) turns it into SIGUSR1 to mpirun,
# a second one into SIGTERM; a local run is syncopt itself (run.sh execs it),
# which stops at its next step boundary. (Not SIGINT: a command started in
# the background of a script ignores it.)
stop_all() {
  stopping=$((stopping + 1))
  log "SIG$1: SIGTERM to the ${#pid_of[@]} run(s) going ($( ((stopping > 1)) && echo "again: mpirun ends at once" || echo "they stop at a step boundary with a checkpoint")); no more start"
  for i in "${!pid_of[@]}"; do kill -TERM "${pid_of[$i]}" 2>/dev/null; done
}
trap 'stop_all INT' INT
trap 'stop_all TERM' TERM

# reap: wait for one run to end and record it.
reap() {
  local done_pid rc i
  wait -n -p done_pid "${pid_of[@]}"
  rc=$?
  [ -n "${done_pid:-}" ] || return 0 # a trapped signal interrupted the wait
  for i in "${!pid_of[@]}"; do
    if [ "${pid_of[$i]}" = "$done_pid" ]; then
      codes[i]=$rc
      unset "pid_of[$i]"
      log "[$((i + 1))/$count] ${names[$i]}: exit $rc after $(($(date +%s) - start_of[$i])) s"
    fi
  done
}

next=0
while ((next < count || ${#pid_of[@]} > 0)); do
  if ((next < count && ${#pid_of[@]} < jobs && stopping == 0)); then
    read -r -a words <<<"${lines[$next]}"
    log "[$((next + 1))/$count] start ${names[$next]}"
    SYNCOPT_NP=$np setsid "$here/run.sh" "${words[@]}" >"$logs/$next-${names[$next]}.log" 2>&1 </dev/null &
    pid_of[$next]=$!
    start_of[$next]=$(date +%s)
    next=$((next + 1))
    continue
  fi
  ((stopping > 0 && next < count)) && next=$count
  ((${#pid_of[@]} > 0)) && reap
done
trap - INT TERM

status=0
printf '%-6s %-48s %s\n' index run exit
for i in "${!names[@]}"; do
  code=${codes[$i]:-}
  case $code in
    "") what="not started" ;;
    0) what="0 completed" ;;
    75) what="75 stopped (resume: its log's last line)" ;;
    *) what="$code failed (see $logs/$i-${names[$i]}.log)" ;;
  esac
  printf '%-6s %-48s %s\n' "$i" "${names[$i]}" "$what"
  if ((status == 0)) && [ "$code" != 0 ]; then status=${code:-75}; fi
done
exit "$status"
