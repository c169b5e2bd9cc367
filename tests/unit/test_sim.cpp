// The discrete-event simulation (lib/sim): hand-computed timelines
// reproduced exactly (the first-N cutoff, the shard's serialised replies,
// drops and staleness of a straggler, the timeout), the ssp bound, the same
// seed giving the same records, the fit of a real run's records, and the
// fast record writer against metrics::to_json.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <tuple>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "metrics/step_record.hpp"
#include "sim/fit.hpp"
#include "sim/network.hpp"
#include "sim/poll.hpp"
#include "sim/run.hpp"
#include "sim/simulator.hpp"

namespace sim = syncopt::sim;
using syncopt::config::Mode;
using syncopt::metrics::StepRecord;

namespace {

constexpr double kEps = 1e-12;

// A timing model where worker w always computes compute_s[w] and has no
// overhead: one recorded (compute, overhead) pair per worker.
sim::TimingModel fixed_compute(const std::vector<double>& compute_s, double apply_s) {
  sim::TimingModel t;
  for (std::size_t w = 0; w < compute_s.size(); ++w) {
    t.recorded.add(static_cast<int>(w), 0, {compute_s[w], 0.0});
  }
  t.recorded.finish();
  t.apply_s = apply_s;
  return t;
}

std::vector<StepRecord> run(sim::SimSetup st) {
  std::vector<StepRecord> out;
  st.on_step = [&](StepRecord&& r) { out.push_back(std::move(r)); };
  sim::simulate(st);
  return out;
}

const syncopt::metrics::GradRecord& grad_of(const StepRecord& r, int worker) {
  const auto it = std::find_if(r.grads.begin(), r.grads.end(),
                               [&](const auto& g) { return g.worker == worker; });
  REQUIRE(it != r.grads.end());
  return *it;
}

}  // namespace

TEST_CASE(
    "sync, b = 0: the shard's replies leave one after another and the N-th arrival is "
    "known in closed form",
    "[sim]") {
  // K = N = 4, one shard. Worker w computes c_w = 10, 20, 30, 40 ms; worker 1
  // is a fixed straggler, +100 ms. Messages of 5000 bytes (64 + 4 * 1234)
  // over 1 MB/s links: tau = 5 ms each; latency L = 1 ms; apply a = 2 ms.
  // A step starts when the shard answers all four, in worker order: reply w
  // arrives (w+1) tau + L later, the gradient (w+1) tau + L + c_w + d_w +
  // tau + L after the start (the gradients' transfers do not overlap), so
  // worker 1's is the N-th: 3 tau + 2 L + 120 ms = 0.137 s, and every step
  // lasts T = 0.137 + a = 0.139 s. The first step starts with the pulls
  // (64 bytes, h = 64 us, serialised into the shard): one h + L later.
  const double tau = 0.005, L = 0.001, a = 0.002, h = 64e-6;
  const std::vector<double> c = {0.010, 0.020, 0.030, 0.040};
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kFixed;
  sc.workers = {1};
  sc.mean_ms = 100.0;
  const syncopt::worker::StragglerModel stragglers(sc);
  sim::SimSetup st;
  st.mode = Mode::kSync;
  st.workers = 4;
  st.n = 4;
  st.slice_counts = {1234};
  st.total_steps = 20;
  st.network = {L, 1e6};
  REQUIRE(sim::message_bytes(1234) == 5000.0);
  st.timing = fixed_compute(c, a);
  st.stragglers = &stragglers;
  const auto recs = run(st);
  REQUIRE(recs.size() == 20);
  const double first = h + 3 * L + 3 * tau + 0.120;  // arrival_s of step 1's N-th
  for (std::size_t k = 0; k < recs.size(); ++k) {
    const StepRecord& r = recs[k];
    INFO("step " << r.step);
    CHECK(r.step == k + 1);
    CHECK(r.used == 4);
    REQUIRE(r.grads.size() == 4);
    const double offset = k == 0 ? h + L : 0.0;  // the first step waits for the pulls
    CHECK(r.t_apply == Approx(first + a + k * (3 * tau + 2 * L + 0.120 + a)).margin(kEps));
    for (int w = 0; w < 4; ++w) {
      const double d = w == 1 ? 0.100 : 0.0;
      const double expected = offset + (w + 2) * tau + 2 * L + c[static_cast<std::size_t>(w)] + d;
      CHECK(grad_of(r, w).arrival_s == Approx(expected).margin(kEps));
      CHECK(grad_of(r, w).accepted);
    }
  }
}

