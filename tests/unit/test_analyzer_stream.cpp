// metrics::Analyzer, the streamed summary, on hand-made records whose
// answers are known by hand: the time to the k-th gradient with late
// gradients that arrive steps after their version (folded in only once every
// worker moved on), cross-shard disagreements counted as the shards' records
// come, null when only shard 0's were kept; and the same summary whichever
// way the records come in (fed one by one, all at once in any order, read
// from a file, from a file whose shard-0 records are out of step order).
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

#include "metrics/analysis.hpp"
#include "metrics/step_record.hpp"

using namespace syncopt;
using metrics::GradRecord;
using metrics::StepRecord;

namespace {

GradRecord grad(int worker, double arrival_s, std::uint64_t version, bool accepted,
                std::uint64_t seq, std::int64_t staleness = 0) {
  GradRecord g;
  g.worker = worker;
  g.arrival_s = arrival_s;
  g.version = version;
  g.accepted = accepted;
  g.seq = seq;
  g.staleness = staleness;
  g.compute_s = 0.1 * (worker + 1);
  return g;
}

StepRecord step(int shard, std::uint64_t k, double t_start, double t_apply,
                std::vector<GradRecord> grads) {
  StepRecord r;
  r.shard = shard;
  r.step = k;
  r.version = k - 1;
  r.t_start = t_start;
  r.t_apply = t_apply;
  r.grads = std::move(grads);
  for (const auto& g : r.grads) r.used += g.accepted ? 1 : 0;
  return r;
}

// K = 3, N = 2, two shards. Worker 2 is late twice: its gradient of version
// 0 arrives in step 2 (0.6 s after version 0 started), that of version 1 in
// step 3 (0.45 s after version 1 started); it never sends one of version 2.
// Shard 1 drops worker 0's gradient of version 1 (seq 1), which shard 0
// accepted, and accepts worker 2's of version 1, which reached shard 0 late:
// two disagreements.
std::vector<StepRecord> records() {
  return {
      step(0, 1, 0.0, 0.5, {grad(0, 0.2, 0, true, 0), grad(1, 0.4, 0, true, 0)}),
      step(1, 1, 0.0, 0.5, {grad(0, 0.2, 0, true, 0), grad(1, 0.4, 0, true, 0)}),
      step(0, 2, 0.5, 0.9,
           {grad(2, 0.1, 0, false, 0, 1), grad(0, 0.3, 1, true, 1), grad(1, 0.35, 1, true, 1)}),
      step(1, 2, 0.5, 0.9,
           {grad(2, 0.1, 0, false, 0, 1), grad(0, 0.3, 1, false, 1), grad(1, 0.35, 1, true, 1),
            grad(2, 0.38, 1, true, 1)}),
      step(0, 3, 0.9, 1.2,
           {grad(2, 0.05, 1, false, 1, 1), grad(0, 0.1, 2, true, 2), grad(1, 0.2, 2, true, 2)}),
  };
}

metrics::RunInfo info(int recorded_shards = 0) {
  metrics::RunInfo i;
  i.mode = config::Mode::kSync;
  i.n = 2;
  i.b = 1;
  i.shards = 2;
  i.workers = 3;
  i.recorded_shards = recorded_shards;
  return i;
}

void check_known(const nlohmann::json& s) {
  // Version 0: 0.2, 0.4, 0.6; version 1: 0.3, 0.35, 0.45; version 2: 0.1, 0.2.
  CHECK(s["time_to_kth_samples"] == nlohmann::json::array({3, 3, 2}));
  CHECK(s["time_to_kth_mean_s"][0].get<double>() == Approx(0.2));
  CHECK(s["time_to_kth_mean_s"][1].get<double>() == Approx((0.4 + 0.35 + 0.2) / 3));
  CHECK(s["time_to_kth_mean_s"][2].get<double>() == Approx(0.525));
  CHECK(s["time_to_kth_median_s"][0].get<double>() == Approx(0.2));
  CHECK(s["time_to_kth_median_s"][1].get<double>() == Approx(0.35));
  CHECK(s["time_to_kth_median_s"][2].get<double>() == Approx(0.525));
  CHECK(s["steps"] == 3);
  CHECK(s["step_time_p50_s"].get<double>() == Approx(0.4));
  CHECK(s["train_s"].get<double>() == Approx(1.2));
  CHECK(s["drops_per_worker"] == nlohmann::json::array({0, 0, 2}));
  CHECK(s["drops_per_worker_all_shards"] == nlohmann::json::array({1, 0, 3}));
  CHECK(s["accepted_per_worker"] == nlohmann::json::array({3, 3, 0}));
  CHECK(s["compute_time_p50_s"].get<double>() == Approx(0.2));
}

}  // namespace

TEST_CASE("analyzer: late gradients fold into the k-th lists, disagreements as they come",
          "[metrics][analysis]") {
  metrics::Analyzer a(info());
  for (const auto& r : records()) a.add(r);
  const auto s = a.finish().summary;
  check_known(s);
  CHECK(s["cross_shard_disagreements"] == 2);
  // Shard 0's records alone cannot tell whether the shards disagreed.
  metrics::Analyzer only0(info(1));
  for (const auto& r : records()) {
    if (r.shard == 0) only0.add(r);
  }
  CHECK(only0.finish().summary["cross_shard_disagreements"].is_null());
}

TEST_CASE("analyzer: the same summary fed one by one, all at once shuffled, or from a file",
          "[metrics][analysis]") {
  metrics::Analyzer a(info());
  for (const auto& r : records()) a.add(r);
  const auto streamed = a.finish().summary;
  auto shuffled = records();
  std::mt19937 rng(4);
  std::shuffle(shuffled.begin(), shuffled.end(), rng);
  CHECK(metrics::analyze(shuffled, info()).summary == streamed);
  const auto dir = std::filesystem::temp_directory_path() / "syncopt-test-analyzer";
  std::filesystem::create_directories(dir);
  for (const auto& order : {records(), shuffled}) {
    std::string text;
    for (const auto& r : order) metrics::append_json_line(text, r);
    std::ofstream(dir / "steps.jsonl") << text;
    const auto from_file = metrics::analyze_file(dir / "steps.jsonl", info()).summary;
    CHECK(from_file == streamed);
    check_known(from_file);
  }
  std::filesystem::remove_all(dir);
}
