#!/usr/bin/env bash
# The staleness study (paper section 2.1): trains configs/paper/staleness-S.toml
# for S = 0 5 10 20 50 one after another, then writes the table of test error
# of θ and θ̄ vs S and its plot (scripts/paper/staleness_table.py).
#
#   scripts/paper/staleness.sh [--full] [--out DIR] [--threads N] [--only "0 20"]
#                              [--set key=value ...]
#
#   (default)  small: 3 epochs of the first 20000 training images (1875
#              updates), tested on the first 5000 test images, lr annealed
#              over the last 1.2 epochs (the full run's 10/25); 30-60 s
#              a run on one busy core. Staleness, lr, batch, model,
#              augmentation and the EMA are the full run's.
#   --full     the configs as they are: 25 epochs of all 60000 images (hours
#              a run on a CPU).
#   --out DIR  where the runs go (run.dir); default runs/paper-staleness
#              (small) or runs/paper-staleness-full. Existing runs there
#              are replaced.
#   --threads  compute.threads (default: the configs' 2).
#   --set      more overrides for every run.
# A run that fails (e.g. diverges: exit 70) is recorded as failed in the
# table; the script goes on with the others and exits 1 at the end.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SYNCOPT:-$root/build/syncopt}
python=${PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3

full=0
out=""
only="0 5 10 20 50"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --full) full=1 ;;
    --out) out=$2; shift ;;
    --threads) extra+=(--set "compute.threads=$2"); shift ;;
    --only) only=$2; shift ;;
    --set) extra+=(--set "$2"); shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "staleness.sh: unknown argument '$1' (see --help)" >&2; exit 64 ;;
  esac
  shift
done
[ -x "$bin" ] || { echo "staleness.sh: no $bin; build first (README) or set SYNCOPT=" >&2; exit 66; }

small=(--set train.epochs=3 --set optim.anneal_epochs=1.2
       --set data.limit_train=20000 --set data.limit_test=5000
       --set eval.every_steps=625)
if [ "$full" = 1 ]; then
  size=()
  out=${out:-runs/paper-staleness-full}
else
  size=("${small[@]}")
  out=${out:-runs/paper-staleness}
fi
mkdir -p "$out"

failed=0
t0=$(date +%s)
for s in $only; do
  cfg=$root/configs/paper/staleness-$s.toml
  [ -f "$cfg" ] || { echo "staleness.sh: no $cfg" >&2; exit 66; }
  echo "== staleness $s: $cfg" >&2
  t=$(date +%s)
  if ! "$bin" train "$cfg" --quiet --set "run.dir=$out" --set run.overwrite=true \
      ${size[@]+"${size[@]}"} ${extra[@]+"${extra[@]}"}; then
    echo "staleness.sh: the run with s = $s failed (see $out/staleness-$s/summary.json)" >&2
    failed=1
  fi
  echo "== staleness $s: $(( $(date +%s) - t ))s" >&2
done
echo "== all runs: $(( $(date +%s) - t0 ))s" >&2
"$python" "$root/scripts/paper/staleness_table.py" "$out"
exit $failed
