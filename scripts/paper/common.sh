# Shared by the scripts of scripts/paper/ (sourced, not run): options, the
# mpirun launch of one run, the sweep files, the timing of a script.
#
# Every paper script takes:
#   (none)         the small version, runnable on a workstation in minutes
#   --full         the full-size version: the runs of its sweep file
#                  (configs/sweeps/paper-*.txt, the same lines sbatch runs)
#   --no-run       make the tables and figures from existing runs only
#                  (after `sbatch ... scripts/slurm/sweep.sbatch`, with --runs)
#   --runs DIR     where the run directories are (default OUT/runs; sweep.sbatch
#                  writes runs/<run.name> under the job's working directory)
#   --out DIR      where the tables, figures and logs go (default
#                  runs/paper/<experiment>, runs/paper-full/<experiment> with --full)
# and exits non-zero when a run or a step fails. REUSE=1 keeps the runs
# already completed in RUNS instead of redoing them (for adding seeds; runs on
# the virtual clock are the same bit for bit anyway).
set -uo pipefail

PAPER_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$PAPER_ROOT" || exit 66
SYNCOPT=${SYNCOPT_BIN:-$PAPER_ROOT/build/syncopt}
PYTHON=${PYTHON:-python3}
# Open MPI as root (containers, CI) and more ranks than cores.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1

die() {
  echo "$(basename "$0"): $1" >&2
  exit "${2:-1}"
}

# paper_options EXPERIMENT "$@": sets FULL, DO_RUN, OUT, RUNS.
paper_options() {
  local experiment=$1
  shift
  FULL=0 DO_RUN=1 OUT="" RUNS=""
  while [ $# -gt 0 ]; do
    case $1 in
      --full) FULL=1 ;;
      --no-run) DO_RUN=0 ;;
      --out) OUT=${2:?--out needs a directory}; shift ;;
      --runs) RUNS=${2:?--runs needs a directory}; shift ;;
      -h | --help)
        sed -n '2,/^$/s/^# \{0,1\}//p' "$0"
        exit 0 ;;
      *) die "unknown option '$1' (see --help)" 64 ;;
    esac
    shift
  done
  if [ -z "$OUT" ]; then
    if ((FULL)); then OUT=runs/paper-full/$experiment; else OUT=runs/paper/$experiment; fi
  fi
  RUNS=${RUNS:-$OUT/runs}
  mkdir -p "$OUT/logs" "$RUNS" || die "cannot create $OUT" 73
  if ((DO_RUN)) && [ ! -x "$SYNCOPT" ]; then
    die "$SYNCOPT not found: build first (cmake -S . -B build && cmake --build build -j)" 66
  fi
  PAPER_T0=$(date +%s)
  # The machine's load during the runs (kept as it was when only the tables are remade).
  ((DO_RUN)) && echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" >"$OUT/logs/load.txt"
  : >>"$OUT/logs/load.txt"
}

# The status field of a run's summary.json, or "missing".
run_status() {
  local summary=$1/summary.json
  [ -f "$summary" ] || { echo missing; return; }
  "$PYTHON" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("status","?"))' "$summary"
}

# train NP NAME CONFIG [ARGS...]: one run under mpirun into $RUNS/NAME
# (replacing an earlier one), its log in $OUT/logs/NAME.log; fails unless its
# summary says completed (mpirun --enable-recovery exits 0 whatever the ranks
# do). With --no-run, only checks that the run is there.
train() {
  local np=$1 name=$2
  shift 2
  if ((DO_RUN)) && [ "${REUSE:-0}" = 1 ] && [ "$(run_status "$RUNS/$name")" = completed ]; then
    echo "  run $name: kept (REUSE=1)"
  elif ((DO_RUN)); then
    local t0 t1
    t0=$(date +%s)
    echo "  run $name: mpirun -np $np syncopt train $* (load $(cut -d' ' -f1 /proc/loadavg))"
    mpirun --enable-recovery -np "$np" "$SYNCOPT" train "$@" --set run.dir="$RUNS" \
      --set run.name="$name" --set run.overwrite=true </dev/null >"$OUT/logs/$name.log" 2>&1
    t1=$(date +%s)
    echo "$name $((t1 - t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/logs/times.txt"
  fi
  local status
  status=$(run_status "$RUNS/$name")
  if [ "$status" != completed ]; then
    tail -n 20 "$OUT/logs/$name.log" >&2 2>/dev/null
    die "run $RUNS/$name: status $status (log: $OUT/logs/$name.log)" 70
  fi
}

