// Optimiser updates, schedules and the EMA against values computed by hand
// (Python double arithmetic, the formulas of optim/optimizer.hpp).
#include <catch2/catch.hpp>

#include "common/error.hpp"
#include "optim/optimizer.hpp"

using namespace syncopt::optim;

TEST_CASE("sgd with momentum matches hand-computed updates", "[optim]") {
  OptimizerOptions o;
  o.name = syncopt::config::OptimizerName::kSgd;
  o.momentum = 0.9;
  Optimizer opt(o, 1);
  float p = 1.0f;
  float g = 0.5f;
  opt.step(&p, &g, 0.1f);
  CHECK(p == Approx(0.95).epsilon(1e-6));
  g = -0.25f;
  opt.step(&p, &g, 0.1f);
  // m = 0.9 * 0.5 - 0.25 = 0.2; p = 0.95 - 0.02
  CHECK(p == Approx(0.93).epsilon(1e-6));
  CHECK(opt.momentum_buffer()[0] == Approx(0.2).epsilon(1e-6));
}

TEST_CASE("rmsprop with momentum matches hand-computed updates", "[optim]") {
  OptimizerOptions o;
  o.name = syncopt::config::OptimizerName::kRmsprop;
  o.momentum = 0.9;
  o.rms_decay = 0.9;
  o.eps = 1e-8;
  Optimizer opt(o, 1);
  float p = 1.0f;
  float g = 0.5f;
  opt.step(&p, &g, 0.1f);
  CHECK(p == Approx(0.94801247579001).epsilon(1e-6));
  g = -0.25f;
  opt.step(&p, &g, 0.1f);
  CHECK(p == Approx(0.9285212583599222).epsilon(1e-6));
  CHECK(opt.momentum_buffer()[0] == Approx(0.019491217430087884).epsilon(1e-5));
}

TEST_CASE("weight decay adds lambda * p to the gradient", "[optim]") {
  OptimizerOptions o;
  o.momentum = 0.0;
  o.weight_decay = 0.1;
  Optimizer opt(o, 2);
  float p[2] = {2.0f, -1.0f};
  const float g[2] = {0.0f, 1.0f};
  opt.step(p, g, 0.5f);
  CHECK(p[0] == Approx(2.0 - 0.5 * 0.2));
  CHECK(p[1] == Approx(-1.0 - 0.5 * (1.0 - 0.1)));
}

TEST_CASE("learning-rate schedules", "[optim]") {
  using S = syncopt::config::Schedule;
  ScheduleOptions s;
  s.base_lr = 0.1;
  s.total_epochs = 10.0;
  s.name = S::kConstant;
  CHECK(learning_rate(s, 7.3) == Approx(0.1));

  s.name = S::kExponential;
  s.decay_rate = 0.94;
  s.decay_epochs = 2.0;
  CHECK(learning_rate(s, 1.99) == Approx(0.1));
  CHECK(learning_rate(s, 5.0) == Approx(0.08836));

  s.name = S::kLinearAnneal;
  s.anneal_epochs = 0.0;  // whole run
  CHECK(learning_rate(s, 0.0) == Approx(0.1));
  CHECK(learning_rate(s, 7.5) == Approx(0.025));
  CHECK(learning_rate(s, 10.0) == Approx(0.0).margin(1e-12));
  s.anneal_epochs = 4.0;  // only the last 4 epochs
  CHECK(learning_rate(s, 5.0) == Approx(0.1));
  CHECK(learning_rate(s, 8.0) == Approx(0.05));
  // final_lr: linear_anneal ends there, exponential never goes below it
  // (the paper's App. A.4: 1e-4 decreasing to 3e-6).
  s.anneal_epochs = 0.0;
  s.base_lr = 1e-4;
  s.final_lr = 3e-6;
  CHECK(learning_rate(s, 0.0) == Approx(1e-4));
  CHECK(learning_rate(s, 5.0) == Approx(3e-6 + 0.5 * (1e-4 - 3e-6)));
  CHECK(learning_rate(s, 10.0) == Approx(3e-6));
  s.name = S::kExponential;
  s.decay_rate = 0.5;
  s.decay_epochs = 1.0;
  CHECK(learning_rate(s, 2.5) == Approx(2.5e-5));
  CHECK(learning_rate(s, 9.0) == Approx(3e-6));  // 1e-4 / 512 would be 1.95e-7
  s.name = S::kLinearAnneal;
  s.base_lr = 0.1;
  s.final_lr = 0.0;

  s.name = S::kWarmupConstant;
  s.warmup_epochs = 2.0;
  CHECK(learning_rate(s, 0.5) == Approx(0.025));
  CHECK(learning_rate(s, 3.0) == Approx(0.1));
}

TEST_CASE("EMA uses the warm-up decay min(alpha, (1+t)/(10+t))", "[optim]") {
  const float init = 0.0f;
  Ema ema(0.9999, &init, 1);
  const float xs[3] = {1.0f, 2.0f, 3.0f};
  ema.update(&xs[0]);  // a = 0.1
  CHECK(ema.data()[0] == Approx(0.9).epsilon(1e-6));
  ema.update(&xs[1]);  // a = 2/11
  CHECK(ema.data()[0] == Approx(1.8).epsilon(1e-6));
  ema.update(&xs[2]);  // a = 3/12
  CHECK(ema.data()[0] == Approx(2.7).epsilon(1e-6));
  CHECK(ema.updates() == 3);

  // Long runs settle at the configured decay.
  Ema slow(0.5, &init, 1);
  const float one = 1.0f;
  for (int i = 0; i < 100; ++i) slow.update(&one);
  const float two = 2.0f;
  slow.update(&two);  // a = 0.5: (1 + 2) / 2
  CHECK(slow.data()[0] == Approx(1.5).epsilon(1e-6));
}
