#!/usr/bin/env bash
# The main job on the default data set: installs what is missing, builds, and
# trains the reference CNN on Fashion-MNIST. By default the paper's method
# under mpirun (configs/fmnist-sync.toml: 1 parameter server, 1 evaluator,
# 5 workers, sync with N = 4, b = 1), ending with the run's report.
# Usage: scripts/run.sh [CONFIG] [--set key=value ...]
#   SYNCOPT_NP=7 ranks for a distributed config (default 7); a config whose
#   train.mode is "local" runs as one process without mpirun.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
config=${1:-configs/fmnist-sync.toml}
shift || true
# A fresh run directory each time, so an earlier run is never overwritten.
name="$(basename "$config" .toml)-$(date +%Y%m%d-%H%M%S)"
mode=$(build/syncopt train "$config" "$@" --dry-run | sed -n 's/^mode = "\(.*\)"$/\1/p' | head -1)
if [ "$mode" = "local" ]; then
  exec build/syncopt train "$config" --set run.name="$name" "$@"
fi
# Open MPI as root (containers, CI) and more ranks than cores need these;
# they belong to the launcher, never to the binary.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
mpirun -np "${SYNCOPT_NP:-7}" build/syncopt train "$config" --set run.name="$name" "$@"
echo "plots: scripts/plot.py runs/$name"
