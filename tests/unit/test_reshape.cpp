// Resuming on another shape (lib/train/reshape.hpp, docs/design.md §10):
// samplers continued on another number of readers take every example of an
// epoch begun exactly once; a checkpoint of S shards and K workers re-cut
// for S' and K' holds the same θ, optimiser state and θ̄, end to end.
#include <catch2/catch.hpp>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "common/error.hpp"
#include "data/dataset.hpp"
#include "layout/placement.hpp"
#include "layout/roles.hpp"
#include "train/reshape.hpp"

using namespace syncopt;
using checkpoint::State;

namespace {

State round_trip(const State& s) { return State::deserialize(s.serialize(), "x.state", "x"); }

// How often each example was taken in each epoch: epoch -> example -> times.
using Taken = std::map<std::int64_t, std::map<std::int64_t, int>>;

}  // namespace

TEST_CASE("reshape: samplers continued on other readers take each example of an epoch once",
          "[reshape][data]") {
  const std::int64_t count = 103;
  const std::uint64_t seed = 7;
  const int k_old = 5;
  const int k_new = GENERATE(3, 6, 1);
  INFO(k_old << " readers continued on " << k_new);
  // Old readers at different places: reader 4 is into epoch 1 already.
  const std::vector<std::int64_t> draws = {9, 13, 0, 20, 27};  // share: 21 (reader 0..2), 20
  std::vector<std::vector<std::int64_t>> got(k_old);
  std::vector<State> saved;
  for (int r = 0; r < k_old; ++r) {
    data::EpochSampler s(count, seed, r, k_old);
    s.next_batch(draws[static_cast<std::size_t>(r)], got[static_cast<std::size_t>(r)]);
    saved.push_back(round_trip(s.state()));
  }
  // Which epoch each old draw belongs to: reader r's share is ceil((count - r) / k).
  Taken taken;
  for (int r = 0; r < k_old; ++r) {
    const auto share = (count - r + k_old - 1) / k_old;
    const auto& g = got[static_cast<std::size_t>(r)];
    for (std::size_t i = 0; i < g.size(); ++i) ++taken[static_cast<std::int64_t>(i) / share][g[i]];
  }
  const auto fresh = data::continue_on(saved, k_new);
  REQUIRE(fresh.size() == static_cast<std::size_t>(k_new));
  // The new readers take their carry (epochs 0 and 1), saved and restored
  // halfway, then start epoch 2 as fresh samplers of k_new readers would.
  std::size_t carried = 0;
  for (int r = 0; r < k_new; ++r) {
    const auto& st = fresh[static_cast<std::size_t>(r)];
    REQUIRE(st.get<std::int64_t>("epoch") == 2);
    const auto carry =
        st.has("carry") ? st.get<std::vector<std::int64_t>>("carry") : std::vector<std::int64_t>{};
    carried += carry.size();
    data::EpochSampler a(count, seed, r, k_new);
    a.restore(round_trip(st));
    std::vector<std::int64_t> x, y;
    const auto half = static_cast<std::int64_t>(carry.size() / 2);
    a.next_batch(half, x);
    data::EpochSampler b(count, seed, r, k_new);
    b.restore(round_trip(a.state()));
    b.next_batch(static_cast<std::int64_t>(carry.size()) - half, y);
    x.insert(x.end(), y.begin(), y.end());
    CHECK(x == carry);
    // The carry is the rest of epoch 0 (41 examples), then of epoch 1,
    // dealt round-robin: reader r's j-th is the (r + j * k_new)-th of them.
    for (std::size_t j = 0; j < carry.size(); ++j) {
      const auto g = static_cast<std::size_t>(r) + j * static_cast<std::size_t>(k_new);
      ++taken[g < 41 ? 0 : 1][carry[j]];
    }
    // Next: epoch 2 as a fresh reader r of k_new draws it.
    std::vector<std::int64_t> next, expect;
    b.next_batch(5, next);
    data::EpochSampler c(count, seed, r, k_new);
    const auto share_new = (count - r + k_new - 1) / k_new;
    c.skip(static_cast<std::uint64_t>(2 * share_new));
    c.next_batch(5, expect);
    CHECK(next == expect);
  }
  // Epochs 0 and 1: every example once, none twice, none skipped.
  CHECK(carried == static_cast<std::size_t>(2 * count) - 69);
  for (const std::int64_t e : {0, 1}) {
    INFO("epoch " << e);
    CHECK(taken[e].size() == static_cast<std::size_t>(count));
    int twice = 0;
    for (const auto& [i, n] : taken[e]) twice += n != 1 ? 1 : 0;
    CHECK(twice == 0);
  }
}

