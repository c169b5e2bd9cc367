#!/usr/bin/env bash
# Parameter-server shards against workers, simulated: the mean step time of
# sync SGD with S = 1 .. 37 shards at K = 53, 106 and 212 workers (N = 50,
# 100, 200 with b = 3, 6, 12), ResNet-18 (11.2 M parameters), beside the
# paper's 17, 27 and 37 parameter servers for those K. Four ways to place
# and send the parameters: "layers, pipelined" (whole parameter groups by
# bytes, per-bucket messages, shard 0 choosing every update's workers: as
# syncopt does by default), the same with each shard choosing alone
# (train.agree_shards = false), "layers" (exchange.pipeline = false) and
# "split" (sim.param_count: equal slices of floats, layers cut across
# shards, whole messages), to show what whole-layer placement costs.
#
#   scripts/paper/shards.sh         200 updates per run, 144 simulations: ~3 minutes here
#   scripts/paper/shards.sh --full  1000 updates per run, S = 1 .. 41 (41: ResNet-18's
#                                   parameter groups, the most shards whole layers allow)
#   scripts/paper/shards.sh --no-run   the table and figure from the runs already there
#   --out DIR (default runs/paper/shards, runs/paper-full/shards)
#
# Config: configs/paper/shards.toml (300 ms per gradient, Figure 3's
# stragglers, 40 Gbit/s links; its comments say why). The apply time of a
# shard is set to 45 ms / S (4 ns a float of its slice). Times are
# simulated, so the machine's load does not enter them. Writes OUT/tables.md,
# OUT/shards.json and OUT/shards.png.
source "$(dirname "$0")/common.sh"
paper_options shards "$@"

if ((FULL)); then
  steps=1000
  s_values=$(seq 1 41)
else
  steps=200
  s_values="1 2 3 4 6 8 10 13 17 20 27 37"
fi
# ResNet-18's floats: sim.param_count for the split placement.
floats=11172810
runs=()
for k in 53 106 212; do
  b=$((3 * k / 53))
  for s in $s_values; do
    apply=$(awk -v s="$s" 'BEGIN { printf "%.4f", 45.0 / s }')
    common=(configs/paper/shards.toml --set sim.workers=$k --set train.backups=$b
      --set cluster.ps=$s --set sim.apply_ms=$apply --set train.steps=$steps)
    simulate "shards-k$k-s$s-layers" "${common[@]}"
    simulate "shards-k$k-s$s-layers-alone" "${common[@]}" --set train.agree_shards=false
    simulate "shards-k$k-s$s-layers-nopipe" "${common[@]}" --set exchange.pipeline=false
    simulate "shards-k$k-s$s-split" "${common[@]}" --set sim.param_count=$floats
    runs+=("$RUNS/shards-k$k-s$s-layers" "$RUNS/shards-k$k-s$s-layers-alone"
      "$RUNS/shards-k$k-s$s-layers-nopipe" "$RUNS/shards-k$k-s$s-split")
  done
done
paper_stop_clock

{
  echo "# Parameter-server shards against workers (simulated)"
  echo
  echo "configs/paper/shards.toml, $steps updates per run; $(tr '\n' ';' <"$OUT/logs/load.txt")"
  echo
  "$PYTHON" scripts/paper/tables.py shards "${runs[@]}" --paper 53:17,106:27,212:37 \
    --json "$OUT/shards.json" --plot "$OUT/shards.png"
} >"$OUT/tables.md" || die "tables.py shards failed" 70
cat "$OUT/tables.md"
paper_done
