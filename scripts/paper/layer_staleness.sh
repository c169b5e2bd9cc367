#!/usr/bin/env bash
# Staleness by layer under asynchronous SGD with per-layer updates (the
# paper's §2: with Inception's layers updated as their gradients arrive, the
# bottom layers were staler than the top ones, mean 39 against 14.5): ResNet-20
# on Fashion-MNIST, K asynchronous workers and one parameter server, each layer
# its own bucket of the pipelined exchange, applied on arrival
# (configs/paper/layer-staleness.toml). Writes the table of mean, median and
# p90 staleness per layer, bottom to top, beside the paper's numbers, and its
# figure.
#
#   scripts/paper/layer_staleness.sh            K = 16 (17 ranks on this machine),
#                                               1500 updates (a few minutes here)
#   scripts/paper/layer_staleness.sh --full     configs/paper/layer-staleness-full.toml,
#                                               K = 32 (33 ranks), 3 epochs of 60000 images
#   WORKERS=24 scripts/paper/layer_staleness.sh another K (at least 16)
#   --no-run --runs DIR   the table and figure from a run already there
#   --out DIR (default runs/paper/layer-staleness, runs/paper-full/layer-staleness)
#
# Wall clock (async has no virtual clock): the staleness of a layer counts
# the updates of that layer between the read of its parameters and the
# apply of its gradient, so it follows how many workers compute at once and
# how long a step's backward takes, both of which the load changes. The load
# average at the start and end goes into OUT/logs/load.txt and the table.
source "$(dirname "$0")/common.sh"
paper_options layer-staleness "$@"

if ((FULL)); then config=configs/paper/layer-staleness-full.toml workers=${WORKERS:-32}
else config=configs/paper/layer-staleness.toml workers=${WORKERS:-16}; fi
((workers >= 16)) || die "WORKERS=$workers: the study wants K >= 16" 64
name=$(basename "$config" .toml)-k$workers
train $((workers + 1)) "$name" "$config"

paper_stop_clock
{
  echo "# Staleness by layer, async with per-layer updates"
  echo
  echo "$config, K = $workers workers + 1 parameter server, wall clock."
  sed 's/^/    /' "$OUT/logs/load.txt"
  [ -f "$OUT/logs/times.txt" ] && sed 's/^/    /' "$OUT/logs/times.txt"
  echo
  "$PYTHON" scripts/paper/tables.py layers "$RUNS/$name" --plot "$OUT/layer-staleness.png"
} >"$OUT/tables.md" || die "tables.py layers failed" 70
cat "$OUT/tables.md"
paper_done
