// The compute budget of allreduce (worker::ComputeBudget, docs/design.md
// §3) on numbers worked out by hand, and its simulation
// (sim::simulate_allreduce): which micro-batches a rank computes, what
// "auto" chooses, and a straggler cut by the budget.
#include <catch2/catch.hpp>
#include <cmath>
#include <vector>

#include "sim/allreduce.hpp"
#include "worker/budget.hpp"

using syncopt::config::TrainConfig;
using syncopt::worker::ComputeBudget;

namespace {

TrainConfig micro(std::int64_t batch, std::int64_t m, syncopt::config::FloatOrAuto budget_ms) {
  TrainConfig t;
  t.mode = syncopt::config::Mode::kAllreduce;
  t.batch = batch;
  t.micro_batch = m;
  t.compute_budget_ms = budget_ms;
  return t;
}

}  // namespace

TEST_CASE("compute budget: micro-batch sizes, and the next one only if it ends in time",
          "[budget]") {
  const ComputeBudget b(micro(10, 4, 10.0));
  REQUIRE(b.micro());
  CHECK(b.micro_batches() == 3);
  CHECK(b.size_of(0) == 4);
  CHECK(b.size_of(2) == 2);  // the last takes what is left
  CHECK(b.examples_of(2) == 8);
  CHECK(b.examples_of(3) == 10);
  CHECK(b.budget_s() == Approx(0.010));
  // 1 ms per example: after 4 ms the next 4 end at 8 ms; after 8 ms the
  // last 2 end at 10 ms, on the budget; after 9 ms they would not.
  CHECK(b.next(1, 0.004, 0.004));
  CHECK(b.next(2, 0.008, 0.004));
  CHECK_FALSE(b.next(2, 0.009, 0.004));
  CHECK_FALSE(b.next(3, 0.001, 0.001));  // none left
  // A slow rank stops after its first micro-batch, however late.
  CHECK_FALSE(b.next(1, 0.030, 0.030));
  // Without a budget every micro-batch is computed (gradient accumulation).
  const ComputeBudget all(micro(10, 4, 0.0));
  CHECK(std::isinf(all.budget_s()));
  CHECK(all.next(1, 10.0, 10.0));
  CHECK_FALSE(ComputeBudget(micro(10, 0, 0.0)).micro());
}

TEST_CASE("compute budget auto: the largest budget within 1 % of the best rate that keeps enough",
          "[budget]") {
  // Batch 8 in micro-batches of 2; three ranks at 1 ms per example, one at
  // 3 ms. Micro-batches end at 2, 4, 6, 8 ms (fast) and 6, 12, 18, 24
  // (slow). Budget 6: 3 x 6 + 2 = 20 of 32 examples in 6 ms, 3.33 a ms;
  // 8: 3 x 8 + 2 = 26 in 8 ms, 3.25; 12: 28 in 12, 2.33; 4: 14 in 6 (the
  // slow rank's first micro-batch), 2.33. The best is 6 ms, but it keeps
  // 62.5 %: with compute_budget_keep = 0.75 the choice is 8 ms (81 %), with
  // 0.5 it is 6 ms.
  for (const double keep : {0.75, 0.5}) {
    TrainConfig t = micro(8, 2, syncopt::config::AutoCount{});
    t.compute_budget_keep = keep;
    ComputeBudget b(t);
    CHECK(std::isinf(b.budget_s()));  // nothing observed yet: no budget
    b.observe({0.001, 0.001, 0.001, 0.003});
    INFO("keep " << keep);
    CHECK(b.budget_s() == Approx(keep == 0.75 ? 0.008 : 0.006));
  }
  // Every rank as fast: the whole batch, 8 ms.
  ComputeBudget even(micro(8, 2, syncopt::config::AutoCount{}));
  even.observe({0.001, 0.001, 0.001, 0.001});
  CHECK(even.budget_s() == Approx(0.008));
}

TEST_CASE("allreduce simulated: a 3x straggler cut by the budget, its examples recorded",
          "[budget][sim]") {
  // Four ranks, an 8 ms batch of 8 (cv 0) in micro-batches of 2, a budget
  // of 10 ms, rank 3 a fixed 3x machine, no network. Ranks 0-2 compute all
  // four (2, 4, 6, 8 ms); rank 3's first takes 6 ms (2 computing, 4 slow),
  // and the next would end at 12 > 10: it stops at 2 examples. Each step
  // lasts 8 ms + 1 ms to apply; 26 examples an update. Without the budget
  // the straggler's 24 ms make the step.
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kFixed;
  sc.factor = 3.0;
  sc.workers = {3};
  const syncopt::worker::StragglerModel slow(sc);
  for (const double budget_ms : {10.0, 0.0}) {
    syncopt::sim::AllreduceSimSetup st;
    st.workers = 4;
    st.train = micro(8, 2, budget_ms);
    st.total_steps = 5;
    st.param_count = 1000;
    st.timing.compute_mean_s = 0.008;
    st.timing.apply_s = 0.001;
    st.stragglers = &slow;
    std::vector<syncopt::metrics::StepRecord> recs;
    st.on_step = [&](syncopt::metrics::StepRecord&& r) { recs.push_back(std::move(r)); };
    const auto res = syncopt::sim::simulate_allreduce(st);
    REQUIRE(recs.size() == 5);
    INFO("budget " << budget_ms << " ms");
    CHECK(res.examples == (budget_ms > 0 ? 5u * 26u : 5u * 32u));
    for (const auto& r : recs) {
      CHECK(r.t_apply - r.t_start == Approx(budget_ms > 0 ? 0.009 : 0.025));
      CHECK(r.grads[3].examples == (budget_ms > 0 ? 2 : 8));
      CHECK(r.grads[3].skipped == (budget_ms > 0 ? 6 : 0));
      CHECK(r.grads[0].skipped == 0);
    }
  }
  // The ring allreduce's time: 2 (K - 1) rounds of latency and a K-th of
  // the message: 4 ranks, 1000 floats, 1 us, 1 GB/s: 6 x (1 + 1) us.
  CHECK(syncopt::sim::ring_allreduce_s({1e-6, 1e9}, 4, 1000) == Approx(12e-6));
}