TEST_CASE("reshape: a sampler state of another run is refused", "[reshape][data]") {
  data::EpochSampler a(50, 1, 0, 2), b(51, 1, 1, 2);
  CHECK_THROWS_AS(data::continue_on({a.state(), b.state()}, 3), ConfigError);
}

namespace {

// 2 shards and 5 workers of a sync run, worker 3 lost before the save.
checkpoint::Checkpoint saved_run(const std::vector<layout::Group>& groups, std::size_t count) {
  config::Config cfg;
  cfg.train.mode = config::Mode::kSync;
  cfg.cluster.ps = 2;
  const auto roles = layout::make_roles(cfg, 7);
  checkpoint::Checkpoint ck;
  ck.step = 300;
  ck.manifest.step = 300;
  ck.manifest.run = {{"layout",
                      {{"mode", "sync"},
                       {"world", 7},
                       {"shards", 2},
                       {"evaluator_rank", nullptr},
                       {"workers", 5},
                       {"N", 4},
                       {"b", 1}}}};
  const auto slices = layout::balanced_slices(groups, 2);
  for (int s = 0; s < 2; ++s) {
    const auto& sl = slices[static_cast<std::size_t>(s)];
    std::vector<float> theta(sl.count), mom(sl.count), avg(sl.count);
    for (std::size_t i = 0; i < sl.count; ++i) {
      const auto g = static_cast<float>(sl.offset + i);
      theta[i] = g;
      mom[i] = -g;
      avg[i] = 0.5f * g;
    }
    State optim;
    optim.put("name", "sgd");
    optim.put("momentum", 0.9);
    optim.put("count", std::uint64_t{sl.count});
    optim.put("mom", mom);
    State ema;
    ema.put("decay", 0.99);
    ema.put("count", std::uint64_t{sl.count});
    ema.put("updates", std::uint64_t{300});
    ema.put("avg", avg);
    State part;
    checkpoint::put_params(part, theta, optim, ema);
    State core;
    core.put("version", std::uint64_t{300});
    core.put("drops", std::vector<std::int64_t>{1, 2, 3, 4, 5});
    core.put("clocks", std::vector<std::int64_t>{301, 300, 299, 120, 302});
    part.put_child("core", core);
    part.put("examples", std::uint64_t{300 * 4 * 8});
    part.put("wall_s", 12.5);
    if (s == 0) {
      part.put("steps_bytes", std::uint64_t{4096});
    } else {
      part.put("records", std::string("{\"shard\":1}\n"));
    }
    ck.parts.emplace_back(checkpoint::shard_part(s), part);
  }
  for (int w = 0; w < 5; ++w) {
    if (w == 3) continue;  // lost
    data::EpochSampler sampler(count, 11, w, 5);
    sampler.skip(static_cast<std::uint64_t>(8 * (290 + w)));
    State loader;
    loader.put_child("sampler", sampler.state());
    loader.put("rng", "1 2");
    State part;
    part.put("step", std::uint64_t{290 + static_cast<std::uint64_t>(w)});
    part.put_child("loader", loader);
    ck.parts.emplace_back(checkpoint::worker_part(w), part);
  }
  (void)roles;
  return ck;
}

}  // namespace

