#!/usr/bin/env bash
# Real links against the simulator (root): sync SGD over hosts made of
# network namespaces (tests/cluster/cluster.sh) whose links are capped with a
# token bucket (tc tbf, both directions), against `syncopt simulate` given
# the same link rate, the same layout and the compute and apply times the
# real run measured. Prints one line per case and the ratio simulated /
# real of the median step time (steps after the first two).
#
#   bench/links_vs_sim.sh [options] SYNCOPT_BINARY
#     --rates 100,400        link rates, Mbit/s
#     --shards 1,2,4         parameter-server shards (whole layers, by bytes)
#     --pipeline on,off      exchange.pipeline
#     --placement own        own: every shard on a host of its own; shared: all
#                            shards on one host, sharing its link
#     --workers 2            K workers, each on a host of its own (b = 0)
#     --model resnet18       model.name (resnet18: 11.2 M parameters, 45 MB a gradient)
#     --batch 4  --steps 8   per worker; updates per run
#     --sharing fair         sim.link_sharing, one simulation of each real run
#                            per value listed (serial,fair: both models):
#                            fair (the connections in flight share a link, as
#                            TCP does), serial (one message at a time)
#     --json FILE            every case's figures as JSON lines
#     --max-ratio-error E    exit 1 when a case's |sim / real - 1| > E for any
#                            model listed (tests)
#     --budget S             end (removing the cluster) after S seconds (tests)
#
# Each run's real step time includes everything a run pays (the transfers,
# the compute, the shard's update); the simulation is given the link's rate
# of payload (sim.bandwidth_gbps is the payload's, docs/design.md §10): tbf
# counts whole Ethernet frames, and a 1514-byte frame carries 1448 bytes of
# TCP payload (IP, TCP with timestamps, Ethernet headers), so 95.6 % of the
# tbf rate; latency 100 us; the worker's compute and the shard's apply time
# from the run's summary.json (compute_time_p50_s, apply_time_p50_s), no
# overhead: what is left to the network model is the network.
set -uo pipefail
RATES=100,400 SHARDS=1,2,4 PIPELINE=on,off PLACEMENT=own WORKERS=2 MODEL=resnet18
# TCP payload per byte tbf counts: 1448 of a 1514-byte frame (MTU 1500).
PAYLOAD=$(python3 -c "print(1448 / 1514)")
BATCH=4 STEPS=8 SHARING=fair JSON="" MAXERR="" BUDGET=0
while [ $# -gt 1 ]; do
  case $1 in
    --rates) RATES=$2 ;;
    --shards) SHARDS=$2 ;;
    --pipeline) PIPELINE=$2 ;;
    --placement) PLACEMENT=$2 ;;
    --workers) WORKERS=$2 ;;
    --model) MODEL=$2 ;;
    --batch) BATCH=$2 ;;
    --steps) STEPS=$2 ;;
    --sharing) SHARING=$2 ;;
    --json) JSON=$2 ;;
    --max-ratio-error) MAXERR=$2 ;;
    --budget) BUDGET=$2 ;;
    *) echo "links_vs_sim: unknown option $1 (see the header of $0)" >&2; exit 64 ;;
  esac
  shift 2
