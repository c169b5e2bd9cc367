// The slow rank named (metrics/blame.hpp): scores from the phases of the
// records, on numbers worked out by hand; the phases' JSON round trip.
#include <catch2/catch.hpp>

#include "metrics/blame.hpp"

using namespace syncopt::metrics;

namespace {

GradRecord grad(int worker, double data, double compute, double wait) {
  GradRecord g;
  g.worker = worker;
  g.accepted = true;
  g.phases.set(Phase::kData, data);
  g.phases.set(Phase::kCompute, compute);
  g.phases.set(Phase::kReduce, wait);
  return g;
}

}  // namespace

TEST_CASE("blame: the slow rank and its phase, and the ranks that wait for it not blamed",
          "[blame]") {
  // Three allreduce ranks, ten steps: rank 1 loads its batch in 9 ms
  // (the others 1 ms), everyone computes 10 ms; ranks 0 and 2 then wait
  // 8 ms in the reduction for rank 1. Own work: 11, 19, 11 ms: rank 1 is
  // 19/11 = 1.727x the fastest, at data (+8 ms a step); the waiting ranks
  // score 1. Step 5 rank 2 computes 22 ms once: its individual score is
  // its mean (11 + 1.2 = 12.2 ms) over its best (11), 1.109.
  Blame blame(3);
  for (int s = 0; s < 10; ++s) {
    StepRecord r;
    r.step = static_cast<std::uint64_t>(s + 1);
    r.grads = {grad(0, 0.001, 0.010, 0.008), grad(1, 0.009, 0.010, 0.0),
               grad(2, 0.001, s == 5 ? 0.022 : 0.010, 0.008)};
    if (s == 5) {
      const auto scores = score_step(r);
      REQUIRE(scores.size() == 3);
      CHECK(scores[2].relative == Approx(23.0 / 11.0));
    }
    blame.add(r);
  }
  nlohmann::json sum;
  blame.put_summary(sum);
  const auto& slowest = sum["slowest_workers"];
  REQUIRE(slowest.size() == 3);
  CHECK(slowest[0]["worker"] == 1);
  CHECK(slowest[0]["phase"] == "data");
  CHECK(slowest[0]["phase_excess_s"].get<double>() == Approx(0.008));
  CHECK(sum["relative_score_per_worker"][1].get<double>() == Approx(19.0 / 11.0));
  CHECK(sum["relative_score_per_worker"][0].get<double>() == Approx(1.0));
  CHECK(sum["individual_score_per_worker"][2].get<double>() == Approx(12.2 / 11.0));
  CHECK(sum["slow_phase_per_worker"][2] == "compute");
  const std::string text = format_blame(sum);
  CHECK(text.find("worker 1") != std::string::npos);
  CHECK(text.find("slow at data") != std::string::npos);
  // No phases anywhere: null, never a score of 1.
  Blame none(3);
  StepRecord bare;
  bare.grads.resize(3);
  none.add(bare);
  nlohmann::json empty;
  none.put_summary(empty);
  CHECK(empty["slowest_workers"].is_null());
  CHECK(format_blame(empty).empty());
}

TEST_CASE("blame: phases travel through steps.jsonl", "[blame]") {
  StepRecord r;
  r.step = 1;
  r.grads = {grad(0, 0.5, 0.25, 0.125)};
  r.grads[0].phases.set(Phase::kWait, 2.0);
  std::string line;
  append_json_line(line, r);
  CHECK(line.find("\"phases\":{\"compute\":0.25,\"data\":0.5,\"reduce\":0.125,\"wait\":2.0}") !=
        std::string::npos);
  const StepRecord back = step_from_json(nlohmann::json::parse(line), "test");
  REQUIRE(back.grads.size() == 1);
  CHECK(back.grads[0].phases.mask == r.grads[0].phases.mask);
  CHECK(back.grads[0].phases.get(Phase::kWait) == 2.0);
  CHECK(own_work_s(back.grads[0].phases) == 0.75);  // waits are not its own work
}