TEST_CASE("sync, b = 1: the straggler is dropped every time, with the staleness its cycle gives",
          "[sim]") {
  // K = 4, N = 3, unlimited bandwidth, L = 1 ms, a = 2 ms; c = 10, 11, 12,
  // 13 ms and worker 3 +100 ms. Step 1 ends at 3L + 12 + a = 17 ms, every
  // later one 2L + 12 + a = 16 ms after the last: t_apply(k) = 17 + 16 (k-1).
  // Worker 3 is always late: dropped, answered as soon as the shard takes
  // its gradient, which then reaches the shard 2L + 113 ms later; a gradient
  // that comes while the shard applies (the 2 ms before a t_apply) is taken
  // when the update is done. Its staleness is the count of updates between
  // two of its gradients being taken.
  const double L = 0.001, a = 0.002;
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kFixed;
  sc.workers = {3};
  sc.mean_ms = 100.0;
  const syncopt::worker::StragglerModel stragglers(sc);
  sim::SimSetup st;
  st.mode = Mode::kSync;
  st.workers = 4;
  st.n = 3;
  st.slice_counts = {100};
  st.total_steps = 60;
  st.network = {L, 0.0};
  st.timing = fixed_compute({0.010, 0.011, 0.012, 0.013}, a);
  st.stragglers = &stragglers;
  const auto recs = run(st);
  REQUIRE(recs.size() == 60);
  const auto version_at = [](double t_ms) {  // updates done by time t
    return t_ms < 17.0 ? 0 : static_cast<std::int64_t>(std::floor((t_ms - 17.0) / 16.0)) + 1;
  };
  std::vector<double> late;  // worker 3's arrivals, run time in ms
  std::int64_t drops = 0;
  for (std::size_t k = 0; k < recs.size(); ++k) {
    const StepRecord& r = recs[k];
    INFO("step " << r.step);
    CHECK(r.t_apply * 1e3 == Approx(17.0 + 16.0 * static_cast<double>(k)).margin(1e-9));
    CHECK(r.used == 3);
    for (const auto& g : r.grads) {
      if (g.worker == 3) {
        CHECK_FALSE(g.accepted);
        late.push_back((r.t_start + g.arrival_s) * 1e3);
        const double prev = late.size() == 1 ? 0.0 : late[late.size() - 2];
        CHECK(g.staleness == version_at(late.back()) - version_at(prev));
        ++drops;
      } else {
        CHECK(g.accepted);
        CHECK(g.staleness == 0);
        CHECK(g.arrival_s * 1e3 == Approx((k == 0 ? 3.0 : 2.0) + 10.0 + g.worker).margin(1e-9));
      }
    }
  }
  REQUIRE(late.size() >= 8);
  double taken = 0.0;  // when the shard answered worker 3 last (ms)
  for (std::size_t j = 0; j < late.size(); ++j) {
    double arrives = (j == 0 ? 3.0 : taken + 2.0) + 113.0;
    const double k = std::ceil((arrives - 17.0) / 16.0);              // the next update's index - 1
    if (arrives > 15.0 + 16.0 * k - 1e-9) arrives = 17.0 + 16.0 * k;  // the shard is applying
    INFO("gradient " << j << " of worker 3");
    CHECK(late[j] == Approx(arrives).margin(1e-9));
    taken = late[j];
  }
  CHECK(drops == static_cast<std::int64_t>(late.size()));
}

TEST_CASE("timeout: an update is applied timeout_s after the first fresh gradient", "[sim]") {
  // K = N = 2, timeout 5 ms, worker 1 +100 ms: worker 0's gradient arrives
  // 10 ms after each step starts and the step ends 5 ms later, alone.
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kFixed;
  sc.workers = {1};
  sc.mean_ms = 100.0;
  const syncopt::worker::StragglerModel stragglers(sc);
  sim::SimSetup st;
  st.mode = Mode::kTimeout;
  st.workers = 2;
  st.n = 2;
  st.slice_counts = {10};
  st.total_steps = 30;
  st.timeout_s = 0.005;
  st.timing = fixed_compute({0.010, 0.010}, 0.0);
  st.stragglers = &stragglers;
  const auto recs = run(st);
  REQUIRE(recs.size() == 30);
  for (std::size_t k = 0; k < recs.size(); ++k) {
    CHECK(recs[k].t_apply == Approx(0.015 * static_cast<double>(k + 1)).margin(1e-9));
    CHECK(recs[k].used == 1);
    for (const auto& g : recs[k].grads) CHECK(g.accepted == (g.worker == 0));
  }
}