TEST_CASE("reshape: θ, optimiser state and θ̄ re-cut by bytes for other shards",
          "[reshape][checkpoint]") {
  const std::vector<layout::Group> groups = {
      {"a", 0, 300}, {"b", 300, 20}, {"c", 320, 500}, {"d", 820, 10}, {"e", 830, 170}};
  const std::size_t count = 1000;
  const auto old = saved_run(groups, 5000);
  const int shards = GENERATE(1, 3);
  const int workers = GENERATE(3, 6);
  INFO(shards << " shards, " << workers << " workers");
  config::Config cfg;
  cfg.train.mode = config::Mode::kSync;
  cfg.cluster.ps = shards;
  const auto roles = layout::make_roles(cfg, shards + workers);
  train::Shape shape;
  shape.roles = &roles;
  shape.groups = groups;
  shape.batch = 8;
  shape.train_count = 5000;
  shape.seed = 11;
  REQUIRE(train::other_shape(train::saved_layout(old.manifest), roles));
  std::vector<std::string> wanted;
  for (int s = 0; s < shards; ++s) wanted.push_back(checkpoint::shard_part(s));
  for (int w = 0; w < workers; ++w) wanted.push_back(checkpoint::worker_part(w));
  const auto ck = train::reshape(old, shape, wanted);
  CHECK(ck.step == 300);
  std::vector<float> theta, mom, avg;
  const auto slices = layout::balanced_slices(groups, shards);
  for (int s = 0; s < shards; ++s) {
    const auto& part = ck.part(checkpoint::shard_part(s));
    const auto p =
        checkpoint::get_params(part, slices[static_cast<std::size_t>(s)].count, true, "");
    theta.insert(theta.end(), p.theta.begin(), p.theta.end());
    const auto& m = p.optim.get<std::vector<float>>("mom");
    mom.insert(mom.end(), m.begin(), m.end());
    CHECK(p.optim.get<std::uint64_t>("count") == m.size());
    CHECK(p.optim.get<double>("momentum") == 0.9);
    const auto& a = p.ema->get<std::vector<float>>("avg");
    avg.insert(avg.end(), a.begin(), a.end());
    CHECK(p.ema->get<std::uint64_t>("updates") == 300);
    const auto& core = part.child("core");
    CHECK(core.get<std::uint64_t>("version") == 300);
    CHECK(core.get<std::vector<std::int64_t>>("drops").size() == static_cast<std::size_t>(workers));
    CHECK(core.get<std::vector<std::int64_t>>("clocks").back() ==
          (workers > 5 ? 120 : (workers == 3 ? 299 : 302)));
    CHECK(part.get<double>("wall_s") == 12.5);
    if (s == 0) CHECK(part.get<std::uint64_t>("steps_bytes") == 4096);
  }
  REQUIRE(theta.size() == count);
  for (std::size_t i = 0; i < count; ++i) {
    INFO("float " << i);
    REQUIRE(theta[i] == static_cast<float>(i));
    REQUIRE(mom[i] == -static_cast<float>(i));
    REQUIRE(avg[i] == 0.5f * static_cast<float>(i));
  }
  // Old shard 1's records not yet in steps.jsonl go on: to new shard 1, or
  // to the file (shard 0) when there is no shard 1.
  if (shards == 1) {
    CHECK(ck.part("shard0").get<std::string>("records_to_append") == "{\"shard\":1}\n");
  } else {
    CHECK(ck.part("shard1").get<std::string>("records") == "{\"shard\":1}\n");
  }
  // Every worker has a continued sampler: a lost worker's place came from
  // the gradients shard 0 counted (120 batches); kept workers keep their step.
  for (int w = 0; w < workers; ++w) {
    const auto& part = ck.part(checkpoint::worker_part(w));
    const auto& sampler = part.child("loader").child("sampler");
    CHECK(sampler.get<std::int64_t>("shards") == workers);
    CHECK(sampler.get<std::int64_t>("epoch") == 3);  // epochs 0 to 2 were begun
    if (w < 5 && w != 3)
      CHECK(part.get<std::uint64_t>("step") == 290 + static_cast<std::uint64_t>(w));
  }
}

TEST_CASE("reshape: the rest of the epoch after a lost worker's place", "[reshape][data]") {
  // Lost worker 3 took 120 batches of 8 = 960 examples; the others 290 + w
  // batches (2320 and more). 5000 examples over 5 readers: 1000 each an
  // epoch, so epochs 0 to 2 are begun; the rest of them is 3 * 5000 less
  // what each took.
  const std::vector<layout::Group> groups = {{"a", 0, 600}, {"b", 600, 400}};
  const auto old = saved_run(groups, 5000);
  config::Config cfg;
  cfg.train.mode = config::Mode::kSync;
  cfg.cluster.ps = 1;
  const auto roles = layout::make_roles(cfg, 5);
  train::Shape shape{&roles, groups, 8, 5000, 11};
  std::vector<std::string> wanted;
  for (int w = 0; w < 4; ++w) wanted.push_back(checkpoint::worker_part(w));
  const auto ck = train::reshape(old, shape, wanted);
  std::size_t carried = 0;
  for (int w = 0; w < 4; ++w) {
    carried += ck.part(checkpoint::worker_part(w))
                   .child("loader")
                   .child("sampler")
                   .get<std::vector<std::int64_t>>("carry")
                   .size();
  }
  const std::size_t took = 8 * (290 + 291 + 292 + 294 + 120);
  CHECK(carried == 3 * 5000 - took);
}