# simulate NAME CONFIG [ARGS...]: syncopt simulate into $RUNS/NAME.
simulate() {
  local name=$1
  shift
  if ((DO_RUN)); then
    echo "  simulate $name: syncopt simulate $*"
    "$SYNCOPT" simulate "$@" --set run.dir="$RUNS" --set run.name="$name" \
      --set run.overwrite=true </dev/null >"$OUT/logs/$name.log" 2>&1 ||
      { tail -n 20 "$OUT/logs/$name.log" >&2; die "simulate $name failed" 70; }
  fi
  [ -f "$RUNS/$name/summary.json" ] || die "simulated run $RUNS/$name missing" 66
}

# sweep_lines FILE: the runs of a sweep file, one per line (the rules of
# scripts/slurm/sweep.sbatch: blank and # lines skipped, a grid line with -m
# expanded in place by `syncopt sweep`).
sweep_lines() {
  local line words
  while IFS= read -r line; do
    read -r -a words <<<"$line"
    if [[ " ${words[*]:1} " == *" -m "* || " ${words[*]:1} " == *" --multi "* ]]; then
      "$SYNCOPT" sweep "${words[@]}" || die "$1: the grid line '$line' does not expand" 78
    else
      echo "$line"
    fi
  done < <(sed -e 's/^[[:space:]]*//' -e '/^$/d' -e '/^#/d' "$1")
}

# sweep_ntasks FILE: the ranks per run, from its "# ntasks: N" line.
sweep_ntasks() {
  sed -n 's/^# ntasks: *\([0-9][0-9]*\).*/\1/p' "$1" | head -n 1
}

# run_sweep FILE NAME_REGEX [EXTRA ARGS...]: the lines of a sweep file whose
# run name (the line's --set run.name=) matches NAME_REGEX (grep -E), each as
# a run under mpirun with the sweep's ntasks, EXTRA appended (so it wins).
run_sweep() {
  local file=$1 regex=$2 np line name
  shift 2
  np=$(sweep_ntasks "$file")
  [ -n "$np" ] || die "$file has no '# ntasks: N' line" 65
  while IFS= read -r line; do
    name=$(sed -n 's/.*--set run\.name=\([^ ]*\).*/\1/p' <<<"$line")
    [ -n "$name" ] || die "$file: a line without --set run.name=: $line" 65
    grep -Eq -- "$regex" <<<"$name" || continue
    # shellcheck disable=SC2086  # the line's words, as sweep.sbatch splits them
    train "$np" "$name" $line "$@"
  done < <(sweep_lines "$file")
}

# sweep_names FILE: the run names of a sweep file, in order.
sweep_names() {
  sweep_lines "$1" | sed -n 's/.*--set run\.name=\([^ ]*\).*/\1/p'
}

# seed_runs SWEEP SEEDS [EXTRA ARGS...]: the runs of a sweep file whose names
# end in -s<seed> for a seed in SEEDS (LO-HI): made first unless --no-run
# (EXTRA appended to each), then checked complete. Sets SEED_RUNS to their
# directories, in the file's order.
seed_runs() {
  local sweep=$1 seeds=$2 regex name
  shift 2
  [[ $seeds =~ ^([0-9]+)-([0-9]+)$ ]] || die "SEEDS=$seeds: write LO-HI, e.g. 1-3" 64
  regex="-s($(seq -s '|' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"))\$"
  ((DO_RUN)) && run_sweep "$sweep" "$regex" "$@"
  SEED_RUNS=()
  for name in $(sweep_names "$sweep" | grep -E -- "$regex"); do
    [ "$(run_status "$RUNS/$name")" = completed ] || die "run $RUNS/$name missing or not completed" 66
    SEED_RUNS+=("$RUNS/$name")
  done
}

# paper_stop_clock: the load average at the end and the total time into
# OUT/logs/load.txt (once), so that a table can quote them.
paper_stop_clock() {
  [ -n "${PAPER_T1:-}" ] && return 0
  PAPER_T1=$(date +%s)
  ((DO_RUN)) || return 0
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/logs/load.txt"
  echo "total: $((PAPER_T1 - PAPER_T0)) s" >>"$OUT/logs/load.txt"
}

paper_done() {
  paper_stop_clock
  echo
  echo "took $((PAPER_T1 - PAPER_T0)) s here ($(tr '\n' ';' <"$OUT/logs/load.txt"))"
  echo "outputs in $OUT/:"
  find "$OUT" -maxdepth 1 -type f | sort | sed 's/^/  /'
  echo "  runs: $RUNS/, logs: $OUT/logs/"
}