TEST_CASE("stragglers: gradient s of worker w waits the model's delay_s(w, s, c)", "[sim]") {
  // Async, two workers, no network, no apply time: worker w's gradient s
  // arrives at sum over i <= s of (c_w + delay_s(w, i, c_w)).
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kExponential;
  sc.mean_ms = 7.0;
  sc.seed = 9;
  const syncopt::worker::StragglerModel stragglers(sc);
  sim::SimSetup st;
  st.mode = Mode::kAsync;
  st.workers = 2;
  st.n = 1;
  st.slice_counts = {10};
  st.total_steps = 60;
  const std::vector<double> c = {0.003, 0.005};
  st.timing = fixed_compute(c, 0.0);
  st.stragglers = &stragglers;
  std::vector<double> at(2, 0.0);
  std::vector<std::uint64_t> next(2, 0);
  for (const auto& r : run(st)) {
    REQUIRE(r.grads.size() == 1);
    const auto& g = r.grads[0];
    const auto w = static_cast<std::size_t>(g.worker);
    REQUIRE(g.seq == next[w]);
    at[w] += c[w] + stragglers.delay_s(g.worker, g.seq, c[w]);
    CHECK(r.t_start + g.arrival_s == Approx(at[w]).margin(kEps));
    ++next[w];
  }
  CHECK(next[0] + next[1] == 60);
}

TEST_CASE("ssp: no worker gets more than ssp_bound + 1 gradients ahead of the slowest", "[sim]") {
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kFixed;
  sc.workers = {2};
  sc.mean_ms = 30.0;
  const syncopt::worker::StragglerModel stragglers(sc);
  sim::SimSetup st;
  st.mode = Mode::kSsp;
  st.workers = 4;
  st.n = 1;
  st.slice_counts = {10};
  st.total_steps = 200;
  st.ssp_bound = 2;
  st.network = {0.0001, 0.0};
  st.timing.compute_mean_s = 0.005;
  st.timing.compute_cv = 0.2;
  st.stragglers = &stragglers;
  std::vector<std::int64_t> pushed(4, 0);
  std::int64_t worst = 0;
  st.on_step = [&](StepRecord&& r) {
    for (const auto& g : r.grads) pushed[static_cast<std::size_t>(g.worker)] = g.seq + 1;
    worst = std::max(worst, *std::max_element(pushed.begin(), pushed.end()) -
                                *std::min_element(pushed.begin(), pushed.end()));
  };
  sim::simulate(st);
  CHECK(worst <= st.ssp_bound + 1);
  CHECK(worst >= st.ssp_bound);  // the slow worker does hold the others back
}

TEST_CASE("the same seed gives the same records, another seed other ones", "[sim]") {
  syncopt::config::StragglerConfig sc;
  sc.model = syncopt::config::StragglerModel::kExponential;
  sc.mean_ms = 5.0;
  sc.seed = 3;
  const syncopt::worker::StragglerModel stragglers(sc);
  for (const Mode mode : {Mode::kSync, Mode::kAsync, Mode::kSoftsync, Mode::kSsp, Mode::kTimeout}) {
    INFO("mode " << syncopt::config::mode_name(mode));
    sim::SimSetup st;
    st.mode = mode;
    st.workers = 6;
    st.n = mode == Mode::kSoftsync ? 3 : (mode == Mode::kSync || mode == Mode::kTimeout ? 4 : 1);
    st.slice_counts = {1000, 1000};
    st.total_steps = 100;
    st.timeout_s = 0.004;
    st.ssp_bound = 1;
    st.poll_max_s = 500e-6;
    st.network = sim::network_params(20.0, 1.0);
    st.timing.compute_mean_s = 0.005;
    st.timing.compute_cv = 0.3;
    st.timing.apply_s = 0.0002;
    st.stragglers = &stragglers;
    const auto text = [&](std::uint64_t seed) {
      sim::SimSetup s = st;
      s.timing.seed = seed;
      std::string out;
      s.on_step = [&](StepRecord&& r) {
        r.clock = "simulated";
        syncopt::metrics::append_json_line(out, r);
      };
      sim::simulate(s);
      return out;
    };
    const std::string a = text(1);
    CHECK(a == text(1));
    CHECK(a != text(2));
  }
}

