// The pieces of the pipelined exchange without MPI: shard placement by
// bytes and the buckets (layout/placement), the staged training step of the
// CPU network (parameters asked for just before each layer, gradients
// reported as soon as final, the same bits as train_step), the optimiser and
// EMA applied range by range, the shard core's per-bucket async staleness,
// and the bucket fields of the header check.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "comm/protocol.hpp"
#include "common/error.hpp"
#include "layout/placement.hpp"
#include "nn/backend.hpp"
#include "nn/cpu_network.hpp"
#include "nn/graph.hpp"
#include "optim/optimizer.hpp"
#include "optim/param_state.hpp"
#include "ps/shard_core.hpp"

using namespace syncopt;
using layout::Group;
using layout::Slice;

namespace {

std::vector<Group> groups_of(const std::vector<std::size_t>& counts) {
  std::vector<Group> g;
  std::size_t offset = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    // (appended, not "g" + to_string(i): GCC 12 warns falsely on that, -Wrestrict)
    std::string name = "g";
    name += std::to_string(i);
    g.push_back({name, offset, counts[i]});
    offset += counts[i];
  }
  return g;
}

std::size_t largest(const std::vector<Slice>& s) {
  std::size_t m = 0;
  for (const auto& x : s) m = std::max(m, x.count);
  return m;
}

// The best largest shard over every way to cut `counts` into `shards`
// contiguous non-empty runs (exhaustive; small inputs only).
std::size_t best_by_search(const std::vector<std::size_t>& counts, int shards,
                           std::size_t from = 0) {
  if (shards == 1) {
    std::size_t sum = 0;
    for (std::size_t i = from; i < counts.size(); ++i) sum += counts[i];
    return sum;
  }
  std::size_t best = std::numeric_limits<std::size_t>::max(), run = 0;
  for (std::size_t end = from; end + static_cast<std::size_t>(shards) <= counts.size(); ++end) {
    run += counts[end];
    best = std::min(best, std::max(run, best_by_search(counts, shards - 1, end + 1)));
  }
  return best;
}

}  // namespace

TEST_CASE("shards hold whole layers, contiguous, with the smallest largest shard", "[pipeline]") {
  // The reference CNN's groups: conv1, conv2, fc1, fc2 (with weight norm).
  const std::vector<std::size_t> cnn{352, 18560, 803328, 2580};
  const auto two = layout::balanced_slices(groups_of(cnn), 2);
  REQUIRE(two.size() == 2);
  CHECK(two[0].offset == 0);
  CHECK(two[0].count == 352 + 18560);  // the convolutions
  CHECK(two[1].offset == 352 + 18560);
  CHECK(two[1].count == 803328 + 2580);  // fc1 cannot be cut: it is most of the bytes
  // Every shard count up to the number of layers, on uneven sizes: exact
  // cover in order, none empty, and the largest shard as small as any
  // contiguous cut can make it.
  const std::vector<std::size_t> sizes{5, 1, 9, 3, 3, 7, 2, 8, 4, 6};
  for (int s = 1; s <= static_cast<int>(sizes.size()); ++s) {
    INFO("shards " << s);
    const auto slices = layout::balanced_slices(groups_of(sizes), s);
    REQUIRE(slices.size() == static_cast<std::size_t>(s));
    std::size_t next = 0;
    for (const auto& sl : slices) {
      CHECK(sl.offset == next);
      CHECK(sl.count > 0);
      next += sl.count;
    }
    CHECK(next == 48);
    CHECK(largest(slices) == best_by_search(sizes, s));
  }
  // Equal layers split evenly: about 1/S of the bytes each.
  const auto even = layout::balanced_slices(groups_of(std::vector<std::size_t>(12, 10)), 4);
  for (const auto& sl : even) CHECK(sl.count == 30);
  // More shards than layers: a config error naming the key and the layers.
  try {
    layout::balanced_slices(groups_of({10}), 3);
    FAIL("3 shards for one layer");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find("cluster.ps = 3") != std::string::npos);
    CHECK(what.find("at most 1") != std::string::npos);
  }
  // Groups that do not tile the vector are a caller's bug.
  CHECK_THROWS_AS(layout::balanced_slices({{"a", 0, 4}, {"b", 5, 4}}, 1), InternalError);
}

