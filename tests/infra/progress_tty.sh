#!/usr/bin/env bash
# Rank 0's progress as a person sees it (run.progress): one live line on a
# terminal, also under mpirun, whose ranks write to a pipe to mpirun; log
# lines into a file or a pipe; run.progress=lines/live force either. A
# terminal comes from script(1) (util-linux), which gives the command a pty.
#   tests/infra/progress_tty.sh SYNCOPT_BINARY
set -uo pipefail
BIN=$(realpath "$1")
SRC=$(cd "$(dirname "$0")/../.." && pwd)
command -v script >/dev/null || { echo "SKIP: no script(1) (util-linux)"; exit 77; }
WORK=$(mktemp -d /tmp/syncopt-progress-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
fail=0
# A short run named NAME; progress every 50 steps in lines mode, so 300 steps give 6.
job() {
  echo "train $SRC/configs/smoke.toml --set run.dir=$WORK --set run.name=$1 --set model.name=mlp" \
       "--set train.steps=300 --set eval.every_steps=100"
}
SYNC="--set train.mode=sync --set train.backups=1"

# What a person sees: the bytes the command wrote to its terminal (or file).
verdict() {  # verdict FILE -> live | lines | none
  python3 - "$1" <<'PY'
import re, sys
data = open(sys.argv[1], "rb").read()
live = re.search(rb"\rstep \d+/\d+ +\d+%  epoch [0-9.]+  loss [0-9.]+  \d+ ex/s  elapsed \S+  eta \S+\x1b\[K", data)
lines = re.search(rb"info: step \d+/\d+ \(", data)
print("live" if live and not lines else "lines" if lines and not live else "none" if not (live or lines) else "both")
PY
}
expect() {  # expect WHAT NAME FILE
  local got
  got=$(verdict "$3")
  if [ "$got" = "$1" ]; then
    echo "ok   $2: $got"
  else
    echo "FAIL $2: expected $1, got $got; output:"
    tr '\r\033' '~^' <"$3" | tail -20
    fail=1
  fi
}
in_pty() {  # in_pty OUT COMMAND: runs COMMAND with a pty as its terminal
  script -qec "$2" /dev/null </dev/null >"$1" 2>&1
}

in_pty "$WORK/1" "$BIN $(job r1)"
expect live "local run at a terminal" "$WORK/1"
"$BIN" $(job r2) >"$WORK/2" 2>&1
expect lines "local run into a file" "$WORK/2"
in_pty "$WORK/3" "mpirun -np 4 $BIN $(job r3) $SYNC"
expect live "mpirun -np 4 at a terminal (rank 0's stderr is a pipe to mpirun)" "$WORK/3"
in_pty "$WORK/4" "mpirun -np 4 $BIN $(job r4) $SYNC 2>$WORK/4.err"
cat "$WORK/4.err" >>"$WORK/4"
expect lines "mpirun -np 4 at a terminal, stderr into a file" "$WORK/4"
in_pty "$WORK/5" "mpirun -np 4 $BIN $(job r5) $SYNC 2>&1 | cat"
expect lines "mpirun -np 4 at a terminal, piped" "$WORK/5"
in_pty "$WORK/6" "mpirun -np 4 $BIN $(job r6) $SYNC --set run.progress=lines"
expect lines "run.progress=lines at a terminal" "$WORK/6"
"$BIN" $(job r7) --set run.progress=live >"$WORK/7" 2>&1
expect live "run.progress=live into a file" "$WORK/7"
# The live line ends with a newline before the report: nothing is drawn over.
grep -q "final test accuracy\|test accuracy" "$WORK/3" || { echo "FAIL: no report after the live line"; fail=1; }
# The last step's line stays on the screen: after "step 300/300" comes a
# newline, not the erase ("\r\e[K") that a final log line would do first.
for f in 1 3; do
  python3 - "$WORK/$f" <<'PY' || fail=1
import re, sys
data = open(sys.argv[1], "rb").read()
last = list(re.finditer(rb"\rstep 300/300 [^\r\n]*\x1b\[K", data))
after = data[last[-1].end():last[-1].end() + 4] if last else b""
ok = after.startswith(b"\n") or after.startswith(b"\r\n")
print(("ok  " if ok else "FAIL") + f" {sys.argv[1]}: the final line " +
      ("stays" if ok else f"is followed by {after!r}" if last else "was never drawn"))
sys.exit(0 if ok else 1)
PY
done
((fail)) && exit 1
echo "PASS"
