// Checkpoint state of lib/optim: an optimiser (SGD, RMSProp) or EMA restored
// from a serialized state() continues bit for bit like the original; a
// state saved with other settings is refused. And the schedule parsed once
// into an enum gives bit-identical learning rates to the string version.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/state.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "optim/optimizer.hpp"

using namespace syncopt;
using namespace syncopt::optim;
using checkpoint::State;

namespace {

// Through the bytes, as a checkpoint does.
State round_trip(const State& s) {
  return State::deserialize(s.serialize(), "test.state", "shard0.optim");
}

std::vector<float> random_floats(std::mt19937_64& rng, std::size_t n, float scale) {
  std::vector<float> v(n);
  for (auto& x : v) x = scale * (static_cast<float>(rng() >> 40) / 16777216.0f - 0.5f);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The string-comparing learning_rate the enum version replaced, kept as the
// oracle, with optim.final_lr as documented (at final_lr = 0 it is exactly
// the old formula: 0 + (lr - 0) * c and max(lr, 0) change no bit).
double learning_rate_by_name(const std::string& name, const ScheduleOptions& s, double epoch) {
  std::string shape = name;
  double warm = 1.0;
  if (shape.rfind("warmup_", 0) == 0) {
    shape = shape.substr(7);
    if (s.warmup_epochs > 0.0) warm = std::min(1.0, epoch / s.warmup_epochs);
  }
  double lr = s.base_lr;
  if (shape == "constant") {
  } else if (shape == "exponential") {
    lr *= std::pow(s.decay_rate, std::floor(epoch / s.decay_epochs));
    lr = std::max(lr, s.final_lr);
  } else if (shape == "linear_anneal") {
    const double span = s.anneal_epochs > 0.0 ? s.anneal_epochs : s.total_epochs;
    lr = s.final_lr + (lr - s.final_lr) * std::clamp((s.total_epochs - epoch) / span, 0.0, 1.0);
  } else {
    return std::nan("");  // a name the oracle does not know: fails the comparison
  }
  return lr * warm;
}

}  // namespace

TEST_CASE("optimizer state: a restored optimiser continues bit for bit", "[optim][state]") {
  const std::string name = GENERATE(std::string("sgd"), std::string("rmsprop"));
  INFO(name);
  OptimizerOptions o;
  o.name = *config::enum_from_name<config::OptimizerName>(name);
  o.momentum = 0.9;
  o.rms_decay = 0.95;
  o.eps = 1e-7;
  o.weight_decay = 1e-4;
  const std::size_t n = 1000;
  std::mt19937_64 rng(7);
  std::vector<float> params = random_floats(rng, n, 2.0f);
  Optimizer opt(o, n);
  for (int step = 0; step < 5; ++step) {
    opt.step(params.data(), random_floats(rng, n, 1.0f).data(), 0.05f);
  }

  Optimizer restored(o, n);
  restored.restore(round_trip(opt.state()));
  std::vector<float> params2 = params;
  for (int step = 0; step < 7; ++step) {
    const auto g = random_floats(rng, n, 1.0f);
    const float lr = 0.05f / static_cast<float>(step + 1);
    opt.step(params.data(), g.data(), lr);
    restored.step(params2.data(), g.data(), lr);
  }
  CHECK(same_bits(params, params2));
  CHECK(opt.state() == restored.state());
  CHECK(opt.state().has("ms") == (name == "rmsprop"));
}

TEST_CASE("optimizer state: other settings or a damaged state are refused", "[optim][state]") {
  OptimizerOptions o;
  o.name = config::OptimizerName::kRmsprop;
  Optimizer opt(o, 4);
  std::vector<float> p(4, 1.0f);
  const std::vector<float> g = {0.5f, -0.5f, 0.25f, 1.0f};
  opt.step(p.data(), g.data(), 0.1f);
  const State saved = round_trip(opt.state());

  const auto config_error = [&](const OptimizerOptions& other, std::size_t count) {
    Optimizer fresh(other, count);
    const State before = fresh.state();
    try {
      fresh.restore(saved);
    } catch (const ConfigError& e) {
      CHECK(fresh.state() == before);  // a failed restore changes nothing
      return std::string(e.what());
    }
    return std::string("(no ConfigError)");
  };
  OptimizerOptions other = o;
  other.momentum = 0.5;
  CHECK_THAT(config_error(other, 4),
             Catch::Contains("shard0.optim.momentum: saved with optim.momentum = 0.9") &&
                 Catch::Contains("0.5 now") && Catch::Contains("run.resume = false"));
  other = o;
  other.name = config::OptimizerName::kSgd;
  CHECK_THAT(config_error(other, 4), Catch::Contains("optim.name = rmsprop"));
  other = o;
  other.eps = 1e-6;
  CHECK_THAT(config_error(other, 4), Catch::Contains("optim.eps"));
  other = o;
  other.rms_decay = 0.99;
  CHECK_THAT(config_error(other, 4), Catch::Contains("optim.rms_decay"));
  other = o;
  other.weight_decay = 1e-3;
  CHECK_THAT(config_error(other, 4), Catch::Contains("optim.weight_decay"));
  CHECK_THAT(config_error(o, 5), Catch::Contains("parameter count = 4"));

  // The RMS buffer is part of the state: without it, a DataError naming it.
  State no_ms("shard0.optim");
  for (const auto& field : {"name"}) no_ms.put(field, saved.get<std::string>(field));
  for (const auto& field : {"momentum", "rms_decay", "eps", "weight_decay"}) {
    no_ms.put(field, saved.get<double>(field));
  }
  no_ms.put("count", saved.get<std::uint64_t>("count"));
  no_ms.put("mom", saved.get<std::vector<float>>("mom"));
  Optimizer fresh(o, 4);
  CHECK_THROWS_WITH(fresh.restore(no_ms),
                    Catch::Contains("checkpoint field shard0.optim.ms: missing"));
  no_ms.put("ms", std::vector<float>(3, 1.0f));
  CHECK_THROWS_WITH(fresh.restore(no_ms),
                    Catch::Contains("shard0.optim.ms: holds 3 values, expected 4"));
  CHECK_THROWS_AS(fresh.restore(no_ms), DataError);
}

TEST_CASE("EMA state: a restored average continues bit for bit", "[optim][state]") {
  const std::size_t n = 257;
  std::mt19937_64 rng(11);
  const auto init = random_floats(rng, n, 1.0f);
  // A decay above the warm-up's (1 + t) / (10 + t) for these t: the result
  // depends on the update count, which must be restored with the average.
  Ema ema(0.9999, init.data(), n);
  for (int i = 0; i < 6; ++i) ema.update(random_floats(rng, n, 1.0f).data());
  Ema restored(0.9999, init.data(), n);
  restored.restore(round_trip(ema.state()));
  CHECK(restored.updates() == 6);
  for (int i = 0; i < 9; ++i) {
    const auto p = random_floats(rng, n, 1.0f);
    ema.update(p.data());
    restored.update(p.data());
  }
  CHECK(same_bits({ema.data(), ema.data() + n}, {restored.data(), restored.data() + n}));
  CHECK(ema.state() == restored.state());

  Ema other_decay(0.999, init.data(), n);
  CHECK_THROWS_WITH(other_decay.restore(ema.state()), Catch::Contains("optim.ema"));
  CHECK_THROWS_AS(other_decay.restore(ema.state()), ConfigError);
  Ema other_count(0.9999, init.data(), n - 1);
  CHECK_THROWS_AS(other_count.restore(ema.state()), ConfigError);
}

TEST_CASE("schedule: parsed once, learning rates bit-identical to the documented formulas",
          "[optim][state]") {
  ScheduleOptions s;
  s.base_lr = 0.05;
  s.decay_rate = 0.94;
  s.decay_epochs = 2.0;
  s.warmup_epochs = 0.7;
  s.total_epochs = 9.5;
  // Every schedule the key table knows, through its own name.
  const auto names = config::enum_names<config::Schedule>();
  REQUIRE(names.size() == 6);
  for (const auto name_view : names) {
    const std::string name(name_view);
    for (const double final_lr : {0.0, 0.004}) {
      for (const double anneal : {0.0, 3.3}) {
        for (const double warmup : {0.0, 0.7}) {
          s.name = *config::enum_from_name<config::Schedule>(name);
          s.final_lr = final_lr;
          s.anneal_epochs = anneal;
          s.warmup_epochs = warmup;
          for (int i = 0; i <= 1200; ++i) {
            const double epoch = i * 0.01;
            const double a = learning_rate(s, epoch);
            const double b = learning_rate_by_name(name, s, epoch);
            if (std::memcmp(&a, &b, sizeof a) != 0) {
              FAIL(name << " final_lr " << final_lr << " anneal " << anneal << " warmup " << warmup
                        << " epoch " << epoch << ": " << a << " != " << b);
            }
          }
        }
      }
    }
  }
  // Parsed once: the config holds the enum that learning_rate switches on.
  CHECK(config::parse("[optim]\nschedule = \"warmup_linear_anneal\"\n", "s.toml", {})
            .optim.schedule == config::Schedule::kWarmupLinearAnneal);
  config::OptimConfig c;
  c.schedule = config::Schedule::kWarmupExponential;
  const ScheduleOptions from_config = schedule_options(c, 4.0);
  CHECK(from_config.name == config::Schedule::kWarmupExponential);
  CHECK(from_config.total_epochs == 4.0);
}