TEST_CASE("buckets fill from the top layer down to at least bucket_bytes", "[pipeline]") {
  // 4-byte floats: 10 floats = 40 bytes.
  const auto g = groups_of({3, 3, 30, 5, 5, 20});
  const Slice all{0, 66};
  // 40 bytes, from the top: [20] (80 B), [5 5] (40 B), [30] (120 B), and
  // what is left at the bottom, [3 3] (24 B), the smallest.
  const auto b = layout::make_buckets(g, all, 40);
  REQUIRE(b.size() == 4);
  CHECK((b[0].offset == 0 && b[0].count == 6));
  CHECK((b[1].offset == 6 && b[1].count == 30));
  CHECK((b[2].offset == 36 && b[2].count == 10));
  CHECK((b[3].offset == 46 && b[3].count == 20));
  // 41 bytes: [20], [30 5 5] (the two fives alone are 40 B, too few), [3 3].
  const auto b41 = layout::make_buckets(g, all, 41);
  REQUIRE(b41.size() == 3);
  CHECK((b41[1].offset == 6 && b41[1].count == 40));
  // One byte: every layer its own bucket.
  CHECK(layout::make_buckets(g, all, 1).size() == 6);
  // Larger than the slice: one bucket; 0 (no pipeline): one bucket.
  CHECK(layout::make_buckets(g, all, 1 << 20).size() == 1);
  CHECK(layout::make_buckets(g, all, 0).size() == 1);
  // Inside a shard's slice only, offsets into the whole vector.
  const auto inner = layout::make_buckets(g, {6, 40}, 1);
  REQUIRE(inner.size() == 3);
  CHECK((inner[0].offset == 6 && inner[0].count == 30));
  CHECK((inner[2].offset == 41 && inner[2].count == 5));
  CHECK(layout::group_span(g, {6, 40}) == "g2..g4");
  // A slice that cuts a layer is a bug of the caller.
  CHECK_THROWS_AS(layout::make_buckets(g, {0, 15}, 1), InternalError);
  // The dry-run table names every shard's layers, share and buckets.
  const auto table = layout::describe_placement(g, {{0, 36}, {36, 30}}, 40);
  CHECK(table.find("shard 0: g0..g2") != std::string::npos);
  CHECK(table.find("shard 1: g3..g5") != std::string::npos);
  CHECK(table.find("45.5 %") != std::string::npos);
  CHECK(table.find("2 buckets: g3..g4 | g5") != std::string::npos);
}

namespace {

// Hooks that hand a layer its parameters only when asked (the buffer the
// network reads is NaN until then) and check, when told a gradient range
// is final, that it already holds the reference gradient's bits.
class LazyHooks final : public nn::StepHooks {
 public:
  LazyHooks(const std::vector<float>& params, const std::vector<float>& ref_grad, float ref_loss,
            std::vector<float>& lazy, const std::vector<float>& grad)
      : StepHooks(params.size()),
        m_params(params),
        m_ref(ref_grad),
        m_ref_loss(ref_loss),
        m_lazy(lazy),
        m_grad(grad) {}
  void need_params(std::size_t offset, std::size_t count) override {
    asked.emplace_back(offset, count);
    std::copy_n(m_params.begin() + static_cast<std::ptrdiff_t>(offset), count,
                m_lazy.begin() + static_cast<std::ptrdiff_t>(offset));
  }
  void grads_ready(std::size_t offset, float loss) override {
    told.push_back(offset);
    losses_match = losses_match && loss == m_ref_loss;
    final_when_told = final_when_told &&
                      std::equal(m_grad.begin() + static_cast<std::ptrdiff_t>(offset), m_grad.end(),
                                 m_ref.begin() + static_cast<std::ptrdiff_t>(offset));
  }
  std::vector<std::pair<std::size_t, std::size_t>> asked;
  std::vector<std::size_t> told;
  bool losses_match = true, final_when_told = true;

 private:
  const std::vector<float>& m_params;
  const std::vector<float>& m_ref;
  float m_ref_loss;
  std::vector<float>& m_lazy;
  const std::vector<float>& m_grad;
};

// A backend without a staged step of its own (as the CUDA one): the
// Network default.
class PlainNetwork final : public nn::Network {
 public:
  explicit PlainNetwork(nn::Network& inner) : m_inner(inner) {}
  float train_step(const float* params, const float* images, const std::int32_t* labels, int batch,
                   float* grad) override {
    return m_inner.train_step(params, images, labels, batch, grad);
  }
  void predict(const float* params, const float* images, int batch, float* logits) override {
    m_inner.predict(params, images, batch, logits);
  }
  int max_batch() const override { return m_inner.max_batch(); }

 private:
  nn::Network& m_inner;
};

}  // namespace

