#!/bin/bash
# scripts/slurm/ps-node-hostfile.sh, the placement of SYNCOPT_PS_NODE=own
# (train.sbatch): the host of every rank for srun --distribution=arbitrary,
# and the Open MPI hostfile, from a node list; the allocations it refuses.
# Needs no SLURM (a multi-node allocation cannot be had on the test machine).
set -uo pipefail
HOSTS=$(cd "$(dirname "$0")/../.." && pwd)/scripts/slurm/ps-node-hostfile.sh
fail=0
check() {  # check NAME EXPECTED_STDOUT EXPECTED_RC ARGS...
  local name=$1 want=$2 want_rc=$3 got rc
  shift 3
  got=$("$HOSTS" "$@" 2>/dev/null)
  rc=$?
  if [ "$got" = "$want" ] && [ "$rc" = "$want_rc" ]; then
    echo "ok   $name"
  else
    echo "FAIL $name: exit $rc (want $want_rc), got:"
    echo "$got" | sed 's/^/    /'
    fail=1
  fi
}
check "1 shard + evaluator, 3 nodes of 4" "$(printf 'n1\nn1\nn2\nn2\nn2\nn2\nn3\nn3\nn3\nn3')" 0 "n1 n2 n3" 4 1 1
check "2 shards, no evaluator, 2 nodes of 3" "$(printf 'a\na\nb\nb\nb')" 0 "a b" 3 2 0
check "the Open MPI hostfile" "$(printf 'n1 slots=2\nn2 slots=4\nn3 slots=4')" 0 "n1 n2 n3" 4 1 1 --mpirun
check "one node is refused" "" 64 "n1" 4 1 1
check "servers that do not fit a node are refused" "" 64 "n1 n2" 2 2 1
msg=$("$HOSTS" "n1" 4 1 1 2>&1 >/dev/null)
grep -q "2 or more nodes" <<<"$msg" || { echo "FAIL: the refusal does not say why: $msg"; fail=1; }
world=$("$HOSTS" "n1 n2 n3" 4 1 1 2>&1 >/dev/null)
grep -q "^world 10:" <<<"$world" || { echo "FAIL: world size not said: $world"; fail=1; }
((fail)) && exit 1
echo PASS
