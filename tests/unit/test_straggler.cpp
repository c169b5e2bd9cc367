// Straggler injection: seeded, per worker and step, with the documented
// means; trace replay from a CSV and from an earlier run's steps.jsonl.
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "common/error.hpp"
#include "worker/straggler.hpp"

using syncopt::config::StragglerConfig;
using syncopt::worker::StragglerModel;

namespace {

double mean_delay(const StragglerModel& m, int worker, int steps, double compute_s) {
  double sum = 0.0;
  for (int s = 0; s < steps; ++s)
    sum += m.delay_s(worker, static_cast<std::uint64_t>(s), compute_s);
  return sum / steps;
}

}  // namespace

TEST_CASE("no stragglers means no delay", "[straggler]") {
  StragglerConfig c;
  const StragglerModel m(c);
  CHECK_FALSE(m.active());
  CHECK(m.delay_s(0, 3, 1.0) == 0.0);
}

TEST_CASE("bernoulli slows a share prob of steps by factor, reproducibly", "[straggler]") {
  StragglerConfig c;
  c.model = syncopt::config::StragglerModel::kBernoulli;
  c.prob = 0.2;
  c.factor = 4.0;
  c.seed = 11;
  const StragglerModel m(c), again(c);
  int slow = 0;
  for (int s = 0; s < 10000; ++s) {
    const double d = m.delay_s(1, static_cast<std::uint64_t>(s), 0.01);
    CHECK((d == 0.0 || d == Approx(0.03)));
    CHECK(d == again.delay_s(1, static_cast<std::uint64_t>(s), 0.01));
    slow += d > 0.0 ? 1 : 0;
  }
  CHECK(slow == Approx(2000).margin(150));
  // Another seed draws other steps.
  c.seed = 12;
  const StragglerModel other(c);
  int differ = 0;
  for (int s = 0; s < 200; ++s) {
    differ += (m.delay_s(1, static_cast<std::uint64_t>(s), 0.01) !=
               other.delay_s(1, static_cast<std::uint64_t>(s), 0.01));
  }
  CHECK(differ > 20);
}

TEST_CASE("only the listed workers straggle", "[straggler]") {
  StragglerConfig c;
  c.model = syncopt::config::StragglerModel::kFixed;
  c.factor = 3.0;
  c.mean_ms = 5.0;
  c.workers = {2};
  const StragglerModel m(c);
  CHECK(m.delay_s(2, 0, 0.1) == Approx(0.2 + 0.005));
  CHECK(m.delay_s(1, 0, 0.1) == 0.0);
}

TEST_CASE("exponential, lognormal and pareto delays have the configured mean", "[straggler]") {
  for (const char* model : {"exponential", "lognormal", "pareto"}) {
    StragglerConfig c;
    c.model = *syncopt::config::enum_from_name<syncopt::config::StragglerModel>(model);
    c.mean_ms = 20.0;
    c.sigma = 0.5;
    c.alpha = 3.0;
    c.seed = 5;
    const StragglerModel m(c);
    INFO(model);
    CHECK(mean_delay(m, 0, 40000, 0.0) == Approx(0.020).epsilon(0.05));
  }
}

