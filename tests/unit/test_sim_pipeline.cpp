// The simulator's pipelined exchange (lib/sim) on timelines worked out by
// hand (one layer per bucket, and two at the default bucket size), and the
// placement of whole layers on shards by bytes (layout::balanced_slices)
// against every placement there is.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <random>

#include "common/error.hpp"
#include "config/config.hpp"
#include "layout/placement.hpp"
#include "sim/network.hpp"
#include "sim/simulator.hpp"

namespace sim = syncopt::sim;
using syncopt::config::Mode;
using syncopt::metrics::StepRecord;

namespace {

// One worker, one shard, N = 1, a 30 ms gradient, 1 MB/s links, no latency.
// Layers of 250, 250 and 500 floats with 1/2, 1/4 and 1/4 of the FLOPs;
// buckets of at least 1000 bytes: one per layer (64-byte headers: 1.064,
// 1.064 and 2.064 ms on the wire).
sim::SimSetup three_layers(bool pipeline, double apply_s) {
  sim::SimSetup st;
  st.mode = Mode::kSync;
  st.workers = 1;
  st.n = 1;
  st.slice_counts = {1000};
  st.layers = {{250, 0.5}, {250, 0.25}, {500, 0.25}};
  st.pipeline = pipeline;
  st.bucket_bytes = 1000.0;
  st.total_steps = 6;
  st.network = {0.0, 1e6};
  st.timing.recorded.add(0, 0, {0.030, 0.0});
  st.timing.recorded.finish();
  st.timing.apply_s = apply_s;
  return st;
}

std::vector<double> step_times(sim::SimSetup st) {
  std::vector<double> t_apply;
  st.on_step = [&](StepRecord&& r) { t_apply.push_back(r.t_apply); };
  sim::simulate(st);
  std::vector<double> out;
  for (std::size_t k = 1; k < t_apply.size(); ++k) out.push_back(t_apply[k] - t_apply[k - 1]);
  return out;
}

// Stragglers: each step 3x slower with probability 10 %.
const syncopt::worker::StragglerModel& bernoulli_stragglers() {
  static const syncopt::worker::StragglerModel model([] {
    syncopt::config::StragglerConfig sc;
    sc.model = syncopt::config::StragglerModel::kBernoulli;
    sc.prob = 0.1;
    sc.factor = 3.0;
    return sc;
  }());
  return model;
}

// `workers` workers, N = n, pipelined: a 30 ms gradient (cv 0.2), a 1 ms
// apply, bernoulli_stragglers(); the layers are the caller's.
sim::SimSetup straggling(int workers, int n) {
  sim::SimSetup st = three_layers(true, 0.001);
  st.workers = workers;
  st.n = n;
  st.timing = sim::TimingModel{};
  st.timing.compute_mean_s = 0.03;
  st.timing.compute_cv = 0.2;
  st.timing.apply_s = 0.001;
  st.stragglers = &bernoulli_stragglers();
  return st;
}

// The largest slice, then the sum of squares, of the best placement of
// `counts` on `shards` shards by trying every set of cuts.
std::pair<std::size_t, double> brute_force(const std::vector<std::size_t>& counts, int shards) {
  const std::size_t G = counts.size();
  std::pair<std::size_t, double> best{std::numeric_limits<std::size_t>::max(), 0.0};
  // Cuts as a bitmask over the G - 1 gaps with shards - 1 bits set.
  for (std::uint32_t mask = 0; mask < (1u << (G - 1)); ++mask) {
    if (__builtin_popcount(mask) != shards - 1) continue;
    std::size_t largest = 0, part = 0;
    double squares = 0.0;
    for (std::size_t g = 0; g < G; ++g) {
      part += counts[g];
      if (g + 1 == G || (mask >> g) & 1u) {
        largest = std::max(largest, part);
        squares += static_cast<double>(part) * static_cast<double>(part);
        part = 0;
      }
    }
    if (largest < best.first || (largest == best.first && squares < best.second)) {
      best = {largest, squares};
    }
  }
  return best;
}

}  // namespace

