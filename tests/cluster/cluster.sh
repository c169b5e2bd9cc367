#!/usr/bin/env bash
# A cluster of H hosts on this machine, for tests (sourced, not run): each
# host a network namespace with its own address and, for every process the
# launch agent starts there, its own host name (a UTS namespace); one veth
# link per host to a bridge in a namespace of the test's own (the switch).
# Nothing of the machine's own network is touched: the addresses
# (10.77.0.0/24) exist only inside these namespaces. The file system is the
# machine's, so any directory stands for the shared file system all hosts
# see.
#
#   source tests/cluster/cluster.sh
#   cluster_up 3                      # node1 node2 node3, 10.77.0.1-3
#   cluster_exec 1 mpirun ... "${CLUSTER_MPI[@]}" ...   # a command on node1
#   cluster_link 2 down|up            # node2 cut off from the switch, or back
#   cluster_rate 2 100mbit            # node2's link capped (tbf), both ways
#   cluster_down                      # everything removed; fails if anything is left
#
# CLUSTER_MPI holds mpirun's options for this cluster: the launch agent
# (tests/cluster/agent.sh, an ssh stand-in that enters the host's
# namespaces), TCP only, and the private interface only for MPI's messages
# and Open MPI's own (btl_tcp_if_include, oob_tcp_if_include).
#
# Every namespace carries the pid of the shell that made it (so<PID>h1 ...);
# cluster_up first removes what a killed earlier test left (its pid gone),
# and cluster_down, which the caller's EXIT trap runs, kills every process
# still in the namespaces, deletes them and checks that nothing is left.

CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CLUSTER_PREFIX=so$$
CLUSTER_NET=10.77.0
CLUSTER_IF=cl0
CLUSTER_HOSTS=0

cluster_ns() { echo "${CLUSTER_PREFIX}h$1"; }
cluster_switch() { echo "${CLUSTER_PREFIX}sw"; }
cluster_addr() { echo "$CLUSTER_NET.$1"; }

# Removes namespaces (and their /etc/netns files) of tests whose shell is gone.
cluster_sweep_stale() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^so[0-9]+(h[0-9]+|sw)$'); do
    pid=${ns#so}
    pid=${pid%%[hs]*}
    kill -0 "$pid" 2>/dev/null && continue
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
}

# cluster_up H: hosts node1..nodeH at 10.77.0.1..H, linked to one bridge.
cluster_up() {
  local h=$1 i ns sw
  cluster_sweep_stale
  sw=$(cluster_switch)
  CLUSTER_HOSTS=$h
  ip netns add "$sw" || return 1
  ip -n "$sw" link add br0 type bridge || return 1
  ip -n "$sw" link set br0 up
  for i in $(seq "$h"); do
    ns=$(cluster_ns "$i")
    ip netns add "$ns" || return 1
    ip -n "$ns" link set lo up
    ip -n "$ns" link add "$CLUSTER_IF" type veth peer name "p$i" netns "$sw" || return 1
    ip -n "$ns" addr add "$(cluster_addr "$i")/24" dev "$CLUSTER_IF"
    ip -n "$ns" link set "$CLUSTER_IF" up
    ip -n "$sw" link set "p$i" master br0
    ip -n "$sw" link set "p$i" up
    # The host names of the cluster, for every process started on this
    # host (agent.sh bind-mounts it over /etc/hosts, as `ip netns exec` does).
    mkdir -p "/etc/netns/$ns"
    {
      echo "127.0.0.1 localhost"
      local j
      for j in $(seq "$h"); do echo "$(cluster_addr "$j") node$j"; done
    } >"/etc/netns/$ns/hosts"
  done
  # mpirun's options for this cluster (see the header).
  CLUSTER_MPI=(--mca plm_rsh_agent "$CLUSTER_DIR/agent.sh" --mca btl tcp,self
    --mca btl_tcp_if_include "$CLUSTER_IF" --mca oob_tcp_if_include "$CLUSTER_IF")
  export CLUSTER_PREFIX
}

# cluster_exec I COMMAND...: runs COMMAND on node I: in its network
# namespace, with its host name (a UTS namespace) and the cluster's
# /etc/hosts (bind-mounted in a mount namespace of its own). Not `ip netns
# exec`, which also remounts /sys for the namespace, without the cgroup
# file system that slurmd needs.
cluster_exec() {
  local i=$1
  shift
  "$CLUSTER_DIR/agent.sh" --exec "node$i" "$@"
}

# cluster_link I down|up: node I's link, at the switch's end.
cluster_link() { ip -n "$(cluster_switch)" link set "p$1" "$2"; }

# cluster_rate I RATE: node I's link capped to RATE (tc units: 100mbit) in
# both directions, a token bucket (tbf) at each end of its veth; "none"
# removes the caps.
cluster_rate() {
  local i=$1 rate=$2 burst
  tc -n "$(cluster_ns "$i")" qdisc del dev "$CLUSTER_IF" root 2>/dev/null
  tc -n "$(cluster_switch)" qdisc del dev "p$i" root 2>/dev/null
  [ "$rate" = none ] && return 0
  # A bucket of 1/200 s of the rate (at least 64 kB), queue of 50 ms.
  burst=$(python3 -c "import re;m=re.match(r'(\d+)(\w*)','$rate');r=int(m[1])*{'mbit':1e6,'gbit':1e9,'kbit':1e3}[m[2]];print(max(65536,int(r/8/200)))")
  tc -n "$(cluster_ns "$i")" qdisc add dev "$CLUSTER_IF" root tbf rate "$rate" burst "$burst" latency 50ms &&
    tc -n "$(cluster_switch)" qdisc add dev "p$i" root tbf rate "$rate" burst "$burst" latency 50ms
}

# The pids of every process on node I.
cluster_pids() { ip netns pids "$(cluster_ns "$1")" 2>/dev/null; }

# cluster_down: kills every process on every host, removes the namespaces
# and their files, and checks that none is left (status 1 and a message
# otherwise).
cluster_down() {
  local i ns left=0 pids
  [ "$CLUSTER_HOSTS" -gt 0 ] || return 0
  for i in $(seq "$CLUSTER_HOSTS"); do
    ns=$(cluster_ns "$i")
    pids=$(cluster_pids "$i")
    [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
  done
  for i in $(seq "$CLUSTER_HOSTS"); do
    ns=$(cluster_ns "$i")
    for _ in $(seq 50); do [ -z "$(cluster_pids "$i")" ] && break; sleep 0.1; done
    ip netns del "$ns" 2>/dev/null
    rm -rf "/etc/netns/$ns"
  done
  ip netns del "$(cluster_switch)" 2>/dev/null
  CLUSTER_HOSTS=0
  if ip netns list | grep -q "^$CLUSTER_PREFIX"; then
    echo "cluster: left behind: $(ip netns list | grep "^$CLUSTER_PREFIX" | tr '\n' ' ')" >&2
    left=1
  fi
  if compgen -G "/etc/netns/$CLUSTER_PREFIX*" >/dev/null; then
    echo "cluster: left behind: /etc/netns/$CLUSTER_PREFIX*" >&2
    left=1
  fi
  return "$left"
}