TEST_CASE("compute draws have the mean and spread asked for", "[sim]") {
  for (const auto dist :
       {syncopt::config::ComputeDist::kLognormal, syncopt::config::ComputeDist::kGamma}) {
    double sum = 0.0, sum2 = 0.0;
    const int n = 200000;
    for (int i = 0; i < n; ++i) {
      const double x = sim::draw(dist, 2.0, 0.5, 7, static_cast<std::uint64_t>(i % 10),
                                 static_cast<std::uint64_t>(i / 10));
      sum += x;
      sum2 += x * x;
    }
    const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
    CHECK(mean == Approx(2.0).epsilon(0.01));
    CHECK(sd / mean == Approx(0.5).epsilon(0.03));
  }
  CHECK(sim::draw(syncopt::config::ComputeDist::kGamma, 3.0, 0.0, 1, 2, 3) == 3.0);
}

TEST_CASE("network: a link carries one message at a time", "[sim]") {
  sim::Network net({0.001, 1000.0}, 3);  // 1 ms latency, 1000 bytes/s
  CHECK(net.transfer(0, 1, 0.0, 500.0) == Approx(0.501));
  CHECK(net.transfer(0, 2, 0.0, 500.0) == Approx(1.001));  // after the first, same sender
  CHECK(net.transfer(2, 1, 0.2, 100.0) == Approx(0.601));  // after the first, same receiver
  CHECK(net.transfer(2, 0, 5.0, 0.0) == Approx(5.001));
}

TEST_CASE("network: the ranks of one host share its link and cross none within it", "[sim]") {
  // Shards 0 and 1 on host 0, workers (nodes 2, 3) on host 1 and host 2.
  CHECK(sim::host_layout(2, 2, 2, 1) == std::vector<int>{0, 0, 1, 2});
  CHECK(sim::host_layout(3, 4, 1, 2) == std::vector<int>{0, 1, 2, 3, 3, 4, 4});
  CHECK(sim::host_layout(5, 1, 2, 1) == std::vector<int>{0, 0, 1, 1, 2, 3});
  sim::Network shared({0.001, 1000.0}, 4, sim::host_layout(2, 2, 2, 1));
  CHECK(shared.transfer(0, 2, 0.0, 500.0) == Approx(0.501));
  // Shard 1 replies on host 0's outgoing link, after shard 0's reply.
  CHECK(shared.transfer(1, 3, 0.0, 500.0) == Approx(1.001));
  CHECK(shared.transfer(0, 1, 0.0, 5000.0) == Approx(0.001));  // same host: latency only
  // Each shard a host of its own (the default): the two replies at once.
  sim::Network own({0.001, 1000.0}, 4);
  CHECK(own.transfer(0, 2, 0.0, 500.0) == Approx(0.501));
  CHECK(own.transfer(1, 3, 0.0, 500.0) == Approx(0.501));
}

namespace {

// Fair links: hands the messages over, runs the network until it is idle
// and returns each message's arrival, by its event's seq.
std::map<std::uint64_t, double> fair_arrivals(
    sim::Network& net, const std::vector<std::tuple<int, int, double, double>>& messages) {
  std::map<std::uint64_t, double> at;
  std::uint64_t n = 0;
  for (const auto& [from, to, ready, bytes] : messages) {
    sim::Event e;
    e.seq = n++;
    if (net.send(from, to, ready, bytes, e)) at[e.seq] = e.t;
  }
  for (double t = net.next_time(); std::isfinite(t); t = net.next_time()) {
    net.advance(t, [&](const sim::Event& e) { at[e.seq] = e.t; });
  }
  return at;
}

}  // namespace