TEST_CASE(
    "pipelined exchange: each layer's forward waits for its parameters, buckets go "
    "out during backward",
    "[sim][pipeline]") {
  // No apply time. Replies: the buckets arrive 1.064, 2.128 and 4.192 ms
  // after the update. Forward (10 ms: 5, 2.5, 2.5) from the first: layer 0
  // until 6.064, layer 1 until 8.564, layer 2 until 11.064; backward (20 ms:
  // 5, 5, 10 from the top): layer 2's bucket leaves at 16.064 (arrives
  // 18.128), layer 1's at 21.064 (22.128), layer 0's at 31.064, in at
  // 32.128 ms: the step. Without the pipeline: 4.064 + 30 + 4.064 ms.
  for (const double t : step_times(three_layers(true, 0.0))) CHECK(t == Approx(0.032128));
  for (const double t : step_times(three_layers(false, 0.0))) CHECK(t == Approx(0.038128));
  // An apply of 4 ms, split by bytes: the buckets are applied 1, 2 and 4 ms
  // in and arrive 2.064, 3.128 and 6.064 ms after the update began; forward
  // from 2.064 ends at 12.064 (layer 2 waits for nothing), backward sends
  // the last bucket at 32.064, in at 33.128: the next update begins then.
  // Without: the replies wait for the whole apply, 4 + 38.128 ms.
  for (const double t : step_times(three_layers(true, 0.004))) CHECK(t == Approx(0.033128));
  for (const double t : step_times(three_layers(false, 0.004))) CHECK(t == Approx(0.042128));
  // Links ten times slower (10.64, 10.64, 20.64 ms a bucket): the buckets
  // arrive at 10.64, 21.28 and 41.92 ms; layer 0 runs 10.64-15.64, layer 1
  // waits for its parameters until 21.28 (to 23.78), layer 2 until 41.92
  // (to 44.42); backward: layer 2's bucket leaves at 49.42 (in at 70.06),
  // layer 1's waits for the link until 70.06 (80.70), layer 0's is done at
  // 64.42 and leaves at 80.70: in at 91.34 ms. Without: 40.64 + 30 + 40.64.
  for (const bool pipeline : {true, false}) {
    sim::SimSetup st = three_layers(pipeline, 0.0);
    st.network = {0.0, 1e5};
    for (const double t : step_times(st)) CHECK(t == Approx(pipeline ? 0.09134 : 0.11128));
  }
}

TEST_CASE(
    "pipelined exchange at the default bucket size: a bucket of two layers leaves when its "
    "lower layer is done",
    "[sim][pipeline]") {
  // exchange.bucket_bytes as the config has it, and four layers of a
  // quarter of it (a quarter of the FLOPs each): two buckets of two layers.
  // One worker, one shard, a 30 ms gradient, no apply time, a link that
  // carries a bucket in 20 ms.
  const double bucket_bytes = static_cast<double>(syncopt::config::Config{}.exchange.bucket_bytes);
  CHECK(sim::SimSetup{}.bucket_bytes == bucket_bytes);
  const auto layer = static_cast<std::size_t>(bucket_bytes / 8.0);  // floats
  sim::SimSetup st = three_layers(true, 0.0);
  st.slice_counts = {4 * layer};
  st.layers = {{layer, 0.25}, {layer, 0.25}, {layer, 0.25}, {layer, 0.25}};
  st.bucket_bytes = bucket_bytes;
  st.network = {0.0, sim::message_bytes(2 * layer) / 0.020};
  // Replies: bucket 0 (layers 0-1) in at 20 ms, bucket 1 (layers 2-3) at
  // 40. Forward (10 ms, 2.5 a layer): layers 0 and 1 until 25, layer 2
  // waits for its bucket until 40 (to 42.5), layer 3 until 45. Backward
  // (20 ms, 5 a layer, from the top): layer 3 is done at 50, layer 2 at 55,
  // when bucket 1 leaves (in at 75); layers 1 and 0 are done at 65, and
  // bucket 0 waits for the link until 75: in at 95 ms, the step. (Bucket 1
  // sent once its top layer is done, at 50 with half its gradient still to
  // compute, would make it 90 ms.)
  const auto steps = step_times(st);
  REQUIRE(steps.size() == 5);
  for (const double t : steps) CHECK(t == Approx(0.095));
  // Without the pipeline: the whole slice each way and the whole step.
  sim::SimSetup whole = st;
  whole.pipeline = false;
  const double wire_s = sim::message_bytes(4 * layer) / st.network.bytes_per_s;
  for (const double t : step_times(whole)) CHECK(t == Approx(2 * wire_s + 0.030));
}

