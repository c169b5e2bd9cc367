#!/usr/bin/env bash
# Installs what is missing, builds, checks that the build used no Debian
# package that setup.sh does not install, and runs the whole test suite
# through CTest.
# Usage: scripts/test.sh [extra ctest args, e.g. -L unit]
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
build=${SYNCOPT_BUILD_DIR:-build}
# A fresh machine has only what setup.sh installs: fail here, naming the
# package and the file that needs it, rather than on the next new machine.
python3 scripts/check-packages.py "$build"
# Open MPI refuses root and more ranks than cores unless told; CI runs as root
# on 2 cores. These belong to the harness, never to the binary.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
ctest --test-dir "$build" --output-on-failure -j2 "$@"