TEST_CASE("network, fair: the connections in flight share each link max-min fairly", "[sim]") {
  const auto fair = syncopt::config::LinkSharing::kFair;
  // 1 ms latency, 1000 bytes/s. Two replies of one sender at once: each
  // gets half its link, both end together (serial: 0.5 s and 1.0 s).
  sim::Network two({0.001, 1000.0, fair}, 3);
  auto at = fair_arrivals(two, {{0, 1, 0.0, 500.0}, {0, 2, 0.0, 500.0}});
  CHECK(at[0] == Approx(1.001));
  CHECK(at[1] == Approx(1.001));
  // Max-min: A = 0->1, B = 0->2, C = 3->2, D = 4->2, 1000 bytes each. Host
  // 2's incoming link is the bottleneck (a third each); A takes what B
  // leaves of host 0's link (2/3) and ends at 1.5 s; B, C, D keep a third
  // (host 2's link) and end at 3 s.
  sim::Network mm({0.001, 1000.0, fair}, 5);
  at = fair_arrivals(
      mm, {{0, 1, 0.0, 1000.0}, {0, 2, 0.0, 1000.0}, {3, 2, 0.0, 1000.0}, {4, 2, 0.0, 1000.0}});
  CHECK(at[0] == Approx(1.501));
  for (std::uint64_t k = 1; k < 4; ++k) CHECK(at[k] == Approx(3.001));
  // One connection's messages go in turn; a message ready later starts
  // then, and shares the link from then on: 0->1 runs alone to 0.5 s, then
  // shares with 0->2 (ready at 0.5); each gets 500 bytes/s.
  sim::Network fifo({0.001, 1000.0, fair}, 3);
  at = fair_arrivals(fifo, {{0, 1, 0.0, 250.0}, {0, 1, 0.0, 500.0}, {0, 2, 0.5, 250.0}});
  CHECK(at[0] == Approx(0.251));
  CHECK(at[1] == Approx(1.001));  // 250 bytes alone to 0.5 s, 250 at half the rate
  CHECK(at[2] == Approx(1.001));
  // Within one host: no link, latency only, known at once.
  sim::Network host({0.001, 1000.0, fair}, 3, {0, 0, 1});
  sim::Event e;
  CHECK(host.send(0, 1, 2.0, 5000.0, e));
  CHECK(e.t == Approx(2.001));
  CHECK(std::isinf(host.next_time()));
}

TEST_CASE("sync, b = 0, fair links: a shard's replies share its link, so do the gradients",
          "[sim]") {
  // K = N = 2, one shard, compute c = 10 ms, apply a = 2 ms, messages of
  // 5000 bytes over 1 MB/s links (tau = 5 ms alone), latency L = 1 ms. Both
  // replies share the shard's outgoing link and arrive together 2 tau + L
  // after the update; both workers compute and send together, and the
  // gradients share its incoming link: 2 tau + L. A step lasts
  // 4 tau + 2 L + c + a = 0.034 s (serial links: 3 tau + 2 L + c + a).
  const double tau = 0.005, L = 0.001, a = 0.002, c = 0.010;
  for (const auto sharing :
       {syncopt::config::LinkSharing::kFair, syncopt::config::LinkSharing::kSerial}) {
    sim::SimSetup st;
    st.mode = Mode::kSync;
    st.workers = 2;
    st.n = 2;
    st.slice_counts = {1234};
    st.total_steps = 10;
    st.network = {L, 1e6, sharing};
    st.timing = fixed_compute({c, c}, a);
    const auto recs = run(st);
    REQUIRE(recs.size() == 10);
    const double step =
        (sharing == syncopt::config::LinkSharing::kFair ? 4 : 3) * tau + 2 * L + c + a;
    for (std::size_t k = 1; k < recs.size(); ++k) {
      INFO("step " << recs[k].step);
      CHECK(recs[k].t_apply - recs[k - 1].t_apply == Approx(step).margin(1e-9));
    }
  }
}

