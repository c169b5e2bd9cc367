// Shard 0's checkpoint bookkeeping (ps::CheckpointPlan) and the parameter
// state it saves (optim::ParamState, the params layout of
// checkpoint/parts.hpp), without MPI.
#include <catch2/catch.hpp>

#include "checkpoint/parts.hpp"
#include "common/error.hpp"
#include "layout/roles.hpp"
#include "optim/param_state.hpp"
#include "ps/checkpoint_plan.hpp"
#include "ps/roster.hpp"

using namespace syncopt;

namespace {

// 2 shards, an evaluator, 3 workers: ranks 0 1 | 2 | 3 4 5.
layout::Roles roles() {
  config::Config cfg;
  cfg.train.mode = config::Mode::kSync;
  cfg.cluster.ps = 2;
  cfg.cluster.evaluator = true;
  return layout::make_roles(cfg, 6);
}

}  // namespace

TEST_CASE("checkpoint plan: due by steps and by time, never twice nor at the resumed step",
          "[checkpoint][plan]") {
  config::RunConfig run;
  run.checkpoint_every_steps = 10;
  run.checkpoint_every_s = 100.0;
  ps::CheckpointPlan plan(run, roles(), 5.0);
  CHECK_FALSE(plan.due(9, 6.0));
  CHECK(plan.due(10, 6.0));    // by steps
  CHECK(plan.due(11, 105.0));  // by time: 100 s after the start
  CHECK_FALSE(plan.due(11, 104.9));
  plan.resumed_at(20);
  CHECK_FALSE(plan.due(20, 6.0));  // on disk already
  plan.begin(30, false, 50.0, {1, 2, 3, 4, 5});
  CHECK_FALSE(plan.due(40, 500.0));  // one at a time
  CHECK_THROWS_AS(plan.begin(31, false, 51.0, {1}), InternalError);
}

TEST_CASE("checkpoint plan: a save completes with every awaited part, named by role",
          "[checkpoint][plan]") {
  config::RunConfig run;
  ps::CheckpointPlan plan(run, roles(), 0.0);
  plan.begin(7, false, 1.0, {1, 2, 3, 4, 5});
  CHECK(plan.saving());
  CHECK_FALSE(plan.saving_final());
  CHECK(plan.step() == 7);
  plan.on_saved(4, 7);
  plan.on_saved(4, 7);  // repeated: ignored
  plan.on_saved(3, 6);  // another step's: ignored
  plan.on_saved(1, 7);
  plan.on_saved(2, 7);
  CHECK_FALSE(plan.complete());
  CHECK_THROWS_AS(plan.finish_save(), InternalError);
  plan.forget(5);  // a worker lost before it saved
  plan.on_saved(3, 7);
  REQUIRE(plan.complete());
  CHECK(plan.finish_save() ==
        std::vector<std::string>{"shard0", "worker1", "shard1", "evaluator", "worker0"});
  CHECK_FALSE(plan.saving());
  CHECK_FALSE(plan.final_saved());
  // The next periodic one starts the clock again.
  CHECK_FALSE(plan.due(8, 1.0 + run.checkpoint_every_s - 1.0));
  CHECK(plan.due(8, 1.0 + run.checkpoint_every_s));
}

TEST_CASE("checkpoint plan: the final save, an abandoned one, a resumed run's",
          "[checkpoint][plan]") {
  config::RunConfig run;
  ps::CheckpointPlan plan(run, roles(), 0.0);
  plan.begin(3, true, 1.0, {1});
  CHECK(plan.saving_final());
  plan.on_saved(1, 3);
  plan.finish_save();
  CHECK(plan.final_saved());

  ps::CheckpointPlan lost(run, roles(), 0.0);
  lost.begin(3, false, 1.0, {1, 3});
  lost.abandon();  // shard 1 died: no checkpoint without its part
  CHECK_FALSE(lost.saving());
  CHECK_FALSE(lost.complete());
  lost.on_saved(1, 3);  // late: ignored
  CHECK_FALSE(lost.saving());

  ps::CheckpointPlan resumed(run, roles(), 0.0);
  resumed.already_saved(true, 2.0);
  CHECK(resumed.final_saved());
  CHECK_FALSE(resumed.saving());
}

TEST_CASE(
    "param state: apply is the optimiser then the EMA, state round-trips, refusals change "
    "nothing",
    "[checkpoint][params]") {
  optim::OptimizerOptions o;
  o.name = config::OptimizerName::kRmsprop;
  const std::vector<float> init = {1.0f, -2.0f, 0.5f};
  optim::ParamState p(o, 0.5, init.data(), 3);
  // The same steps by hand with the parts it is made of.
  std::vector<float> theta = init;
  optim::Optimizer opt(o, 3);
  optim::Ema ema(0.5, init.data(), 3);
  const std::vector<float> g = {0.1f, -0.3f, 2.0f};
  for (int k = 0; k < 3; ++k) {
    p.apply(g.data(), 0.01f);
    opt.step(theta.data(), g.data(), 0.01f);
    ema.update(theta.data());
  }
  CHECK(std::vector<float>(p.theta(), p.theta() + 3) == theta);
  CHECK(std::vector<float>(p.average(), p.average() + 3) ==
        std::vector<float>(ema.data(), ema.data() + 3));

  optim::ParamState q(o, 0.5, init.data(), 3);
  q.restore(p.state(), "model");
  CHECK(q.state() == p.state());

  // Another count, or an EMA where none was saved: refused, 78, unchanged.
  optim::ParamState other(o, 0.5, init.data(), 2);
  const auto before_count = other.state();
  CHECK_THROWS_AS(other.restore(p.state(), "model"), ConfigError);
  CHECK(other.state() == before_count);
  optim::ParamState no_ema(o, 0.0, init.data(), 3);
  const auto before = no_ema.state();
  CHECK_THROWS_WITH(no_ema.restore(p.state(), "model and cluster.ps"),
                    Catch::Contains("an EMA was saved"));
  CHECK(no_ema.state() == before);
  optim::OptimizerOptions sgd;
  optim::ParamState wrong_opt(sgd, 0.5, init.data(), 3);
  const auto before_opt = wrong_opt.state();
  CHECK_THROWS_AS(wrong_opt.restore(p.state(), "model"), ConfigError);
  CHECK(wrong_opt.state() == before_opt);
}

TEST_CASE("worker roster: done is not lost, enough live workers decide whether the run goes on",
          "[ps][roster]") {
  ps::WorkerRoster r(4, 3);  // K = 4, N = 3
  CHECK(r.any_active());
  CHECK(r.enough());
  r.done(0);  // finished its part: still counts as live
  CHECK_FALSE(r.active(0));
  CHECK(r.live() == 4);
  r.lose(1, {{"worker", 1}});
  CHECK(r.is_lost(1));
  CHECK(r.live() == 3);
  CHECK(r.enough());
  r.lose(2, {{"worker", 2}});
  CHECK_FALSE(r.enough());
  CHECK_THROWS_AS(r.lose(2, {{"worker", 2}}), InternalError);
  // Only the workers that were lost are listed, in the order they were.
  CHECK(r.lost() == nlohmann::json::array({{{"worker", 1}}, {{"worker", 2}}}));
  CHECK(r.any_active());  // worker 3
  r.done(3);
  CHECK_FALSE(r.any_active());
}
