#!/usr/bin/env bash
# The paper's Figure 3: the time a step waits for the k-th of its K gradients
# (flat for most k, a long tail for the last few), real and simulated.
#
#   scripts/paper/fig3.sh            real runs at K = 5, 6, 7 (300 steps each) and
#                                    K = 100 simulated (500 steps): ~1-3 minutes here
#   scripts/paper/fig3.sh --full     2000 steps each, and a real K = 100 run
#                                    (configs/sweeps/paper-fig3.txt, 101 ranks: a cluster)
#   scripts/paper/fig3.sh --full --no-run --runs runs   the tables and plots only, e.g. after
#       sbatch --array=0-0 --ntasks=101 scripts/slurm/sweep.sbatch configs/sweeps/paper-fig3.txt
#   --out DIR (default runs/paper/fig3, runs/paper-full/fig3)
#
# Configs: configs/paper/fig3.toml (real: plain sync, the CNN on Fashion-MNIST,
# bernoulli stragglers p = 5 %, x3) and configs/paper/fig3-k100-sim.toml (the same
# stragglers on 100 simulated workers). Writes OUT/tables.md (mean, median, p90
# time to the k-th gradient per run), OUT/compare_kth.png (all runs against k/K)
# and each run's kth_gradient_cdf.png under OUT/<run>/.
source "$(dirname "$0")/common.sh"
paper_options fig3 "$@"

if ((FULL)); then steps=2000; sim_steps=2000; else steps=300; sim_steps=500; fi
runs=()
for k in 5 6 7; do
  name=fig3-k$k
  if ((DO_RUN)) || [ -d "$RUNS/$name" ]; then
    train $((k + 1)) "$name" configs/paper/fig3.toml --set train.steps=$steps
    runs+=("$RUNS/$name")
  fi
done
if ((FULL)); then
  if ((DO_RUN)); then
    run_sweep configs/sweeps/paper-fig3.txt .
  fi
  for name in $(sweep_names configs/sweeps/paper-fig3.txt); do
    [ "$(run_status "$RUNS/$name")" = completed ] && runs+=("$RUNS/$name")
  done
fi
simulate fig3-k100-sim configs/paper/fig3-k100-sim.toml --set train.steps=$sim_steps
runs+=("$RUNS/fig3-k100-sim")
((${#runs[@]} > 1)) || die "no real run found in $RUNS" 66

{
  echo "# Figure 3: time to the k-th of K gradients of a step"
  echo
  echo "Real runs: configs/paper/fig3.toml (wall clock; $(head -n1 "$OUT/logs/load.txt"))."
  echo "Simulated: configs/paper/fig3-k100-sim.toml. Each table gives its run's steps."
  echo
  "$PYTHON" scripts/paper/tables.py kth "${runs[@]}"
} >"$OUT/tables.md" || die "tables.py failed" 70
for r in "${runs[@]}"; do
  "$PYTHON" scripts/plot.py "$r" --out "$OUT/$(basename "$r")" --dpi 90 >/dev/null ||
    die "plot.py $r failed" 70
done
"$PYTHON" scripts/plot.py --compare "${runs[@]}" --out "$OUT" --dpi 90 >/dev/null ||
  die "plot.py --compare failed" 70
rm -f "$OUT/compare_accuracy.png"   # one final evaluation per run: nothing to compare
cat "$OUT/tables.md"
paper_done
