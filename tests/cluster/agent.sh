#!/usr/bin/env bash
# An ssh stand-in for Open MPI's launch agent (--mca plm_rsh_agent) on the
# test cluster of tests/cluster/cluster.sh: `agent.sh [ssh options] nodeI
# COMMAND...` runs COMMAND, as ssh would, with sh on node I: in that host's
# network namespace (CLUSTER_PREFIX, from the environment mpirun passes on),
# a UTS namespace whose host name is nodeI, and a mount namespace where
# /etc/hosts is the cluster's (/etc/netns/NS/hosts).
# `agent.sh --exec nodeI PROGRAM ARGS...` runs PROGRAM there as given, not
# through sh (cluster_exec).
set -u
direct=0
while [ $# -gt 0 ]; do
  case $1 in
    --exec) direct=1; shift ;;
    -[oplFiJ]) shift 2 ;;  # ssh options with an argument: nothing to do here
    -*) shift ;;
    *) break ;;
  esac
done
host=${1:?agent.sh: no host}
shift
case $host in
  node[0-9]*) ns=${CLUSTER_PREFIX:?agent.sh: CLUSTER_PREFIX is not set}h${host#node} ;;
  *) echo "agent.sh: $host is not a host of the test cluster (node1, node2, ...)" >&2; exit 255 ;;
esac
[ -e "/run/netns/$ns" ] || { echo "agent.sh: no network namespace $ns for $host" >&2; exit 255; }
if ((direct)); then
  set -- "$@"
else
  # ssh joins its arguments with spaces and gives them to the remote shell.
  set -- sh -c "$*"
fi
exec nsenter --net="/run/netns/$ns" unshare --uts --mount --propagation private \
  sh -c 'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
  agent "$ns" "$host" "$@"
