// ps::ShardCore's virtual clock without MPI: gradients handed to the core
// in an order that has nothing to do with their finish times (as a loaded
// machine delivers them), against the simulator's event-ordered run of the
// same workers. The core must take them by finish time and give the
// simulator's records exactly, whatever the delivery order; and by hand, a
// dropped straggler starts its next gradient when its last one is done.
#include <algorithm>
#include <catch2/catch.hpp>
#include <random>
#include <vector>

#include "ps/shard_core.hpp"
#include "sim/simulator.hpp"
#include "worker/straggler.hpp"

using syncopt::config::Mode;
using syncopt::metrics::StepRecord;
namespace sim = syncopt::sim;

namespace {

constexpr std::uint64_t kAny = ~std::uint64_t{0};

struct Setup {
  Mode mode = Mode::kSync;
  int workers = 6, n = 2;
  double timeout_s = 0.0;
  double apply_s = 0.005;
  std::uint64_t steps = 120;
  sim::TimingModel timing;
  const syncopt::worker::StragglerModel* stragglers = nullptr;
};

// A worker of the driven loop: the gradient it is computing.
struct Flight {
  int worker = 0;
  std::uint64_t version = 0, seq = 0;
  double finish = 0.0, compute_s = 0.0;
};

// The real shard loop's use of the core, with gradients delivered in a
// seeded random order among those in flight (any of them could be the next
// to arrive on a busy machine), answers sent as soon as may_answer() says.
std::vector<StepRecord> drive(const Setup& s, std::uint64_t delivery_seed) {
  syncopt::ps::ShardCore core(s.mode, s.workers, s.n, 1, s.timeout_s);
  core.use_virtual_clock(s.apply_s);
  std::mt19937_64 rng(delivery_seed);
  std::vector<Flight> flying;
  std::vector<std::uint64_t> seq(static_cast<std::size_t>(s.workers), 0);
  std::vector<double> last_finish(static_cast<std::size_t>(s.workers), 0.0);
  std::vector<std::uint64_t> waiting(static_cast<std::size_t>(s.workers), kAny);
  std::vector<char> is_waiting(static_cast<std::size_t>(s.workers), 1);  // the first pull
  std::vector<StepRecord> out;
  float mean = 0.0f;
  const auto launch = [&](int w) {
    const auto wi = static_cast<std::size_t>(w);
    sim::TimingModel::Draw d;
    d.worker = w;
    d.seq = seq[wi];
    const double c = s.timing.compute_s(d);
    const double delay = s.stragglers ? s.stragglers->delay_s(w, seq[wi], c) : 0.0;
    const double start = std::max(last_finish[wi], core.step_start());
    flying.push_back({w, core.version(), seq[wi], start + c + delay, c});
    last_finish[wi] = start + c + delay;
    ++seq[wi];
  };
  while (core.version() < s.steps) {
    bool progressed = false;
    for (int w = 0; w < s.workers; ++w) {
      const auto wi = static_cast<std::size_t>(w);
      if (is_waiting[wi] && core.may_answer(w, waiting[wi])) {
        is_waiting[wi] = 0;
        launch(w);
        core.answered(w);
        progressed = true;
      }
    }
    while (core.ready(0.0)) {
      out.push_back(core.apply(&mean, 0.0));
      progressed = true;
    }
    if (progressed) continue;
    REQUIRE(!flying.empty());  // else the loop is stuck
    std::uniform_int_distribution<std::size_t> pick(0, flying.size() - 1);
    const std::size_t i = pick(rng);
    const Flight f = flying[i];
    flying.erase(flying.begin() + static_cast<std::ptrdiff_t>(i));
    const float g = 1.0f;
    core.on_grad(f.worker, f.version, &g, 0.0f, f.compute_s, 0.0, f.seq, f.finish);
    waiting[static_cast<std::size_t>(f.worker)] = f.version;
    is_waiting[static_cast<std::size_t>(f.worker)] = 1;
  }
  return out;
}

std::vector<StepRecord> simulate(const Setup& s) {
  sim::SimSetup st;
  st.mode = s.mode;
  st.workers = s.workers;
  st.n = s.n;
  st.slice_counts = {1};
  st.total_steps = s.steps;
  st.timeout_s = s.timeout_s;
  st.timing = s.timing;
  st.timing.apply_s = s.apply_s;
  st.stragglers = s.stragglers;
  std::vector<StepRecord> out;
  st.on_step = [&](StepRecord&& r) { out.push_back(std::move(r)); };
  sim::simulate(st);
  return out;
}

void same_records(const std::vector<StepRecord>& a, const std::vector<StepRecord>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    INFO("step " << k + 1);
    CHECK(a[k].t_apply == Approx(b[k].t_apply).epsilon(1e-12));
    CHECK(a[k].used == b[k].used);
    REQUIRE(a[k].grads.size() == b[k].grads.size());
    for (std::size_t i = 0; i < a[k].grads.size(); ++i) {
      const auto& x = a[k].grads[i];
      const auto it = std::find_if(b[k].grads.begin(), b[k].grads.end(), [&](const auto& g) {
        return g.worker == x.worker && g.seq == x.seq;
      });
      REQUIRE(it != b[k].grads.end());
      CHECK(x.accepted == it->accepted);
      CHECK(x.version == it->version);
      CHECK(x.staleness == it->staleness);
      CHECK(x.arrival_s == Approx(it->arrival_s).margin(1e-12));
    }
  }
}

}  // namespace

