// The real worker against a scripted shard under MPI (2 ranks: shard 0,
// worker 1; async, the pipelined exchange at the default bucket size, the
// reference CNN: two buckets of two layers, conv1..conv2 | fc1..fc2).
//
// The script decides every version: its shard is a ShardCore with two
// phantom workers besides the real one, whose buckets it applies at chosen
// points between the real worker's read and its push (a phantom's top
// bucket before the read, its bucket 0 after: the top bucket runs ahead).
// So each of the real gradient's buckets has a staleness known exactly,
// different between buckets, and each must carry the version of the
// parameters bucket it was computed on (docs/design.md §3, async and ssp).
//
// The worker's network tells the shard how far backward has come, with a
// message in line with the gradient buckets (the same sender, communicator
// and tag, so MPI keeps their order): a bucket must leave only once every
// one of its layers is final (§4). Nothing here depends on timing. Ranks
// agree on the verdict before Catch2 asserts it.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/mpi.hpp"
#include "comm/peers.hpp"
#include "comm/protocol.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "data/dataset.hpp"
#include "layout/placement.hpp"
#include "layout/roles.hpp"
#include "mpi_test_main.hpp"
#include "nn/cpu_network.hpp"
#include "nn/graph.hpp"
#include "ps/shard_core.hpp"
#include "train/inputs.hpp"
#include "worker/straggler.hpp"
#include "worker/worker.hpp"

using namespace syncopt;
using comm::Kind;

namespace {

constexpr int kShard = 0, kWorkerRank = 1;
constexpr std::uint32_t kMarker = 0x4b52414du;  // "MARK": backward's progress, not a header
constexpr int kMarkerBytes = 3 * sizeof(std::uint32_t);

config::Config async_cnn() {
  config::Config cfg;
  cfg.train.mode = config::Mode::kAsync;
  cfg.train.batch = 8;
  cfg.data.name = config::DataSet::kSynthetic;
  cfg.model.name = config::ModelName::kCnn;
  cfg.cluster.dead_after_s = 60.0;  // the script never waits long
  return cfg;
}

// Hooks that tell the shard, before the worker hears it, that grad[offset,
// end) is final.
class ReportingHooks final : public nn::StepHooks {
 public:
  ReportingHooks(nn::StepHooks& worker, MPI_Comm data)
      : StepHooks(worker.param_count()), m_worker(worker), m_data(data) {}
  void need_params(std::size_t offset, std::size_t count) override {
    m_worker.need_params(offset, count);
  }
  void grads_ready(std::size_t offset, float loss) override {
    const std::uint32_t marker[3] = {kMarker, static_cast<std::uint32_t>(offset), 0};
    SYNCOPT_CHECK_MPI(MPI_Send(marker, 3, MPI_UINT32_T, kShard, comm::kTagToShard, m_data));
    m_worker.grads_ready(offset, loss);
  }

 private:
  nn::StepHooks& m_worker;
  MPI_Comm m_data;
};

// The CPU network, its staged step reported (ReportingHooks).
class ReportingNetwork final : public nn::Network {
 public:
  ReportingNetwork(nn::Network& inner, MPI_Comm data) : m_inner(inner), m_data(data) {}
  float train_step(const float* params, const float* images, const std::int32_t* labels, int batch,
                   float* grad) override {
    return m_inner.train_step(params, images, labels, batch, grad);
  }
  float train_step_staged(const float* params, const float* images, const std::int32_t* labels,
                          int batch, float* grad, nn::StepHooks& hooks) override {
    ReportingHooks reporting(hooks, m_data);
    return m_inner.train_step_staged(params, images, labels, batch, grad, reporting);
  }
  void predict(const float* params, const float* images, int batch, float* logits) override {
    m_inner.predict(params, images, batch, logits);
  }
  int max_batch() const override { return m_inner.max_batch(); }

