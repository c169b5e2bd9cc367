// metrics::analyze on hand-made records, whose summary is known by hand:
// drops and acceptances per worker, the staleness of applied gradients
// (dropped ones are in the all-gradients histogram only), step times and
// the time to the k-th gradient.
#include <catch2/catch.hpp>

#include "metrics/analysis.hpp"

using namespace syncopt;
using metrics::GradRecord;
using metrics::StepRecord;

namespace {

GradRecord grad(int worker, double arrival_s, std::uint64_t version, bool accepted,
                std::int64_t staleness) {
  GradRecord g;
  g.worker = worker;
  g.arrival_s = arrival_s;
  g.version = version;
  g.accepted = accepted;
  g.staleness = staleness;
  return g;
}

StepRecord step(std::uint64_t k, double t_start, double t_apply, std::vector<GradRecord> grads) {
  StepRecord r;
  r.step = k;
  r.version = k - 1;
  r.t_start = t_start;
  r.t_apply = t_apply;
  r.grads = std::move(grads);
  for (const auto& g : r.grads) r.used += g.accepted ? 1 : 0;
  return r;
}

}  // namespace

TEST_CASE("analyze: sync records, dropped gradients are not applied staleness",
          "[metrics][analysis]") {
  // K = 3, N = 2. Step 1: workers 0 and 1 fresh, worker 2 arrives after the
  // update and is dropped in step 2 with staleness 1; step 2 also drops a
  // second late gradient of worker 2 (staleness 2).
  const std::vector<StepRecord> steps = {
      step(1, 0.0, 1.0, {grad(1, 0.25, 0, true, 0), grad(0, 0.75, 0, true, 0)}),
      step(2, 1.0, 3.0,
           {grad(2, 0.5, 0, false, 1), grad(0, 1.0, 1, true, 0), grad(2, 1.25, 0, false, 2),
            grad(1, 1.5, 1, true, 0)}),
  };
  metrics::RunInfo info;
  info.mode = config::Mode::kSync;
  info.n = 2;
  info.b = 1;
  info.shards = 1;
  info.workers = 3;
  info.examples = 64;
  const auto s = metrics::analyze(steps, info).summary;
  CHECK(s["steps"] == 2);
  CHECK(s["drops_per_worker"] == nlohmann::json::array({0, 0, 2}));
  CHECK(s["accepted_per_worker"] == nlohmann::json::array({2, 2, 0}));
  // Only applied gradients count: all four were fresh.
  CHECK(s["staleness_mean"].get<double>() == 0.0);
  CHECK(s["staleness_max"].get<double>() == 0.0);
  CHECK(s["staleness_hist_applied"] == nlohmann::json({{"0", 4}}));
  CHECK(s["staleness_hist_all"] == nlohmann::json({{"0", 4}, {"1", 1}, {"2", 1}}));
  // Step times 1 s and 2 s; the training span 0 .. 3 s.
  CHECK(s["step_time_p50_s"].get<double>() == Approx(1.5));
  CHECK(s["step_time_max_s"].get<double>() == Approx(2.0));
  CHECK(s["train_s"].get<double>() == Approx(3.0));
  CHECK(s["examples_per_s"].get<double>() == Approx(64.0 / 3.0));
}

TEST_CASE("analyze: async staleness is the mean and max of the applied ones",
          "[metrics][analysis]") {
  const std::vector<StepRecord> steps = {
      step(1, 0.0, 0.1, {grad(0, 0.1, 0, true, 0)}),
      step(2, 0.1, 0.2, {grad(1, 0.1, 0, true, 1)}),
      step(3, 0.2, 0.3, {grad(2, 0.1, 0, true, 2)}),
      step(4, 0.3, 0.4, {grad(0, 0.1, 1, true, 3)}),
  };
  metrics::RunInfo info;
  info.mode = config::Mode::kAsync;
  info.shards = 1;
  info.workers = 3;
  const auto s = metrics::analyze(steps, info).summary;
  CHECK(s["staleness_mean"].get<double>() == Approx(1.5));
  CHECK(s["staleness_max"].get<double>() == 3.0);
  CHECK(s["drops_per_worker"] == nlohmann::json::array({0, 0, 0}));
  CHECK(s["accepted_per_worker"] == nlohmann::json::array({2, 1, 1}));
}
