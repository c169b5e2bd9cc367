#!/bin/bash
# A stand-in for build/syncopt (SYNCOPT_BIN=...) that checks only the SLURM
# plumbing of scripts/slurm/train.sbatch: signal forwarding, the exit code
# read from the outcome file (SYNCOPT_OUTCOME_FILE), requeue and the resume
# flag on restart. It trains nothing. Run: stopped by SIGUSR1 -> summary exit_code 75, exit 75; with
# --set run.resume=true -> summary exit_code 0, exit 0; else idles up to
# 180 s (the test's time limit ends it first).
set -u
[ "${1:-}" = train ] || exit 64
if [ "${2:-}" = --help ]; then echo "stub-syncopt: a stand-in for syncopt train (see its header)"; exit 0; fi
shift 2
name=run dir=runs resume=false dry=0
while [ $# -gt 0 ]; do
  case $1 in
    --set)
      case $2 in
        run.name=*) name=${2#*=} ;;
        run.dir=*) dir=${2#*=} ;;
        run.resume=*) resume=${2#*=} ;;
      esac
      shift 2
      ;;
    --dry-run) dry=1; shift ;;
    *) shift ;;
  esac
done
if ((dry)); then
  printf '[run]\nname = "%s"\ndir = "%s"\nresume = %s\n' "$name" "$dir" "$resume"
  exit 0
fi
rank=${SLURM_PROCID:-0}
out=$dir/$name
summary() {  # summary STATUS EXIT_CODE: as rank 0 records a launch (summary.json, the outcome file)
  if [ "$rank" = 0 ]; then
    printf '{"status": "%s", "exit_code": %s, "resumed": %s, "launch_id": "%s"}\n' "$1" "$2" "$resume" \
      "${SYNCOPT_LAUNCH_ID:-}" >"$out/summary.json"
    if [ -n "${SYNCOPT_OUTCOME_FILE:-}" ]; then
      printf '{"status": "%s", "exit_code": %s}\n' "$1" "$2" >"$SYNCOPT_OUTCOME_FILE"
    fi
  fi
}
if [ "$resume" = true ]; then
  [ -d "$out" ] || exit 66
  summary completed 0
  exit 0
fi
if [ "$rank" = 0 ]; then
  [ -e "$out" ] && exit 73
  mkdir -p "$out"
fi
stop=0
trap 'stop=1' USR1
for _ in $(seq 1800); do
  ((stop)) && break
  sleep 0.1
done
if ((stop)); then
  summary stopped 75
  exit 75
fi
summary completed 0
exit 0