 private:
  nn::Network& m_inner;
  MPI_Comm m_data;
};

// One step of the script: which phantoms (core workers 1, 2) apply their
// top bucket before the real worker reads, which apply their bucket 0 after
// it read, which apply a whole gradient after it read; and the staleness
// the real gradient's buckets must then have (bucket 0, bucket 1).
struct Step {
  std::vector<int> tops_before, bottoms_after, whole_after;
  std::vector<std::int64_t> staleness;
};

// Each phantom reads at the step's start and is done by its end, so every
// step starts with both buckets at the same version.
const std::vector<Step>& script() {
  static const std::vector<Step> steps{
      {{}, {}, {}, {0, 0}},          // alone: fresh
      {{1}, {1}, {}, {1, 0}},        // read bucket 1 after phantom 1's top: only bucket 0 stale
      {{}, {}, {1}, {1, 1}},         // phantom 1's whole gradient in between: both stale
      {{1, 2}, {1, 2}, {}, {2, 0}},  // two tops before the read
      {{1}, {1}, {2}, {2, 1}},       // a top before, a whole gradient after
      {{}, {}, {}, {0, 0}},          // alone again
  };
  return steps;
}

// The scripted shard: its core, its messages, and what it found wrong.
class ScriptedShard {
 public:
  ScriptedShard(MPI_Comm data, std::vector<layout::Slice> buckets, std::vector<float> params)
      : m_data(data),
        m_buckets(std::move(buckets)),
        m_params(std::move(params)),
        m_core(config::Mode::kAsync, 3, 1, m_params.size(), 0.0) {
    m_core.use_buckets(static_cast<int>(m_buckets.size()));
    for (const auto& b : m_buckets) m_spans.push_back({b.offset, b.count});
  }

  void run() {
    expect_header(Kind::kPull);
    for (std::size_t k = 0; k < script().size(); ++k) {
      const Step& step = script()[k];
      const std::vector<std::uint64_t> phantom_read = versions();
      for (const int p : step.tops_before) m_core.on_bucket(p, 1, phantom_read[1]);
      const std::vector<std::uint64_t> read = versions();
      answer();
      for (const int p : step.bottoms_after) complete(p, phantom_read[0]);
      for (const int p : step.whole_after) {
        m_core.on_bucket(p, 1, phantom_read[1]);
        complete(p, phantom_read[0]);
      }
      take_gradient(k, read);
    }
    auto stop = comm::make_header(Kind::kStop, kShard, 0, m_core.version());
    SYNCOPT_CHECK_MPI(MPI_Send(&stop, static_cast<int>(sizeof(stop)), MPI_BYTE, kWorkerRank,
                               comm::kTagToWorker, m_data));
    expect_header(Kind::kCtrl);  // the worker's goodbye
  }

  bool ok() const { return m_why.empty(); }
  const std::string& why() const { return m_why; }

 private:
  std::vector<std::uint64_t> versions() const {
    std::vector<std::uint64_t> v;
    for (std::size_t b = 0; b < m_buckets.size(); ++b) {
      v.push_back(m_core.bucket_version(static_cast<int>(b)));
    }
    return v;
  }

  // The first few problems, one a line.
  void fail(const std::string& what) {
    if (++m_failures <= 6) m_why += (m_why.empty() ? "" : "\n") + what;
  }

  // A phantom's bucket 0: its gradient is complete and applied.
  void complete(int phantom, std::uint64_t read) {
    m_core.on_bucket(phantom, 0, read);
    m_core.on_grad(phantom, read, nullptr, 0.0f, 0.0, 0.0);
    if (m_core.ready(0.0)) m_core.apply(nullptr, 0.0);
  }