TEST_CASE("the staged step asks for each layer before its forward and reports final gradients",
          "[pipeline][nn]") {
  nn::ModelSpec cnn;
  cnn.model = nn::Builtin::kCnn;
  nn::ModelSpec resnet;  // batch norm, residual adds, projections
  resnet.model = nn::Builtin::kResnet20;
  resnet.height = resnet.width = 8;
  for (const auto& [name, spec] : {std::pair{"cnn", cnn}, std::pair{"resnet20", resnet}}) {
    DYNAMIC_SECTION(name) {
      const nn::Graph graph = nn::model_graph(spec);
      const std::size_t count = graph.layout.count;
      const int batch = 4;
      nn::cpu::CpuNetwork net(graph, batch, 1);
      std::vector<float> params(count);
      nn::init_params(graph, params.data(), 3);
      std::mt19937_64 rng(4);
      std::normal_distribution<float> nd;
      std::vector<float> x(static_cast<std::size_t>(batch * spec.height * spec.width));
      for (float& v : x) v = nd(rng);
      const std::vector<std::int32_t> y{1, 7, 3, 0};
      std::vector<float> ref(count);
      const float ref_loss = net.train_step(params.data(), x.data(), y.data(), batch, ref.data());

      const float nan = std::numeric_limits<float>::quiet_NaN();
      std::vector<float> lazy(count, nan), grad(count, nan);
      LazyHooks hooks(params, ref, ref_loss, lazy, grad);
      const float loss =
          net.train_step_staged(lazy.data(), x.data(), y.data(), batch, grad.data(), hooks);
      // Bit for bit the step train_step takes: no parameter was read before
      // it was asked for (it would have been NaN).
      CHECK(loss == ref_loss);
      CHECK(grad == ref);
      // Asked group by group in forward order, each once; told in reverse,
      // each range already final.
      REQUIRE(hooks.asked.size() == graph.groups.size());
      REQUIRE(hooks.told.size() == graph.groups.size());
      for (std::size_t i = 0; i < graph.groups.size(); ++i) {
        CHECK(hooks.asked[i].first == graph.groups[i].offset);
        CHECK(hooks.asked[i].second == graph.groups[i].count);
        CHECK(hooks.told[graph.groups.size() - 1 - i] == graph.groups[i].offset);
      }
      CHECK(hooks.final_when_told);
      CHECK(hooks.losses_match);

      // A backend without its own staged step: everything first, the whole
      // gradient at the end, the same bits.
      PlainNetwork plain(net);
      std::vector<float> lazy2(count, nan), grad2(count, nan);
      LazyHooks whole(params, ref, ref_loss, lazy2, grad2);
      CHECK(plain.train_step_staged(lazy2.data(), x.data(), y.data(), batch, grad2.data(), whole) ==
            ref_loss);
      CHECK(grad2 == ref);
      CHECK(whole.asked == std::vector<std::pair<std::size_t, std::size_t>>{{0, count}});
      CHECK(whole.told == std::vector<std::size_t>{0});
      CHECK(whole.final_when_told);
    }
  }
}

TEST_CASE("the optimiser and EMA applied range by range give the bits of one pass",
          "[pipeline][optim]") {
  for (const auto name : {config::OptimizerName::kSgd, config::OptimizerName::kRmsprop}) {
    optim::OptimizerOptions o;
    o.name = name;
    o.weight_decay = 1e-4;
    const std::size_t n = 1001;
    std::vector<float> init(n), grad(n);
    std::mt19937_64 rng(9);
    std::normal_distribution<float> nd;
    for (auto& v : init) v = nd(rng);
    optim::ParamState whole(o, 0.99, init.data(), n), pieces(o, 0.99, init.data(), n);
    const std::vector<std::pair<std::size_t, std::size_t>> cut{{0, 7}, {7, 500}, {507, 494}};
    for (int step = 0; step < 5; ++step) {
      for (auto& v : grad) v = nd(rng);
      const float lr = 0.01f * static_cast<float>(step + 1);
      whole.apply(grad.data(), lr);
      for (const auto& [at, count] : cut) pieces.apply_range(at, count, grad.data() + at, lr);
      pieces.end_update();
    }
    CHECK(whole.theta_vector() == pieces.theta_vector());
    CHECK(std::equal(whole.average(), whole.average() + n, pieces.average()));
    // The EMA counted five updates, not fifteen (its warm-up decay depends on it).
    CHECK(whole.state().child("ema").get<std::uint64_t>("updates") ==
          pieces.state().child("ema").get<std::uint64_t>("updates"));
  }
  optim::Optimizer opt({}, 4);
  std::vector<float> p(4), g(4);
  CHECK_THROWS_AS(opt.step_range(p.data(), g.data(), 0.1f, 2, 3), InternalError);
}