TEST_CASE("trace replays recorded arrivals from a CSV or a steps.jsonl", "[straggler]") {
  const auto dir = std::filesystem::temp_directory_path() / "syncopt-straggler-test";
  std::filesystem::create_directories(dir);
  {
    std::ofstream csv(dir / "t.csv");
    csv << "worker,arrival_s\n0,0.5\n0,0.1\n1,0.05\n";
  }
  StragglerConfig c;
  c.model = syncopt::config::StragglerModel::kTrace;
  c.trace = (dir / "t.csv").string();
  const StragglerModel m(c);
  CHECK(m.delay_s(0, 0, 0.2) == Approx(0.3));
  CHECK(m.delay_s(0, 1, 0.2) == 0.0);          // arrived before its compute would end
  CHECK(m.delay_s(0, 2, 0.2) == Approx(0.3));  // the worker's record cycles
  CHECK(m.delay_s(1, 0, 0.01) == Approx(0.04));
  {
    // Step 2's record holds worker 1's late gradient of version 0: its delay
    // counts from version 0's start (t = 1.0), not from step 2's (t = 1.4).
    std::ofstream jl(dir / "steps.jsonl");
    jl << R"({"step":1,"shard":0,"t_start":1.0,"version":0,"grads":[{"worker":0,"arrival_s":0.4,"version":0}]})"
          "\n";
    jl << R"({"step":2,"shard":0,"t_start":1.4,"version":1,"grads":[{"worker":1,"arrival_s":0.2,"version":0}]})"
          "\n";
  }
  c.trace = (dir / "steps.jsonl").string();
  const StragglerModel j(c);
  CHECK(j.delay_s(0, 0, 0.1) == Approx(0.3));
  CHECK(j.delay_s(1, 0, 0.1) == Approx(0.5));
  {
    std::ofstream bad(dir / "bad.csv");
    bad << "worker,arrival_s\n0,fast\n";
  }
  c.trace = (dir / "bad.csv").string();
  CHECK_THROWS_AS(StragglerModel(c), syncopt::DataError);
  c.trace = (dir / "missing.csv").string();
  CHECK_THROWS_AS(StragglerModel(c), syncopt::MissingInputError);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a straggler's slowdown gives the step's delay bit for bit, and paces it in pieces",
          "[straggler]") {
  using syncopt::worker::StragglerPacer;
  using M = syncopt::config::StragglerModel;
  // The delay of a whole step is the models' formulas as they always were,
  // to the bit (the virtual clock's finish times, the golden records and
  // the fit use delay_s), and the slowdown's lateness at the step's end.
  for (const M model : {M::kBernoulli, M::kFixed, M::kExponential, M::kLognormal, M::kPareto}) {
    StragglerConfig c;
    c.model = model;
    c.prob = 0.3;
    c.factor = 3.0;
    c.mean_ms = 7.0;
    c.seed = 5;
    const StragglerModel m(c);
    for (std::uint64_t s = 0; s < 200; ++s) {
      const double compute = 0.001 * static_cast<double>(1 + s % 17);
      const double d = m.delay_s(2, s, compute);
      CHECK(m.slowdown(2, s).late_s(compute, 1.0) == d);
      const double u = syncopt::worker::hash_uniform(5, 2, s, model == M::kBernoulli ? 0 : 1);
      if (model == M::kBernoulli) CHECK(d == (u < 0.3 ? (3.0 - 1.0) * compute : 0.0));
      if (model == M::kFixed) CHECK(d == (3.0 - 1.0) * compute + 0.007);
      if (model == M::kExponential) CHECK(d == -0.007 * std::log1p(-u));
      // Paced in four equal pieces of work, the sleeps add up to it.
      StragglerPacer p;
      p.start(m.slowdown(2, s));
      double slept = 0.0;
      for (int i = 1; i <= 4; ++i) slept += p.due_s(compute * i / 4.0, i / 4.0);
      CHECK(slept == Approx(d).margin(1e-15));
      CHECK(p.slept_s() == slept);
    }
  }
  // A 3x machine sleeps twice each piece's work as it goes; an extra delay
  // goes by the share of the work: a piece of a quarter gets a quarter.
  StragglerPacer p;
  p.start({3.0, 0.0, 0.0});
  CHECK(p.due_s(0.010, 0.1) == Approx(0.020));
  CHECK(p.due_s(0.015, 0.9) == Approx(0.010));  // 5 ms more work, whatever its share
  p.start({1.0, 0.4, 0.0});
  CHECK(p.due_s(0.5, 0.25) == Approx(0.1));
  CHECK(p.due_s(0.5, 0.25) == 0.0);  // no new work, nothing more
  CHECK(p.due_s(0.9, 1.0) == Approx(0.3));
  // A recorded arrival (trace) paces the step; once overtaken by the
  // compute it stays overtaken (nothing is slept back).
  p.start({1.0, 0.0, 1.0});
  CHECK(p.due_s(0.1, 0.5) == Approx(0.4));
  CHECK(p.due_s(1.0, 0.6) == 0.0);
  CHECK(p.due_s(1.1, 1.0) == 0.0);
  CHECK_FALSE(StragglerPacer().active());
}