  // Every bucket of the current versions, in forward order, each header
  // then its floats (kFlagSplit), as a shard answers.
  void answer() {
    for (std::size_t b = 0; b < m_buckets.size(); ++b) {
      auto h =
          comm::make_header(Kind::kParams, kShard, 0, m_core.bucket_version(static_cast<int>(b)));
      h.count = static_cast<std::uint32_t>(m_buckets[b].count);
      h.flags = comm::kFlagSplit;
      h.offset = static_cast<std::uint32_t>(m_buckets[b].offset);
      h.bucket = static_cast<std::uint16_t>(b);
      h.buckets = static_cast<std::uint16_t>(m_buckets.size());
      SYNCOPT_CHECK_MPI(MPI_Send(&h, static_cast<int>(sizeof(h)), MPI_BYTE, kWorkerRank,
                                 comm::kTagToWorker, m_data));
      SYNCOPT_CHECK_MPI(MPI_Send(m_params.data() + m_buckets[b].offset,
                                 static_cast<int>(m_buckets[b].count), MPI_FLOAT, kWorkerRank,
                                 comm::kTagToWorker, m_data));
    }
  }

  // The next message from the worker: a marker (moves m_final_from), or a
  // header, returned with its byte count.
  std::pair<comm::MsgHeader, int> next_header() {
    for (;;) {
      MPI_Status st;
      SYNCOPT_CHECK_MPI(MPI_Probe(kWorkerRank, comm::kTagToShard, m_data, &st));
      int bytes = 0;
      SYNCOPT_CHECK_MPI(MPI_Get_count(&st, MPI_BYTE, &bytes));
      if (bytes == kMarkerBytes) {
        std::uint32_t marker[3] = {};
        SYNCOPT_CHECK_MPI(MPI_Recv(marker, 3, MPI_UINT32_T, kWorkerRank, comm::kTagToShard, m_data,
                                   MPI_STATUS_IGNORE));
        if (marker[0] != kMarker) fail("a 12-byte message that is no marker");
        m_final_from = marker[1];
        continue;
      }
      comm::Message m(0);
      SYNCOPT_CHECK_MPI(MPI_Recv(m.data(), m.max_bytes(), MPI_BYTE, kWorkerRank, comm::kTagToShard,
                                 m_data, MPI_STATUS_IGNORE));
      return {m.header(), bytes};
    }
  }

  void expect_header(Kind kind) {
    const auto [h, bytes] = next_header();
    const std::string err =
        comm::check_header(h, {kWorkerRank, {kind}, 0, m_params.size(), bytes, nullptr});
    if (!err.empty()) fail("expected " + std::to_string(static_cast<int>(kind)) + ": " + err);
  }

  // The real worker's gradient of step k, read at `read`: its buckets top
  // first, each checked and applied; bucket 0 completes it.
  void take_gradient(std::size_t k, const std::vector<std::uint64_t>& read) {
    const std::string at = "step " + std::to_string(k) + ", bucket ";
    for (std::size_t expected = m_buckets.size(); expected-- > 0;) {
      const auto [h, bytes] = next_header();
      const std::string err =
          comm::check_header(h, {kWorkerRank, {Kind::kGrad}, 0, m_params.size(), bytes, &m_spans});
      if (!err.empty() || h.bucket != expected) {
        fail(at + std::to_string(expected) + ": " + err + " (bucket " + std::to_string(h.bucket) +
             ")");
        return;
      }
      const layout::Slice& b = m_buckets[expected];
      if (h.param_version != read[expected]) {
        fail(at + std::to_string(expected) + " carries version " + std::to_string(h.param_version) +
             ", computed on " + std::to_string(read[expected]));
      }
      if (m_final_from > b.offset) {
        fail(at + std::to_string(expected) + " [" + std::to_string(b.offset) + ", " +
             std::to_string(b.offset + b.count) + ") sent when only grad[" +
             std::to_string(m_final_from) + ", end) was final");
      }
      std::vector<float> payload(b.count);
      SYNCOPT_CHECK_MPI(MPI_Recv(payload.data(), static_cast<int>(b.count), MPI_FLOAT, kWorkerRank,
                                 comm::kTagToShard, m_data, MPI_STATUS_IGNORE));
      m_core.on_bucket(0, static_cast<int>(expected), h.param_version);
      if (expected == 0) {
        m_core.on_grad(0, h.param_version, nullptr, h.loss, 0.0, 0.0);
        const auto rec = m_core.apply(nullptr, 0.0);
        const auto& got = rec.grads.at(0).layer_staleness;
        if (got != script()[k].staleness) {
          fail("step " + std::to_string(k) + ": staleness of buckets 0, 1 " +
               std::to_string(got.at(0)) + ", " + std::to_string(got.at(1)) + "; expected " +
               std::to_string(script()[k].staleness[0]) + ", " +
               std::to_string(script()[k].staleness[1]));
        }
      }
    }
    m_final_from = m_params.size();  // the next step's backward starts anew
  }

