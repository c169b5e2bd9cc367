#!/usr/bin/env bash
# The libFuzzer targets of tests/fuzz (CTest label fuzz):
#   tests/fuzz/run.sh build BUILD_DIR
#       configures and builds them with clang into BUILD_DIR (CTest fuzz_build)
#   tests/fuzz/run.sh run BUILD_DIR TARGET SECONDS
#       replays every kept input of tests/fuzz/corpus/TARGET (seeds and the
#       regression cases of crashes found and fixed), then fuzzes for
#       SECONDS from them, new inputs going to a scratch folder; prints the
#       executions and the corpus size; fails on a crash, a leak, a timeout or
#       a sanitizer report, leaving the input in BUILD_DIR/findings/TARGET.
# SKIP (77) without clang++ or libFuzzer's runtime (libclang-rt-14-dev).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
CMD=$1
B=$2
if ! command -v clang++ >/dev/null; then echo "SKIP: no clang++ (scripts/setup.sh installs clang)"; exit 77; fi
if ! clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a | grep -q /; then
  echo "SKIP: no libFuzzer runtime (libclang-rt-14-dev)"
  exit 77
fi
case "$CMD" in
build)
  # A compiler launcher (ccache) comes from $CMAKE_CXX_COMPILER_LAUNCHER, as CMake reads it.
  cmake -S "$HERE" -B "$B" -DCMAKE_BUILD_TYPE=None -DCMAKE_CXX_COMPILER=clang++ >/dev/null &&
    cmake --build "$B" -j "${FUZZ_JOBS:-2}"
  ;;
run)
  T=$3
  SECONDS_=$4
  [ -x "$B/$T" ] || { echo "FAIL: $B/$T not built (CTest fuzz_build)"; exit 1; }
  KEPT=$HERE/corpus/$T
  NEW=$B/corpus/$T
  FOUND=$B/findings/$T
  rm -rf "$NEW" "$FOUND"
  mkdir -p "$NEW" "$FOUND"
  # Every kept input once: a regression case that crashes again fails here.
  mapfile -t inputs < <(find "$KEPT" -type f | sort)
  if ((${#inputs[@]})); then
    "$B/$T" -runs=1 "${inputs[@]}" >"$B/$T.replay.log" 2>&1 ||
      { tail -40 "$B/$T.replay.log"; echo "FAIL: a kept input of $KEPT crashes $T"; exit 1; }
    echo "$T: ${#inputs[@]} kept inputs replayed"
  fi
  "$B/$T" -max_total_time="$SECONDS_" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
    -print_final_stats=1 -artifact_prefix="$FOUND/" "$NEW" "$KEPT" >"$B/$T.log" 2>&1
  RC=$?
  EXECS=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$B/$T.log" | grep -o '[0-9]*$')
  echo "$T: ${EXECS:-?} executions in $SECONDS_ s, $(find "$NEW" -type f | wc -l) new corpus inputs"
  if [ $RC != 0 ] || [ -n "$(ls -A "$FOUND")" ]; then
    grep -E "ERROR|SUMMARY|==[0-9]+==|terminate|what\(\)" "$B/$T.log" | head -20
    echo "FAIL: $T found an input that breaks it: $(ls "$FOUND")"
    exit 1
  fi
  ;;
*)
  echo "usage: $0 build BUILD_DIR | run BUILD_DIR TARGET SECONDS" >&2
  exit 2
  ;;
esac