TEST_CASE("poll: the idle loop's sleeps grow to the cap", "[sim]") {
  // Sleeps 40, 80, 160, 320, then 500 us: tests at 40, 120, 280, 600, 1100 us.
  CHECK(sim::sleep_at(0.0, 500e-6) == 0.0);
  CHECK(sim::sleep_at(1e-6, 500e-6) == Approx(40e-6));
  CHECK(sim::sleep_at(40e-6, 500e-6) == Approx(40e-6));
  CHECK(sim::sleep_at(41e-6, 500e-6) == Approx(80e-6));
  CHECK(sim::sleep_at(121e-6, 500e-6) == Approx(160e-6));
  CHECK(sim::sleep_at(601e-6, 500e-6) == Approx(500e-6));
  CHECK(sim::sleep_at(30e-6, 500e-6) == Approx(40e-6));
  CHECK(sim::sleep_at(100e-6, 500e-6) == Approx(80e-6));
  CHECK(sim::sleep_at(250e-6, 500e-6) == Approx(160e-6));
  CHECK(sim::sleep_at(590e-6, 500e-6) == Approx(320e-6));
  CHECK(sim::sleep_at(10.0, 500e-6) == Approx(500e-6));
  CHECK(sim::sleep_at(10.0, 0.0) == 0.0);
  CHECK(sim::next_poll(1.0, 1.0 + 100e-6, 500e-6, 0.5) == Approx(1.0 + 140e-6));
}

