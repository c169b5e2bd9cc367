#!/bin/bash
# The host of every rank when the parameter servers get a node of their own
# (train.sbatch with SYNCOPT_PS_NODE=own): one host name per line, in rank
# order, as srun --distribution=arbitrary reads SLURM_HOSTFILE and as an
# Open MPI hostfile fills its slots in order.
#
#   scripts/slurm/ps-node-hostfile.sh "NODE..." TASKS_PER_NODE SHARDS EVALUATOR [--mpirun]
#
# The first node runs the SHARDS parameter-server ranks (0..S-1) and the
# evaluator (EVALUATOR = 1: rank S), nothing else: their traffic (every
# worker's gradient in, parameters out) does not share a network link and a
# memory bus with workers. Every other node runs TASKS_PER_NODE workers. So
# the world is S + E + (nodes - 1) x TASKS_PER_NODE ranks, which stderr says.
# --mpirun writes an Open MPI hostfile instead ("host slots=K" per node).
# Exit 64 when the allocation cannot place it (one node, or S + E more than
# TASKS_PER_NODE).
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: ps-node-hostfile.sh \"NODE...\" TASKS_PER_NODE SHARDS EVALUATOR [--mpirun]" >&2
  exit 64
fi
read -r -a nodes <<<"$1"
per_node=$2 shards=$3 evaluator=$4 format=${5:-srun}
servers=$((shards + evaluator))
if ((${#nodes[@]} < 2)); then
  echo "ps-node-hostfile: the parameter servers' own node needs an allocation of 2 or more nodes (got ${#nodes[@]}: ${nodes[*]}); sbatch --nodes=3 ..." >&2
  exit 64
fi
if ((servers > per_node)); then
  echo "ps-node-hostfile: $shards shard(s) + $evaluator evaluator do not fit the $per_node tasks of one node" >&2
  exit 64
fi
world=$((servers + (${#nodes[@]} - 1) * per_node))
if [ "$format" = --mpirun ]; then
  echo "${nodes[0]} slots=$servers"
  for n in "${nodes[@]:1}"; do echo "$n slots=$per_node"; done
else
  for ((i = 0; i < servers; i++)); do echo "${nodes[0]}"; done
  for n in "${nodes[@]:1}"; do
    for ((i = 0; i < per_node; i++)); do echo "$n"; done
  done
fi
echo "world $world: ranks 0-$((servers - 1)) on ${nodes[0]}, $((world - servers)) workers on the other $((${#nodes[@]} - 1)) node(s)" >&2
