#!/usr/bin/env bash
# The N/b trade-off of the paper's section 4: for K workers and N from small
# to K (b = K - N), the updates to a target test accuracy I(N) and the
# seconds per update T(N, b); then `syncopt plan` on those runs (its choice
# of N for K), and `syncopt plan -K 100` with the paper's own I(N) (137.5k
# updates at N = 50, 76.2k at N = 100) twice: T(N, b) from per-N simulation,
# and read off one simulated b = 0 run as the paper did.
#
#   scripts/paper/nb_tradeoff.sh          K = 6, N = 2..6 on the virtual clock, the CNN on
#                                         Fashion-MNIST, 0.75 epoch each (~4 minutes here)
#   scripts/paper/nb_tradeoff.sh --full   K = 24, N = 4..24, 3 epochs (configs/sweeps/paper-nb-tradeoff.txt)
#   scripts/paper/nb_tradeoff.sh --full --no-run --runs runs   after
#       sbatch --array=0-6 --ntasks=25 scripts/slurm/sweep.sbatch configs/sweeps/paper-nb-tradeoff.txt
#   --out DIR (default runs/paper/nb-tradeoff, runs/paper-full/nb-tradeoff)
#   TARGET=0.88 scripts/paper/nb_tradeoff.sh --no-run   another target, same runs
#
# Config: configs/paper/nb-tradeoff.toml (bernoulli stragglers p = 10 %, x4).
# Writes OUT/tables.md (the measured table and the plans), OUT/plan-kK.json,
# OUT/plan-kK.png, OUT/plan-k100.json, OUT/plan-k100-b0.json, OUT/plan-k100.png and plot.py
# --compare's figures of the runs.
source "$(dirname "$0")/common.sh"
paper_options nb-tradeoff "$@"
target=${TARGET:-0.875}

runs=()
if ((FULL)); then
  k=24
  sweep=configs/sweeps/paper-nb-tradeoff.txt
  ((DO_RUN)) && run_sweep "$sweep" .
  for name in $(sweep_names "$sweep"); do runs+=("$RUNS/$name"); done
else
  k=6
  for n in 2 3 4 5 6; do
    train $((k + 1)) nb-k6-n$n configs/paper/nb-tradeoff.toml --set train.backups=$((k - n))
    runs+=("$RUNS/nb-k6-n$n")
  done
fi
for r in "${runs[@]}"; do
  [ "$(run_status "$r")" = completed ] || die "run $r missing or not completed" 66
done

sim_steps=300
simulate fig3-k100-b0 configs/paper/fig3-k100-sim.toml --set train.steps=$sim_steps
{
  echo "# The N/b trade-off"
  echo
  echo "K = $k, configs/paper/nb-tradeoff.toml, virtual clock."
  echo
  "$PYTHON" scripts/paper/tables.py nb "${runs[@]}" --target "$target"
  echo
  echo "\`syncopt plan -K $k --runs ${runs[*]##*/} --target-acc $target --ema\`:"
  echo
  echo '```'
  "$SYNCOPT" plan -K $k --runs "${runs[@]}" --target-acc "$target" --ema --out "$OUT/plan-k$k.json" ||
    die "syncopt plan -K $k failed" 70
  echo '```'
  echo
  echo "\`syncopt plan -K 100 --sim configs/paper/fig3-k100-sim.toml --set train.steps=$sim_steps --iters 14900,6130000\`:"
  echo
  echo '```'
  "$SYNCOPT" plan -K 100 --sim configs/paper/fig3-k100-sim.toml --set train.steps=$sim_steps \
    --iters 14900,6130000 --out "$OUT/plan-k100.json" || die "syncopt plan -K 100 failed" 70
  echo '```'
  echo
  echo "The paper's estimator: T(N, b) read off one b = 0 run of K = 100 (its time to the N-th gradient):"
  echo "\`syncopt plan -K 100 --runs fig3-k100-b0 --iters 14900,6130000\`:"
  echo
  echo '```'
  "$SYNCOPT" plan -K 100 --runs "$RUNS/fig3-k100-b0" --iters 14900,6130000 \
    --out "$OUT/plan-k100-b0.json" || die "syncopt plan -K 100 --runs failed" 70
  echo '```'
} >"$OUT/tables.md" || die "the tables failed" 70
"$PYTHON" scripts/plot_plan.py "$OUT/plan-k$k.json" --out "$OUT/plan-k$k.png" >/dev/null &&
  "$PYTHON" scripts/plot_plan.py "$OUT/plan-k100.json" --out "$OUT/plan-k100.png" >/dev/null ||
  die "plot_plan.py failed" 70
"$PYTHON" scripts/plot.py --compare "${runs[@]}" --out "$OUT" --dpi 90 >/dev/null ||
  die "plot.py --compare failed" 70
cat "$OUT/tables.md"
paper_done
