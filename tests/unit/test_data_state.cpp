// Checkpoint state of lib/data: an EpochSampler or a BatchLoader (with
// augmentation on) restored from a serialized state() yields the same
// indices, labels and augmented images, bit for bit, as the original, across
// epoch boundaries; a state of another sampler is refused.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/state.hpp"
#include "common/error.hpp"
#include "data/batch.hpp"
#include "data/dataset.hpp"

using namespace syncopt;
using namespace syncopt::data;
using checkpoint::State;

namespace {

State round_trip(const State& s) {
  return State::deserialize(s.serialize(), "worker1.state", "worker1.loader");
}

}  // namespace

TEST_CASE("sampler state: a restored sampler continues the same stream", "[data][state]") {
  const std::int64_t count = 10;
  const int shards = 3;
  const int shard = 1;  // 3 examples per epoch
  // Saved mid-epoch, and exactly at an epoch's end (the next draw reshuffles).
  const int before = GENERATE(0, 2, 3, 5);
  INFO("draws of 1 before the save: " << before);
  EpochSampler a(count, 99, shard, shards);
  std::vector<std::int64_t> x, y;
  for (int i = 0; i < before; ++i) a.next_batch(1, x);
  EpochSampler b(count, 99, shard, shards);
  b.next_batch(2, y);  // a fresh object that has moved elsewhere
  b.restore(round_trip(a.state()));
  CHECK(b.epoch() == a.epoch());
  for (int i = 0; i < 6; ++i) {
    a.next_batch(2, x);
    b.next_batch(2, y);
    CHECK(x == y);
  }
  CHECK(a.epoch() == b.epoch());
  CHECK(a.epoch() >= 3);  // 12 draws or more, 3 per epoch: boundaries crossed
  CHECK(a.state() == b.state());
}

TEST_CASE("sampler state: another sampler's or a damaged state is refused", "[data][state]") {
  EpochSampler a(10, 99, 1, 3);
  std::vector<std::int64_t> x;
  a.next_batch(4, x);
  const State saved = round_trip(a.state());
  CHECK_THROWS_WITH(EpochSampler(10, 98, 1, 3).restore(saved),
                    Catch::Contains("worker1.loader.seed: saved with run.seed 99, but it is 98"));
  CHECK_THROWS_AS(EpochSampler(10, 98, 1, 3).restore(saved), ConfigError);
  CHECK_THROWS_WITH(EpochSampler(10, 99, 1, 4).restore(saved), Catch::Contains("readers 3"));
  CHECK_THROWS_WITH(EpochSampler(10, 99, 0, 3).restore(saved), Catch::Contains("reader 1"));
  CHECK_THROWS_WITH(EpochSampler(11, 99, 1, 3).restore(saved), Catch::Contains("examples 10"));

  State bad("s");
  bad.put("count", std::int64_t{10});
  bad.put("seed", std::uint64_t{99});
  bad.put("shard", std::int64_t{1});
  bad.put("shards", std::int64_t{3});
  bad.put("epoch", std::int64_t{0});
  bad.put("pos", std::uint64_t{4});  // shard 1 of 3 over 10 has 3 per epoch
  CHECK_THROWS_WITH(EpochSampler(10, 99, 1, 3).restore(bad),
                    Catch::Contains("s.pos: 4 is past the end of an epoch of 3"));
  CHECK_THROWS_AS(EpochSampler(10, 99, 1, 3).restore(bad), DataError);
}

TEST_CASE("loader state: indices, labels and augmented images continue bit for bit",
          "[data][state]") {
  // 50 examples over 2 readers: 25 per epoch, so 8-example batches cross
  // epoch boundaries at draws 4, 7, 10, ...
  const Dataset data = make_synthetic(50, 2, 12, 12, 10, 5);
  const AugmentOptions aug{15.0, 0.2};
  BatchLoader a(data, 8, 31, 1, 2, true, aug);
  for (int i = 0; i < 4; ++i) a.next();
  BatchLoader b(data, 8, 31, 1, 2, true, aug);
  b.next();  // a fresh loader that has drawn already
  b.restore(round_trip(a.state()));
  const std::size_t image_floats = 8 * static_cast<std::size_t>(data.image_size());
  int differs_from_source = 0;
  for (int i = 0; i < 10; ++i) {
    a.next();
    b.next();
    INFO("batch " << i << " after the restore");
    CHECK(a.indices() == b.indices());
    CHECK(std::memcmp(a.labels(), b.labels(), 8 * sizeof(std::int32_t)) == 0);
    CHECK(std::memcmp(a.images(), b.images(), image_floats * sizeof(float)) == 0);
    // Augmentation is really on: the images are not the stored ones.
    differs_from_source +=
        std::memcmp(a.images(), data.image(a.indices()[0]), data.image_size() * sizeof(float)) != 0;
  }
  CHECK(differs_from_source == 10);
  CHECK(a.state() == b.state());
}

TEST_CASE("loader state: a damaged RNG state is a DataError naming it", "[data][state]") {
  const Dataset data = make_synthetic(20, 1, 4, 4, 2, 5);
  BatchLoader a(data, 4, 1, 0, 1, true, {});
  State s("worker0.loader");
  s.put_child("sampler", State());
  s.put("rng", "12 34 not a state");
  CHECK_THROWS_WITH(a.restore(s), Catch::Contains("worker0.loader.rng: not the text form"));
  CHECK_THROWS_AS(a.restore(s), DataError);
}

TEST_CASE("loader skip: k batches skipped are k batches drawn, augmentation included",
          "[data][state]") {
  // 50 examples over 2 readers (25 each): 8-example batches cross epochs.
  const Dataset data = make_synthetic(50, 2, 12, 12, 10, 5);
  const AugmentOptions aug{15.0, 0.2};
  for (const bool augment : {false, true}) {
    for (const std::uint64_t k : {0ULL, 1ULL, 3ULL, 7ULL, 25ULL}) {
      INFO("augment " << augment << ", " << k << " batches");
      BatchLoader drawn(data, 8, 31, 1, 2, augment, aug);
      for (std::uint64_t i = 0; i < k; ++i) drawn.next();
      BatchLoader skipped(data, 8, 31, 1, 2, augment, aug);
      skipped.skip(k);
      CHECK(drawn.state() == skipped.state());
      // And what comes next is the same batch, bit for bit.
      drawn.next();
      skipped.next();
      CHECK(drawn.indices() == skipped.indices());
      CHECK(std::memcmp(drawn.images(), skipped.images(),
                        8 * static_cast<std::size_t>(data.image_size()) * sizeof(float)) == 0);
    }
  }
}
