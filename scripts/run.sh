#!/usr/bin/env bash
# The main job on the default data set: installs what is missing, builds, and
# trains the reference CNN on Fashion-MNIST with configs/fmnist-local.toml.
# Usage: scripts/run.sh [CONFIG] [--set key=value ...]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
config=${1:-configs/fmnist-local.toml}
shift || true
# A fresh run directory each time, so an earlier run is never overwritten.
name="$(basename "$config" .toml)-$(date +%Y%m%d-%H%M%S)"
exec build/syncopt train "$config" --set run.name="$name" "$@"