TEST_CASE("fit: compute and overhead pairs from a run's records", "[sim]") {
  // Two workers, sync b = 0, no stragglers. Worker w's gradient s arrives at
  // A; the shard answered its previous push at R = max(A_prev, start of the
  // version s was computed on); overhead = A - R - compute.
  const auto dir = std::filesystem::temp_directory_path() / "syncopt-test-fit";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.toml") << "[train]\nmode = \"sync\"\nbackups = 0\n";
  std::ofstream steps(dir / "steps.jsonl");
  // Version 0 starts at 0, 1 at 0.10, 2 at 0.25. Worker 0: arrivals 0.05 (v0),
  // 0.16 (v1), 0.30 (v2); worker 1: 0.09, 0.22, 0.31.
  const double t_start[] = {0.0, 0.10, 0.25};
  const double arrive[2][3] = {{0.05, 0.16, 0.30}, {0.09, 0.22, 0.31}};
  const double compute[2][3] = {{0.02, 0.03, 0.01}, {0.04, 0.05, 0.02}};
  for (int v = 0; v < 3; ++v) {
    StepRecord r;
    r.step = static_cast<std::uint64_t>(v + 1);
    r.version = static_cast<std::uint64_t>(v);
    r.t_start = t_start[v];
    r.t_apply = v < 2 ? t_start[v + 1] : 0.33;
    r.used = 2;
    for (int w = 0; w < 2; ++w) {
      syncopt::metrics::GradRecord g;
      g.worker = w;
      g.version = static_cast<std::uint64_t>(v);
      g.accepted = true;
      g.seq = static_cast<std::uint64_t>(v);
      g.arrival_s = arrive[w][v] - t_start[v];
      g.compute_s = compute[w][v];
      r.grads.push_back(g);
    }
    std::string line;
    syncopt::metrics::append_json_line(line, r);
    steps << line;
  }
  steps.close();
  const sim::Fit fit = sim::fit_run(dir, sim::TimingModel{}, {0.0, 0.0}, 10, 0.0);
  REQUIRE(fit.workers == 2);
  REQUIRE(fit.samples == 4);
  const auto& rec = fit.timing.recorded;
  // worker 0, s = 1: R = max(0.05, 0.10) = 0.10, o = 0.16 - 0.10 - 0.03 = 0.03
  CHECK(rec.per_worker[0][rec.at_round[0].at(0)].overhead_s == Approx(0.03));
  // worker 0, s = 2: R = max(0.16, 0.25) = 0.25, o = 0.30 - 0.25 - 0.01 = 0.04
  CHECK(rec.per_worker[0][rec.at_round[0].at(1)].overhead_s == Approx(0.04));
  // worker 1, s = 1: R = 0.10, o = 0.22 - 0.10 - 0.05 = 0.07; s = 2: R = 0.25,
  // o = 0.31 - 0.25 - 0.02 = 0.04
  CHECK(rec.per_worker[1][rec.at_round[1].at(0)].overhead_s == Approx(0.07));
  CHECK(rec.per_worker[1][rec.at_round[1].at(1)].compute_s == Approx(0.02));
  // Both workers were answered at 0.10 with version 1 and at 0.25 with
  // version 2: two rounds (ids 0, 1) of two workers each.
  CHECK(rec.by_group[2].size() == 2);
  // apply: t_apply - (t_start + last accepted arrival): 0.01, 0.03, 0.02
  std::vector<double> apply = fit.timing.apply;
  std::sort(apply.begin(), apply.end());
  CHECK(apply[0] == Approx(0.01));
  CHECK(apply[2] == Approx(0.03));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the step-record writer reads back field for field, floats as floats", "[sim][records]") {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> u(-3.0, 1e4);
  for (int i = 0; i < 200; ++i) {
    StepRecord r;
    r.step = rng() % 100000;
    r.shard = static_cast<int>(rng() % 5);
    r.version = rng();
    r.t_start = u(rng);
    r.t_apply = i % 7 == 0 ? 2.0 : u(rng) * 1e-7;
    r.lr = static_cast<float>(u(rng));
    r.loss = i % 5 == 0 ? 0.0f : static_cast<float>(u(rng));
    r.used = static_cast<int>(rng() % 1000);
    r.n = i % 3 == 0 ? static_cast<int>(rng() % 50) + 1 : 0;
    r.clock = i % 2 == 0 ? "simulated" : "";
    for (std::uint64_t k = rng() % 4; k-- > 0;) {
      syncopt::metrics::GradRecord g;
      g.worker = static_cast<int>(rng() % 1000);
      g.arrival_s = u(rng) * 1e-9;
      g.version = rng();
      g.accepted = rng() % 2 == 0;
      g.staleness = static_cast<std::int64_t>(rng() % 50) - 3;
      g.compute_s = u(rng);
      g.loss = static_cast<float>(u(rng));
      g.seq = rng();
      r.grads.push_back(g);
    }
    std::string line;
    syncopt::metrics::append_json_line(line, r);
    REQUIRE(line.back() == '\n');
    const auto j = nlohmann::json::parse(line);
    // Floats stay floats ("2.0", not "2"), so that a reader keeps the type.
    CHECK(j["t_apply"].is_number_float());
    const StepRecord b = syncopt::metrics::step_from_json(j, "line");
    CHECK(b.step == r.step);
    CHECK(b.shard == r.shard);
    CHECK(b.version == r.version);
    CHECK(b.t_start == r.t_start);
    CHECK(b.t_apply == r.t_apply);
    CHECK(b.lr == r.lr);
    CHECK(b.loss == r.loss);
    CHECK(b.used == r.used);
    CHECK(b.n == r.n);
    CHECK(b.clock == r.clock);
    CHECK(j.contains("n") == (r.n > 0));
    CHECK(j.contains("clock") == !r.clock.empty());
    REQUIRE(b.grads.size() == r.grads.size());
    for (std::size_t k = 0; k < r.grads.size(); ++k) {
      CHECK(b.grads[k].worker == r.grads[k].worker);
      CHECK(b.grads[k].arrival_s == r.grads[k].arrival_s);
      CHECK(b.grads[k].version == r.grads[k].version);
      CHECK(b.grads[k].accepted == r.grads[k].accepted);
      CHECK(b.grads[k].staleness == r.grads[k].staleness);
      CHECK(b.grads[k].compute_s == r.grads[k].compute_s);
      CHECK(b.grads[k].loss == r.grads[k].loss);
      CHECK(b.grads[k].seq == r.grads[k].seq);
    }
  }
}

TEST_CASE("make_setup: K, N, the run's length and the message sizes from the config", "[sim]") {
  auto cfg = syncopt::config::parse(
      "[train]\nmode = \"sync\"\nbackups = 2\nsteps = 0\nepochs = 2.0\nbatch = 10\n"
      "[data]\nname = \"synthetic\"\nsynthetic_train = 1000\n[cluster]\nps = 3\n"
      "[sim]\nworkers = 12\n",
      "t.toml", {});
  const auto st = sim::make_setup(cfg, 100, sim::TimingModel{}, nullptr);
  CHECK(st.workers == 12);
  CHECK(st.n == 10);
  CHECK(st.slice_counts == std::vector<std::size_t>{34, 33, 33});
  CHECK(st.target_examples == 2000);
  cfg.train.backups = 12;
  CHECK_THROWS_AS(sim::make_setup(cfg, 100, sim::TimingModel{}, nullptr), syncopt::ConfigError);
  cfg.train.backups = 0;
  cfg.train.mode = Mode::kAllreduce;
  CHECK_THROWS_AS(sim::make_setup(cfg, 100, sim::TimingModel{}, nullptr), syncopt::ConfigError);
}
