#!/usr/bin/env bash
# Steady-state step time of two syncopt binaries, alternated in one session
# (the machine is shared and noisy, so only the ratio means much). Used to
# check that a change in the distributed path (e.g. the liveness heartbeats)
# does not slow the step: run the binary from before the change as A and the
# current one as B.
#
#   bench/step_time_ab.sh A_BINARY B_BINARY [ROUNDS] [NP] [--set key=value ...]
#   A_ARGS / B_ARGS: extra arguments for one binary only, e.g.
#   B_ARGS="--set run.tensorboard=false" when A predates that key.
#
# Each round runs A then B (then B then A on the next, so neither always goes
# first) under mpirun with NP ranks (default 2: one parameter server and one
# worker, one core each), configs/fmnist-sync.toml with the evaluator off,
# b = 0 and 300 steps; prints every run's step_time_p50_s from its
# summary.json with where a step goes (the last accepted gradient's compute
# and exchange, the shard's update: medians from steps.jsonl), the median per binary and
# B / A.
set -euo pipefail
cd "$(dirname "$0")/.."
a=$1 b=$2 rounds=${3:-5} np=${4:-2}
shift $(($# < 4 ? $# : 4))
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
out=$(mktemp -d /tmp/syncopt-ab.XXXXXX)
trap 'rm -rf "$out"' EXIT
workers=$((np - 1))
run() {  # run LABEL BINARY ROUND EXTRA...
  mpirun -np "$np" "$2" train configs/fmnist-sync.toml -q \
    --set run.dir="$out" --set run.name="$1-$3" --set cluster.evaluator=false \
    --set train.backups=0 --set train.steps=300 \
    --set run.checkpoint_every_s=0 "${@:4}" >"$out/$1-$3.log" 2>&1 ||
    { echo "run $1-$3 failed:"; tail -5 "$out/$1-$3.log"; exit 1; }
  python3 - "$out/$1-$3" <<'PY'
import json, statistics, sys
d = sys.argv[1]
p50 = json.load(open(d + "/summary.json"))["step_time_p50_s"]
# Where a step goes, from the records (the last accepted gradient of each
# step, after 50 steps of warm-up): its compute, its exchange (pull + push:
# arrival - compute) and the shard's update after it.
recs = [json.loads(l) for l in open(d + "/steps.jsonl")][50:]
g = [max((x for x in r["grads"] if x["accepted"]), key=lambda x: x["arrival_s"]) for r in recs]
med = lambda xs: statistics.median(xs) * 1e3
print(p50, med([x["compute_s"] for x in g]), med([x["arrival_s"] - x["compute_s"] for x in g]),
      med([r["t_apply"] - r["t_start"] - x["arrival_s"] for r, x in zip(recs, g)]))
PY
}
declare -a ta tb
for ((r = 1; r <= rounds; r++)); do
  # shellcheck disable=SC2086  # A_ARGS/B_ARGS are word lists
  if ((r % 2)); then x=$(run A "$a" "$r" "$@" ${A_ARGS:-}); y=$(run B "$b" "$r" "$@" ${B_ARGS:-})
  else y=$(run B "$b" "$r" "$@" ${B_ARGS:-}); x=$(run A "$a" "$r" "$@" ${A_ARGS:-}); fi
  read -r x cxa exa apa <<<"$x"
  read -r y cxb exb apb <<<"$y"
  ta+=("$x"); tb+=("$y")
  printf 'round %d: A %.2f ms (compute %.2f, exchange %.2f, update %.2f)  B %.2f ms (%.2f, %.2f, %.2f)  load %s\n' \
    "$r" "$(bc -l <<<"$x*1000")" "$cxa" "$exa" "$apa" "$(bc -l <<<"$y*1000")" "$cxb" "$exb" "$apb" "$(cut -d' ' -f1 /proc/loadavg)"
done
python3 - "${ta[*]}" "${tb[*]}" <<'PY'
import statistics, sys
a = [float(x) for x in sys.argv[1].split()]
b = [float(x) for x in sys.argv[2].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"median step time p50: A {ma*1e3:.2f} ms, B {mb*1e3:.2f} ms; B / A = {mb/ma:.3f}")
PY
