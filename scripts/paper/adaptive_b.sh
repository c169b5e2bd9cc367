#!/usr/bin/env bash
# Adaptive b (train.backups = "auto") against every fixed b = 0..K-1: the
# time to a target test accuracy (85 % of the EMA of theta) on the virtual
# clock, K = 6 workers, an MLP on Fashion-MNIST, under bernoulli (p = 10 %,
# x4) and pareto (alpha 2, mean 100 ms) stragglers (configs/paper/adaptive-b.toml).
# The acceptance test of adaptive b: within 5 % of the best fixed b, and
# better than the worst by a margin the table reports.
#
#   scripts/paper/adaptive_b.sh         seeds 1-3, 1.25 epochs: 42 runs, ~8 minutes here
#   scripts/paper/adaptive_b.sh --full  seeds 1-10, 2 epochs (configs/sweeps/paper-adaptive-b.txt)
#   scripts/paper/adaptive_b.sh --full --no-run --runs runs   after
#       sbatch --array=0-139 --ntasks=7 scripts/slurm/sweep.sbatch configs/sweeps/paper-adaptive-b.txt
#   --out DIR (default runs/paper/adaptive-b, runs/paper-full/adaptive-b)
#   TARGET=0.86 scripts/paper/adaptive_b.sh --no-run   another target, same runs
#   SEEDS=1-6 REUSE=1 scripts/paper/adaptive_b.sh       more seeds, keeping the runs already there
#
# Times are virtual (modelled compute and straggler delays; each evaluation's
# time is its step's t_apply), so the machine's load does not enter them.
# Writes OUT/tables.md, OUT/adaptive.json and, per straggler model, plot.py
# --compare's figures of seed 1 under OUT/<model>/.
source "$(dirname "$0")/common.sh"
paper_options adaptive-b "$@"
target=${TARGET:-0.85}

sweep=configs/sweeps/paper-adaptive-b.txt
# SEEDS=LO-HI: the seeds to run (default 1-3 small, 1-10 full).
if ((FULL)); then seeds=${SEEDS:-1-10} extra=(); else seeds=${SEEDS:-1-3} extra=(--set train.epochs=1.25); fi
seed_runs "$sweep" "$seeds" "${extra[@]}"
runs=("${SEED_RUNS[@]}")

{
  echo "# Adaptive b against every fixed b"
  echo
  echo "configs/paper/adaptive-b.toml ${extra[*]}, virtual clock, K = 6; runs: $sweep lines of seeds $seeds."
  echo
  "$PYTHON" scripts/paper/tables.py adaptive "${runs[@]}" --target "$target" --json "$OUT/adaptive.json"
} >"$OUT/tables.md" || die "tables.py failed" 70
for model in bernoulli pareto; do
  seed1=()
  for b in 0 1 2 3 4 5 auto; do seed1+=("$RUNS/ab-$model-b$b-s1"); done
  "$PYTHON" scripts/plot.py --compare "${seed1[@]}" --out "$OUT/$model" --dpi 90 >/dev/null ||
    die "plot.py --compare failed" 70
done
cat "$OUT/tables.md"
paper_done