TEST_CASE("async with buckets: each bucket's own version and staleness", "[pipeline][ps]") {
  // Two workers, three buckets. Worker 0 reads every bucket at 0; worker 1
  // reads them after worker 0's top bucket was applied.
  ps::ShardCore core(config::Mode::kAsync, 2, 1, 6, 0.0);
  core.use_buckets(3);
  CHECK(core.on_bucket(0, 2, 0) == 0);  // bucket 2 becomes version 1
  CHECK(core.bucket_version(2) == 1);
  CHECK(core.on_bucket(1, 2, 1) == 0);  // worker 1 read bucket 2 at 1: fresh
  CHECK(core.on_bucket(0, 1, 0) == 0);
  CHECK(core.on_bucket(1, 1, 0) == 1);  // one update of bucket 1 in between
  CHECK(core.on_bucket(0, 0, 0) == 0);
  REQUIRE(core.on_grad(0, 0, nullptr, 0.5f, 0.01, 1.0));
  auto r0 = core.apply(nullptr, 1.0);
  CHECK(core.version() == 1);  // bucket 0's version is the shard's
  REQUIRE(r0.grads.size() == 1);
  CHECK(r0.grads[0].layer_staleness == std::vector<std::int64_t>{0, 0, 0});
  CHECK(core.on_bucket(1, 0, 0) == 1);
  REQUIRE(core.on_grad(1, 0, nullptr, 0.5f, 0.01, 1.1));
  auto r1 = core.apply(nullptr, 1.1);
  CHECK(r1.grads[0].staleness == 1);
  // Bottom staler than the top: bucket 0 waited for all of worker 0's gradient.
  CHECK(r1.grads[0].layer_staleness == std::vector<std::int64_t>{1, 1, 0});
  CHECK(core.bucket_version(1) == 2);
  CHECK(core.bucket_version(0) == 2);
  // The bucket versions survive a checkpoint.
  ps::ShardCore back(config::Mode::kAsync, 2, 1, 6, 0.0);
  back.use_buckets(3);
  back.restore(core.state());
  CHECK(back.bucket_version(2) == 2);
  // Only async and ssp apply per bucket; a sync gradient always has data.
  ps::ShardCore sync(config::Mode::kSync, 2, 1, 6, 0.0);
  CHECK_THROWS_AS(sync.use_buckets(3), InternalError);
  CHECK(sync.slot(1) != nullptr);
}

TEST_CASE("sync: a gradient assembled in the core's slot is not copied again", "[pipeline][ps]") {
  ps::ShardCore core(config::Mode::kSync, 2, 2, 4, 0.0);
  float* s0 = core.slot(0);
  float* s1 = core.slot(1);
  REQUIRE(s0 != s1);
  for (int i = 0; i < 4; ++i) {
    s0[i] = static_cast<float>(i);
    s1[i] = 10.0f;
  }
  CHECK(core.on_grad(1, 0, s1, 0.0f, 0.0, 0.1));
  CHECK(core.on_grad(0, 0, s0, 0.0f, 0.0, 0.2));
  std::vector<float> mean(4);
  core.apply(mean.data(), 0.3);
  CHECK(mean == std::vector<float>{5.0f, 5.5f, 6.0f, 6.5f});
}

TEST_CASE("header check: a bucket must be one of the slice's, with its offset and count",
          "[pipeline][protocol]") {
  const std::vector<comm::BucketSpan> spans{{100, 8}, {108, 30}};
  comm::MsgHeader h = comm::make_header(comm::Kind::kGrad, 3, 1, 0);
  h.buckets = 2;
  h.bucket = 1;
  h.offset = 108;
  h.count = 30;
  comm::Expect e{3, {comm::Kind::kGrad}, 1, 38, comm::Message::wire_bytes(30), &spans};
  CHECK(comm::check_header(h, e).empty());
  auto bad = [&](auto change, const std::string& expect) {
    comm::MsgHeader b = h;
    comm::Expect x = e;
    change(b, x);
    const std::string err = comm::check_header(b, x);
    INFO(err);
    CHECK(err.find("rank 3") != std::string::npos);
    CHECK(err.find(expect) != std::string::npos);
  };
  bad([](comm::MsgHeader& b, comm::Expect&) { b.bucket = 2; }, "bucket 2 of 2");
  bad([](comm::MsgHeader& b, comm::Expect&) { b.buckets = 3; }, "this slice has 2 bucket(s)");
  bad([](comm::MsgHeader& b, comm::Expect&) { b.offset = 100; }, "starts at 100, expected 108");
  bad(
      [](comm::MsgHeader& b, comm::Expect& x) {
        b.count = 8;
        x.received_bytes = comm::Message::wire_bytes(8);
      },
      "carries 8 floats, expected 30");
  // Without buckets, the whole slice.
  comm::MsgHeader whole = comm::make_header(comm::Kind::kGrad, 3, 1, 0);
  whole.count = 38;
  comm::Expect plain{3, {comm::Kind::kGrad}, 1, 38, comm::Message::wire_bytes(38)};
  CHECK(comm::check_header(whole, plain).empty());
  CHECK(sizeof(comm::MsgHeader) == 104);
  CHECK(comm::kProtoVersion == 7);
}