TEST_CASE("pipelined exchange: a straggler is slow at every layer, its upper buckets late with it",
          "[sim][pipeline]") {
  // three_layers() on links ten times slower (10.64, 10.64, 20.64 ms a
  // bucket), the worker a fixed 2x straggler: its 30 ms gradient takes 60,
  // spread over the layers like the compute (docs/design.md §7): forward 20
  // (10, 5, 5), backward 40 (10, 10, 20 from the top). Buckets arrive at
  // 10.64, 21.28, 41.92 ms; layer 0 runs 10.64-20.64, layer 1 21.28-26.28,
  // layer 2 41.92-46.92; backward: layer 2's bucket leaves at 56.92 (in at
  // 77.56), layer 1's at 66.92 waits for the link until 77.56 (88.20),
  // layer 0 is done at 86.92 and its bucket leaves at 88.20: in at 98.84.
  // (The delay slept after backward, as the worker once did: layer 2's
  // bucket would leave at 49.42 and the last at 94.42, in at 105.06 ms.)
  // Without the pipeline: 40.64 + 60 + 40.64 ms, as ever.
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kFixed;
  sc.factor = 2.0;
  const syncopt::worker::StragglerModel slow(sc);
  for (const bool pipeline : {true, false}) {
    sim::SimSetup st = three_layers(pipeline, 0.0);
    st.network = {0.0, 1e5};
    st.stragglers = &slow;
    const auto steps = step_times(st);
    REQUIRE(steps.size() == 5);
    for (const double t : steps) CHECK(t == Approx(pipeline ? 0.09884 : 0.14128));
  }
}

TEST_CASE("pipelined exchange: with stragglers and backups it is never slower (one shard)",
          "[sim][pipeline]") {
  // One shard: the pipeline only starts layers earlier and sends gradients
  // sooner. (Several shards: the next test.)
  for (const int n : {4, 5, 6}) {
    sim::SimSetup st = straggling(6, n);
    st.total_steps = 100;
    st.layers = {{300, 0.1}, {200, 0.4}, {400, 0.2}, {100, 0.3}};
    sim::SimSetup off = st;
    off.pipeline = false;
    double on = 0.0, whole = 0.0;
    for (const double t : step_times(st)) on += t;
    for (const double t : step_times(off)) whole += t;
    INFO("N = " << n << ": " << on << " s pipelined, " << whole << " s not");
    CHECK(on < whole);
  }
}