  MPI_Comm m_data;
  std::vector<layout::Slice> m_buckets;
  std::vector<comm::BucketSpan> m_spans;
  std::vector<float> m_params;
  ps::ShardCore m_core;
  std::size_t m_final_from = 0;
  int m_failures = 0;
  std::string m_why;
};

}  // namespace

TEST_CASE("a worker tags each bucket with its own version and sends it once its layers are final",
          "[mpi][pipeline][async]") {
  int rank = 0, world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  REQUIRE(world == 2);
  const config::Config cfg = async_cnn();
  const layout::Roles roles = layout::make_roles(cfg, world);
  const data::Dataset train = data::make_synthetic(64, 1, 28, 28, 10, 3);
  const nn::ModelSpec spec = train::model_spec(cfg, train);
  const nn::Graph graph = nn::model_graph(spec);
  const auto groups = train::layout_groups(spec);
  const layout::Slice slice{0, graph.layout.count};
  const auto buckets = layout::make_buckets(groups, slice, cfg.exchange.bucket_bytes);
  comm::Communicator data, live;
  const auto peers = comm::gather_peers(MPI_COMM_WORLD);
  bool ok = buckets.size() == 2;  // conv1..conv2 | fc1..fc2
  std::string why = ok ? "" : std::to_string(buckets.size()) + " buckets, not 2";
  const RunClock clock;
  if (rank == kShard && ok) {
    std::vector<float> params(graph.layout.count);
    nn::init_params(graph, params.data(), 3);
    // The worker's liveness watches this rank: beats come from here too.
    comm::Watch watch(live.get(), kShard, {kWorkerRank}, {kWorkerRank}, cfg.cluster.dead_after_s,
                      clock.now());
    ScriptedShard shard(data.get(), buckets, std::move(params));
    shard.run();
    ok = shard.ok();
    why = shard.why();
    watch.stop_beating();
  } else if (ok) {
    nn::cpu::CpuNetwork cpu(graph, static_cast<int>(cfg.train.batch), 1);
    ReportingNetwork net(cpu, data.get());
    const worker::StragglerModel stragglers(cfg.stragglers);
    const auto run_dir = std::filesystem::temp_directory_path() /
                         ("syncopt-worker-test-" + std::to_string(::getpid()));
    worker::WorkerSetup ws;
    ws.cfg = &cfg;
    ws.roles = &roles;
    ws.peers = &peers;
    ws.worker = 0;
    ws.slices = {slice};
    ws.buckets = {buckets};
    ws.pipeline = true;
    ws.param_count = graph.layout.count;
    ws.net = &net;
    ws.train = &train;
    ws.stragglers = &stragglers;
    ws.data_comm = data.get();
    ws.live_comm = live.get();
    ws.clock = &clock;
    ws.run_dir = run_dir;
    worker::Worker w(ws);
    const worker::WorkerResult r = w.run();
    ok = r.gradients == script().size() && r.code == ExitCode::kOk;
    if (!ok) why = "worker: " + std::to_string(r.gradients) + " gradients";
    std::filesystem::remove_all(run_dir);
  }
  INFO(why);
  CHECK(agreed(ok));
}

int main(int argc, char** argv) { return run_catch_under_mpi(argc, argv); }
