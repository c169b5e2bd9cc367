// The simulation of allreduce (see allreduce.hpp).
#include "sim/allreduce.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/error.hpp"
#include "worker/budget.hpp"

namespace syncopt::sim {

double ring_allreduce_s(const NetworkParams& net, int ranks, std::size_t floats) {
  if (ranks < 2) return 0.0;
  const double rounds = 2.0 * (ranks - 1);
  const double chunk = 4.0 * static_cast<double>(floats) / ranks;
  return rounds * (net.latency_s + (net.bytes_per_s > 0.0 ? chunk / net.bytes_per_s : 0.0));
}

namespace {

// One rank's step: when its gradient is ready (seconds from the step's
// start), its pure compute, the examples it computed, its seconds per
// example.
struct RankStep {
  double ready_s = 0.0, compute_s = 0.0, per_example_s = 0.0;
  int examples = 0;
};

// As train/allreduce.cpp's compute_micro() under the virtual clock: the
// modelled compute of the batch spread over its micro-batches by examples,
// a straggler's lateness with it, the budget deciding each next one.
RankStep rank_step(const AllreduceSimSetup& st, const worker::ComputeBudget& budget, int r,
                   std::uint64_t seq) {
  TimingModel::Draw d;
  d.worker = r;
  d.seq = seq;
  d.round = seq;
  d.group = st.workers;
  d.workers = st.workers;
  const double c = st.timing.compute_s(d);
  const double overhead = st.timing.overhead_s_of(d);
  const worker::Slowdown slow =
      st.stragglers != nullptr ? st.stragglers->slowdown(r, seq) : worker::Slowdown{};
  RankStep out;
  if (!budget.micro()) {
    out.compute_s = c;
    out.examples = static_cast<int>(st.train.batch);
    out.ready_s = overhead + c + slow.late_s(c, 1.0);
    out.per_example_s = (out.ready_s - overhead) / out.examples;
    return out;
  }
  worker::StragglerPacer pacer;
  pacer.start(slow);
  const auto batch = static_cast<double>(st.train.batch);
  double work = 0.0, elapsed = overhead, last = 0.0;
  int done = 0;
  do {
    const double t0 = elapsed;
    const int m = budget.size_of(done);
    work += c * m / batch;
    (void)pacer.due_s(work, (budget.examples_of(done) + m) / batch);
    elapsed = overhead + work + pacer.slept_s();
    last = elapsed - t0;
    ++done;
  } while (budget.next(done, elapsed, last));
  out.examples = budget.examples_of(done);
  out.compute_s = work;
  out.ready_s = elapsed;
  out.per_example_s = (work + pacer.slept_s()) / out.examples;
  return out;
}

}  // namespace

SimResult simulate_allreduce(const AllreduceSimSetup& st) {
  if (st.workers < 1) throw ConfigError("simulation: allreduce needs at least one rank");
  worker::ComputeBudget budget(st.train);
  const double reduce_s =
      ring_allreduce_s(st.network, st.workers, st.param_count + (budget.micro() ? 1 : 0));
  const double apply_s = st.timing.apply_s;
  SimResult res;
  res.drops.assign(static_cast<std::size_t>(st.workers), 0);
  double now = 0.0;
  std::vector<RankStep> ranks(static_cast<std::size_t>(st.workers));
  std::vector<double> paces(ranks.size());
  for (std::uint64_t k = 1;; ++k) {
    if (st.target_examples > 0 ? res.examples >= st.target_examples : k > st.total_steps) break;
    double ready = 0.0;
    std::uint64_t examples = 0;
    for (int r = 0; r < st.workers; ++r) {
      auto& rs = ranks[static_cast<std::size_t>(r)];
      rs = rank_step(st, budget, r, k - 1);
      ready = std::max(ready, rs.ready_s);
      examples += static_cast<std::uint64_t>(rs.examples);
      paces[static_cast<std::size_t>(r)] = rs.per_example_s;
    }
    metrics::StepRecord rec;
    rec.step = k;
    rec.version = k - 1;
    rec.t_start = now;
    rec.t_apply = now + ready + reduce_s + apply_s;
    rec.lr = st.lr;
    rec.used = st.workers;
    for (int r = 0; r < st.workers; ++r) {
      const auto& rs = ranks[static_cast<std::size_t>(r)];
      metrics::GradRecord g;
      g.worker = r;
      g.arrival_s = rs.ready_s;
      g.version = k - 1;
      g.accepted = true;
      g.compute_s = rs.compute_s;
      g.seq = k - 1;
      if (budget.micro()) {
        g.examples = rs.examples;
        g.skipped = st.train.batch - rs.examples;
      }
      rec.grads.push_back(g);
    }
    now = rec.t_apply;
    res.steps = k;
    res.examples += examples;
    res.gradients += static_cast<std::uint64_t>(st.workers);
    res.end_s = now;
    budget.observe(paces);
    if (st.on_step) st.on_step(std::move(rec));
  }
  return res;
}

}  // namespace syncopt::sim
