#!/usr/bin/env bash
# Stragglers on every path: plain allreduce (every step waits for the
# slowest rank), allreduce with a compute budget (train.compute_budget_ms
# with micro-batches: a slow rank joins with the micro-batches it finished,
# docs/design.md §3) and sync with backup workers (the paper's answer),
# under the same seeded stragglers, trained to the same examples: seconds a
# step, examples not computed or gradients dropped, test accuracy.
#
#   scripts/paper/stragglers.sh         K = 4 workers on this machine (sync: 1 + K ranks), the
#                                       CNN on Fashion-MNIST, half an epoch a run, ROUNDS = 2 rounds
#                                       run interleaved (every mode once a round, in turn, so
#                                       that a loaded machine's drift falls on all alike);
#                                       then K = 100 simulated (configs/sim-k100.toml's timing)
#   K=6 ROUNDS=3 EPOCHS=2 scripts/paper/stragglers.sh   another size
#   --no-run      the tables from the runs already in OUT/runs
#   --out DIR     (default runs/paper/stragglers)
#
# Stragglers, each a scenario of its own: none; "bernoulli" (every worker
# 4x slower with probability 20 % a step, seeded); "slow" (the last worker
# a persistent 3x machine). The budget is 1.05 x the median time a rank of
# the straggler-free allreduce took to its gradient (measured in round 1),
# and "auto" (the largest budget within 1 % of the best rate keeping 75 %
# of the examples). Writes OUT/table.md (also printed) and OUT/table.json.
source "$(dirname "$0")/common.sh"
paper_options stragglers "$@"
k=${K:-4}
rounds=${ROUNDS:-2}
epochs=${EPOCHS:-0.5}
cfg=configs/paper/stragglers.toml
common=(--set train.epochs="$epochs" --quiet)
declare -A scenario=(
  [none]="--set stragglers.model=none"
  [bernoulli]="--set stragglers.model=bernoulli --set stragglers.prob=0.2 --set stragglers.factor=4"
  [slow]="--set stragglers.model=fixed --set stragglers.factor=3 --set stragglers.workers=[$((k - 1))]"
)

# The median time to a rank's gradient in a straggler-free allreduce run (ms).
ready_ms() {
  "$PYTHON" - "$1" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1] + "/steps.jsonl")][10:]
print(round(1e3 * statistics.median(g["arrival_s"] for r in recs for g in r["grads"]), 3))
PY
}

if ((DO_RUN)); then
  for ((r = 1; r <= rounds; r++)); do
    for s in none bernoulli slow; do
      # shellcheck disable=SC2086  # the scenario's words
      train "$k" "r$r-$s-allreduce" "$cfg" "${common[@]}" ${scenario[$s]}
      if [ "$s" = none ] && [ -z "${budget:-}" ]; then
        budget=$(ready_ms "$RUNS/r$r-none-allreduce")
        budget=$("$PYTHON" -c "print(round(1.05 * $budget, 2))")
        echo "  budget: $budget ms (1.05 x the straggler-free median time to a gradient)"
        echo "$budget" >"$OUT/budget_ms.txt"
      fi
      budget=${budget:-$(cat "$OUT/budget_ms.txt")}
      # shellcheck disable=SC2086
      train "$k" "r$r-$s-budget" "$cfg" "${common[@]}" ${scenario[$s]} \
        --set train.micro_batch=16 --set train.compute_budget_ms="$budget"
      # shellcheck disable=SC2086
      train "$k" "r$r-$s-auto" "$cfg" "${common[@]}" ${scenario[$s]} \
        --set train.micro_batch=16 --set train.compute_budget_ms=auto
      # shellcheck disable=SC2086
      train $((k + 1)) "r$r-$s-sync-b1" "$cfg" "${common[@]}" ${scenario[$s]} \
        --set train.mode=sync --set train.backups=1 --set optim.scale_lr_by_n=false
    done
  done
  # K = 100, simulated: configs/sim-k100.toml's cluster (1 s compute, cv 0.1,
  # 20 ms overhead, 40 Gb/s, 25 M floats, 10 shards), the same three
  # scenarios; the budget 1.05 x (1000 + 20) ms, sync with b = 4 and 20.
  sim100=(configs/sim-k100.toml --set train.steps=300
          --set stragglers.seed=1 --set sim.records=shard0)
  sim_sc() {
    case $1 in
      none) echo "--set stragglers.model=none" ;;
      bernoulli) echo "--set stragglers.model=bernoulli --set stragglers.prob=0.2 --set stragglers.factor=4" ;;
      slow) echo "--set stragglers.model=fixed --set stragglers.factor=3 --set stragglers.workers=[99]" ;;
    esac
  }
  for s in none bernoulli slow; do
    # shellcheck disable=SC2046
    simulate "k100-$s-allreduce" "${sim100[@]}" $(sim_sc $s) --set train.mode=allreduce
    # shellcheck disable=SC2046
    simulate "k100-$s-budget" "${sim100[@]}" $(sim_sc $s) --set train.mode=allreduce \
      --set train.micro_batch=8 --set train.compute_budget_ms=1071
    # shellcheck disable=SC2046
    simulate "k100-$s-auto" "${sim100[@]}" $(sim_sc $s) --set train.mode=allreduce \
      --set train.micro_batch=8 --set train.compute_budget_ms=auto
    # shellcheck disable=SC2046
    for b in 4 20; do
      # shellcheck disable=SC2046
      simulate "k100-$s-sync-b$b" "${sim100[@]}" $(sim_sc $s) --set train.mode=sync \
        --set train.backups=$b
    done
  done
fi
paper_stop_clock
"$PYTHON" scripts/paper/stragglers_table.py "$RUNS" "$rounds" "$k" "$OUT/logs/load.txt" \
  --json "$OUT/table.json" | tee "$OUT/table.md"
paper_done
