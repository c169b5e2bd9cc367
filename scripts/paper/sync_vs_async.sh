#!/usr/bin/env bash
# Sync with backup workers against async and plain sync under stragglers
# (the paper's Fig. 5-7 question): time to 90, 91 and 92 % test accuracy of
# the EMA of theta, the CNN on Fashion-MNIST, K = 5 workers, the same config
# otherwise (configs/paper/sync-vs-async.toml: bernoulli stragglers p = 10 %,
# x4; lr scaled by N).
#
#   scripts/paper/sync_vs_async.sh         sync N=4 b=1, async, sync b=0, back to back,
#                                          8 epochs each (~12 minutes here)
#   scripts/paper/sync_vs_async.sh --full  20 epochs, seeds 1-3 (configs/sweeps/paper-sync-vs-async.txt)
#   scripts/paper/sync_vs_async.sh --full --no-run --runs runs   after
#       sbatch --array=0-8 --ntasks=7 scripts/slurm/sweep.sbatch configs/sweeps/paper-sync-vs-async.txt
#   --out DIR (default runs/paper/sync-vs-async, runs/paper-full/sync-vs-async)
#   SEEDS=2-2 scripts/paper/sync_vs_async.sh --out runs/paper/sync-vs-async-s2   another seed
#   SEEDS=1-3 EPOCHS=4 scripts/paper/sync_vs_async.sh --out runs/paper/sva-3seeds  three seeds,
#                                          4 epochs each (the small size's length: EPOCHS, default 8)
#
# Wall clock (async has no virtual clock): run it when the machine is quiet.
# The load average at the start and end goes into OUT/logs/load.txt and the
# table. Writes OUT/tables.md and plot.py --compare's figures into OUT/.
source "$(dirname "$0")/common.sh"
paper_options sync-vs-async "$@"

sweep=configs/sweeps/paper-sync-vs-async.txt
# SEEDS=LO-HI: the seeds to run (default 1 small, 1-3 full).
if ((FULL)); then seeds=${SEEDS:-1-3} extra=(); else seeds=${SEEDS:-1-1} extra=(--set "train.epochs=${EPOCHS:-8}"); fi
seed_runs "$sweep" "$seeds" "${extra[@]}"
runs=("${SEED_RUNS[@]}")

paper_stop_clock
{
  echo "# Sync + backups vs async vs plain sync under stragglers"
  echo
  echo "configs/paper/sync-vs-async.toml ${extra[*]}, wall clock."
  sed 's/^/    /' "$OUT/logs/load.txt"
  [ -f "$OUT/logs/times.txt" ] && sed 's/^/    /' "$OUT/logs/times.txt"
  echo
  "$PYTHON" scripts/paper/tables.py tta "${runs[@]}" --targets 0.9,0.91,0.92
} >"$OUT/tables.md" || die "tables.py failed" 70
"$PYTHON" scripts/plot.py --compare "${runs[@]}" --out "$OUT" --dpi 90 >/dev/null ||
  die "plot.py --compare failed" 70
cat "$OUT/tables.md"
paper_done
