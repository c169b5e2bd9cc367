#!/usr/bin/env bash
# Evidence for docs/design.md §9: whether Open MPI's mpirun ends by itself
# while one of its daemons is unreachable. Three hosts of network namespaces
# (cluster.sh), six `sleep` ranks (two per host); 3 s in, node3's link goes
# down; node3's ranks end at 10 s, the others at 20 s. For each set of
# options it prints when the ranks it can reach ended, whether mpirun ended
# by itself within 40 s, and whether SIGTERM then ended it (else SIGKILL).
#
#   tests/cluster/mpirun_unreachable.sh      (root; about 3 minutes)
set -uo pipefail
DIR=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tests/cluster/cluster.sh
source "$DIR/cluster.sh"
trap 'cluster_down' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
KEEPALIVE="--mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 1 --mca oob_tcp_keepalive_probes 3"
cluster_up 3 || exit 1
printf 'node1 slots=2\nnode2 slots=2\nnode3 slots=2\n' >"/tmp/$CLUSTER_PREFIX.hosts"
trial() {
  local name=$1 t0 pid ended=""
  shift
  t0=$SECONDS
  # shellcheck disable=SC2016  # expanded by the ranks' shell
  cluster_exec 1 mpirun "${CLUSTER_MPI[@]}" "$@" --hostfile "/tmp/$CLUSTER_PREFIX.hosts" -np 6 \
    sh -c 'if [ "$(hostname)" = node3 ]; then sleep 10; else sleep 20; fi' >/dev/null 2>&1 &
  pid=$!
  sleep 3
  cluster_link 3 down
  while ((SECONDS - t0 < 40)); do
    kill -0 "$pid" 2>/dev/null || { ended="by itself after $((SECONDS - t0)) s"; break; }
    sleep 0.5
  done
  if [ -z "$ended" ]; then
    kill -TERM "$pid"
    sleep 3
    if kill -0 "$pid" 2>/dev/null; then
      kill -KILL "$pid"
      ended="not by itself in 40 s (the reachable ranks ended at 20 s); SIGTERM ignored, SIGKILL"
    else
      ended="not by itself in 40 s (the reachable ranks ended at 20 s); SIGTERM ended it"
    fi
  fi
  wait "$pid" 2>/dev/null
  echo "$name: mpirun ended $ended"
  cluster_link 3 up
  sleep 2
  # Whatever is left on node3 goes before the next trial.
  cluster_pids 3 | xargs -r kill -KILL 2>/dev/null
  sleep 1
}
# shellcheck disable=SC2086  # KEEPALIVE's words
{
  trial "--enable-recovery" --enable-recovery
  trial "--enable-recovery + keepalive 5/1/3" --enable-recovery $KEEPALIVE
  trial "keepalive 5/1/3, no recovery" $KEEPALIVE
}
rm -f "/tmp/$CLUSTER_PREFIX.hosts"