TEST_CASE("virtual clock: any delivery order gives the simulator's records (sync, timeout)",
          "[shard_core][virtual]") {
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kBernoulli;
  sc.prob = 0.15;
  sc.factor = 4.0;
  sc.seed = 3;
  const syncopt::worker::StragglerModel stragglers(sc);
  for (const Mode mode : {Mode::kSync, Mode::kTimeout}) {
    for (const int n : {2, 4, 6}) {
      Setup s;
      s.mode = mode;
      s.n = n;
      s.timeout_s = mode == Mode::kTimeout ? 0.03 : 0.0;
      s.timing.compute_mean_s = 0.1;
      s.timing.compute_cv = 0.2;
      s.timing.seed = 11;
      s.stragglers = &stragglers;
      const auto expected = simulate(s);
      std::int64_t drops = 0;
      for (const auto& r : expected) drops += static_cast<std::int64_t>(r.grads.size()) - r.used;
      INFO("mode " << syncopt::config::mode_name(mode) << ", N = " << n << ", drops " << drops);
      if (n < s.workers) CHECK(drops > 0);  // the backups are exercised
      for (const std::uint64_t seed : {1, 2, 3}) {
        INFO("delivery order " << seed);
        same_records(drive(s, seed), expected);
      }
    }
  }
}

TEST_CASE("virtual clock: a dropped straggler starts again when its gradient is done",
          "[shard_core][virtual]") {
  // K = 3, N = 2; workers 0 and 1 take 10 ms, worker 2 takes 35 ms; apply
  // 1 ms. Updates end at 11, 22, 33, 44 ms. Worker 2's first gradient is
  // done at 35 ms, after the cutoff of version 0 (10 ms): dropped in the
  // step of version 3 (started at 33 ms), answered at 35 ms with version 3
  // and finishing at 70 ms -- not at 33 + 35 = 68 ms, as it would if its
  // lost time did not count.
  sim::TimingModel t;
  for (const double c : {0.010, 0.010, 0.035}) {
    t.recorded.add(static_cast<int>(t.recorded.per_worker.size()), 0, {c, 0.0});
  }
  t.recorded.finish();
  Setup s;
  s.workers = 3;
  s.n = 2;
  s.apply_s = 0.001;
  s.steps = 7;
  s.timing = t;
  const auto recs = drive(s, 5);
  REQUIRE(recs.size() == 7);
  for (std::size_t k = 0; k < recs.size(); ++k) {
    CHECK(recs[k].t_apply == Approx(0.011 * static_cast<double>(k + 1)));
  }
  std::vector<std::pair<double, std::uint64_t>> late;  // (time taken, version) of worker 2
  for (const auto& r : recs) {
    for (const auto& g : r.grads) {
      if (g.worker != 2) continue;
      CHECK_FALSE(g.accepted);
      late.emplace_back(r.t_start + g.arrival_s, g.version);
    }
  }
  REQUIRE(late.size() == 2);
  CHECK(late[0].first == Approx(0.035));
  CHECK(late[0].second == 0);
  CHECK(late[1].first == Approx(0.070));
  CHECK(late[1].second == 3);
  same_records(recs, simulate(s));
}