done
BIN=$(realpath "${1:?usage: bench/links_vs_sim.sh [options] SYNCOPT_BINARY}")
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ "$(id -u)" -eq 0 ] || { echo "links_vs_sim: SKIP: network namespaces need root" >&2; exit 77; }
# shellcheck source=tests/cluster/cluster.sh
source "$SRC/tests/cluster/cluster.sh"
WORK=$(mktemp -d /var/tmp/syncopt-links-XXXXXX)
# shellcheck disable=SC2317  # run by the trap
finish() {
  local rc=$?
  trap - EXIT TERM INT
  if [ -n "${WATCHDOG:-}" ]; then pkill -P "$WATCHDOG" 2>/dev/null; kill "$WATCHDOG" 2>/dev/null; fi
  cluster_down || rc=1
  [ -n "${KEEP:-}" ] || rm -rf "$WORK"
  exit "$rc"
}
trap finish EXIT
trap 'echo "links_vs_sim: past its budget of ${BUDGET}s" >&2; exit 1' TERM INT
if ((BUDGET > 0)); then
  (sleep "$BUDGET" && kill -TERM $$) 2>/dev/null &
  WATCHDOG=$!
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
[ -n "$JSON" ] && : >"$JSON"
IFS=, read -r -a sharings <<<"$SHARING"
head=$(printf '%-6s %-7s %-2s %-8s %10s %8s %8s' Mbit/s place S pipeline "real s" compute apply)
for m in "${sharings[@]}"; do head+=$(printf ' %10s %7s' "sim $m" ratio); done
echo "$head"
bad=0
IFS=, read -r -a rates <<<"$RATES"
IFS=, read -r -a shard_counts <<<"$SHARDS"
IFS=, read -r -a pipes <<<"$PIPELINE"
for s in "${shard_counts[@]}"; do
  # Hosts: the shards' (S, or one), then one per worker.
  shard_hosts=$s
  [ "$PLACEMENT" = shared ] && shard_hosts=1
  hosts=$((shard_hosts + WORKERS))
  cluster_up "$hosts" || exit 1
  : >"$WORK/hosts"
  for i in $(seq "$shard_hosts"); do echo "node$i slots=$((s / shard_hosts))" >>"$WORK/hosts"; done
  for i in $(seq $((shard_hosts + 1)) "$hosts"); do echo "node$i slots=1" >>"$WORK/hosts"; done
  for rate in "${rates[@]}"; do
    for i in $(seq "$hosts"); do cluster_rate "$i" "${rate}mbit" || exit 1; done
    for pipe in "${pipes[@]}"; do
      name=r${rate}-s$s-p$pipe
      p=true
      [ "$pipe" = off ] && p=false
      common=(--set model.name="$MODEL" --set data.name=synthetic --set data.synthetic_train=512
        --set data.synthetic_test=64 --set train.mode=sync --set train.backups=0 --set train.batch="$BATCH"
        --set train.steps="$STEPS" --set cluster.ps="$s" --set cluster.evaluator=false
        --set exchange.pipeline="$p" --set cluster.dead_after_s=120 --set eval.every_s=0)
      # As scripts/run.sh launches (the outcome is summary.json's).
      cluster_exec 1 mpirun --enable-recovery --mca orte_abort_on_non_zero_status 0 \
        --mca orte_allowed_exit_without_sync 1 "${CLUSTER_MPI[@]}" --hostfile "$WORK/hosts" \
        -np $((s + WORKERS)) "$BIN" train "$SRC/configs/smoke.toml" ${QUIET---quiet} "${common[@]}" \
        --set run.dir="$WORK" --set run.name="$name" >"$WORK/$name.log" 2>&1
      python3 -c "import json,sys; sys.exit(json.load(open('$WORK/$name/summary.json'))['exit_code'])" 2>/dev/null ||
        { echo "links_vs_sim: the run $name failed:" >&2; grep -v "^\s*$" "$WORK/$name.log" | head -30 >&2; exit 1; }
      read -r real compute apply < <(python3 - "$WORK/$name" <<'PY'
import json, statistics, sys
d = json.load(open(sys.argv[1] + "/summary.json"))
t = [json.loads(l)["t_apply"] for l in open(sys.argv[1] + "/steps.jsonl") if json.loads(l)["shard"] == 0]
steps = [b - a for a, b in zip(t, t[1:])][2:]
print(statistics.median(steps), d["compute_time_p50_s"], d["apply_time_p50_s"] or 0)
PY
)
      sph=1
      [ "$PLACEMENT" = shared ] && sph=$s
      line=$(printf '%-6s %-7s %-2s %-8s %10.3f %8.3f %8.4f' "$rate" "$PLACEMENT" "$s" "$pipe" "$real" "$compute" "$apply")
      for m in "${sharings[@]}"; do
        "$BIN" simulate "$SRC/configs/smoke.toml" "${common[@]}" --set run.dir="$WORK" --set run.name="$name-sim-$m" \
          --set train.steps=$((STEPS * 4)) --set sim.workers="$WORKERS" \
          --set sim.compute_ms="$(python3 -c "print($compute * 1000)")" --set sim.compute_cv=0 \
          --set sim.overhead_ms=0 --set sim.apply_ms="$(python3 -c "print($apply * 1000)")" \
          --set sim.poll_max_us=0 --set sim.latency_us=100 --set sim.bandwidth_gbps="$(python3 -c "print($rate / 1000 * $PAYLOAD)")" \
          --set sim.shards_per_host="$sph" --set sim.workers_per_host=1 \
          --set sim.link_sharing="$m" >"$WORK/$name-sim-$m.log" 2>&1 ||
          { echo "links_vs_sim: the simulation $name ($m) failed:" >&2; tail -20 "$WORK/$name-sim-$m.log" >&2; exit 1; }
        sim=$(python3 -c "import json; print(json.load(open('$WORK/$name-sim-$m/summary.json'))['step_time_p50_s'])")
        ratio=$(python3 -c "print(f'{$sim / $real:.3f}')")
        line+=$(printf ' %10.3f %7s' "$sim" "$ratio")
        [ -n "$JSON" ] && echo "{\"mbit\": $rate, \"placement\": \"$PLACEMENT\", \"shards\": $s, \"pipeline\": \"$pipe\", \"workers\": $WORKERS, \"model\": \"$MODEL\", \"batch\": $BATCH, \"real_step_s\": $real, \"sim_step_s\": $sim, \"compute_s\": $compute, \"apply_s\": $apply, \"sharing\": \"$m\", \"ratio\": $ratio}" >>"$JSON"
        if [ -n "$MAXERR" ] && ! python3 -c "import sys; sys.exit(0 if abs($ratio - 1) <= $MAXERR else 1)"; then
          echo "links_vs_sim: $name: simulated ($m) / real = $ratio, beyond 1 +- $MAXERR" >&2
          bad=1
        fi
      done
      echo "$line"
    done
  done
  cluster_down || exit 1
done
exit "$bad"