TEST_CASE(
    "pipelined exchange: agreeing shards are all asked at the end of backward so fresh "
    "gradients are not rejected",
    "[sim][pipeline]") {
  // A worker asks a shard for parameters with that shard's bucket 0, and it
  // sends every shard's bucket 0 after its whole backward, shard 0's first
  // (worker.cpp). If a shard were asked as soon as its own layers were done, a late worker
  // would be answered by the upper shards an update before shard 0 answers
  // it, hold versions one apart, and have its next gradients rejected by
  // shard 0 as not fresh on every shard, step after step: the simulator did
  // that once, and showed agreeing shards pipelined as slower than whole
  // (K = 53, S = 17: 518 rejected in 200 updates).
  sim::SimSetup st = straggling(12, 10);
  st.agree = true;
  st.total_steps = 200;
  st.layers = {{300, 0.1}, {200, 0.3}, {400, 0.2}, {100, 0.1}, {250, 0.2}, {150, 0.1}};
  st.slice_counts = {500, 500, 400};  // layers 0-1, 2-3, 4-5
  struct Outcome {
    double seconds = 0.0;  // first to last update
    std::size_t grads = 0, rejected_fresh = 0;
  };
  const auto run = [](sim::SimSetup setup) {
    Outcome o;
    double first = -1.0;
    setup.on_step = [&](StepRecord&& r) {
      if (first < 0.0) first = r.t_apply;
      o.seconds = r.t_apply - first;
      for (const auto& g : r.grads) {
        ++o.grads;
        if (!g.accepted && g.version == r.version) ++o.rejected_fresh;
      }
    };
    sim::simulate(setup);
    return o;
  };
  sim::SimSetup off = st;
  off.pipeline = false;
  const Outcome on = run(st), whole = run(off);
  INFO("fresh but rejected: " << on.rejected_fresh << " of " << on.grads << " pipelined, "
                              << whole.rejected_fresh << " of " << whole.grads << " not; "
                              << on.seconds << " s against " << whole.seconds << " s");
  // Some are rejected either way (a follower still one update behind
  // answers a late worker before shard 0's decision reaches it).
  CHECK(on.rejected_fresh * 100 <= 4 * on.grads);
  CHECK(on.rejected_fresh <= 2 * whole.rejected_fresh);
  CHECK(on.seconds < whole.seconds);
}

TEST_CASE("balanced_slices: whole layers, the least largest slice, then the most even",
          "[layout]") {
  // The trainer's placement (layout/placement.hpp), on groups of these sizes.
  const auto balanced_slices = [](const std::vector<std::size_t>& counts, int shards) {
    std::vector<syncopt::layout::Group> groups;
    std::size_t offset = 0;
    for (const std::size_t c : counts) {
      groups.push_back({"g" + std::to_string(groups.size()), offset, c});
      offset += c;
    }
    return syncopt::layout::balanced_slices(groups, shards);
  };
  const auto counts_of = [](const std::vector<syncopt::layout::Slice>& s) {
    std::vector<std::size_t> c;
    for (const auto& x : s) c.push_back(x.count);
    return c;
  };
  CHECK(counts_of(balanced_slices({1, 1, 1, 1}, 2)) == std::vector<std::size_t>{2, 2});
  CHECK(counts_of(balanced_slices({10, 1, 1, 1, 1}, 2)) == std::vector<std::size_t>{10, 4});
  CHECK(counts_of(balanced_slices({5, 5, 5}, 3)) == std::vector<std::size_t>{5, 5, 5});
  CHECK_THROWS_AS(balanced_slices({5, 5}, 3), syncopt::ConfigError);
  std::mt19937 rng(7);
  for (int trial = 0; trial < 300; ++trial) {
    const std::size_t G = 1 + rng() % 10;
    const int S = 1 + static_cast<int>(rng() % std::min<std::size_t>(G, 5));
    std::vector<std::size_t> counts(G);
    for (auto& c : counts) c = 1 + rng() % (trial % 2 ? 1000 : 20);
    const auto slices = balanced_slices(counts, S);
    REQUIRE(slices.size() == static_cast<std::size_t>(S));
    std::size_t offset = 0, largest = 0;
    double squares = 0.0;
    std::size_t g = 0, covered = 0;
    for (const auto& s : slices) {
      CHECK(s.offset == offset);
      CHECK(s.count > 0);
      // Whole layers: the slice ends where a layer ends.
      std::size_t held = 0;
      while (held < s.count && g < G) held += counts[g++];
      CHECK(held == s.count);
      offset += s.count;
      covered += s.count;
      largest = std::max(largest, s.count);
      squares += static_cast<double>(s.count) * static_cast<double>(s.count);
    }
    std::size_t total = 0;
    for (const auto c : counts) total += c;
    CHECK(covered == total);
    const auto best = brute_force(counts, S);
    INFO("trial " << trial << ", " << G << " layers on " << S << " shards");
    CHECK(largest == best.first);
    CHECK(squares == best.second);
  }
}
