// The order of a message's buckets (layout/bucket_sequence, docs/design.md
// §4, Buckets), without MPI: parameters bucket 0 first and in forward order,
// a gradient top bucket first and bucket 0 last; what is refused, what
// completes a message, and how the next one starts.
#include <catch2/catch.hpp>
#include <vector>

#include "common/error.hpp"
#include "layout/bucket_sequence.hpp"

using namespace syncopt;
using layout::BucketFlow;
using layout::BucketSequence;

TEST_CASE("parameters go bucket 0 first, then in forward order", "[layout][buckets]") {
  const BucketSequence q(BucketFlow::kParams, 4);
  CHECK(q.order() == std::vector<int>{0, 1, 2, 3});
  CHECK(q.next() == 0);
  CHECK(q.last() == 3);
  for (int b = 0; b < 4; ++b) CHECK(q.position(b) == b);
}

TEST_CASE("a gradient goes top bucket first, bucket 0 last", "[layout][buckets]") {
  const BucketSequence q(BucketFlow::kGradient, 4);
  CHECK(q.order() == std::vector<int>{3, 2, 1, 0});
  CHECK(q.next() == 3);
  CHECK(q.last() == 0);
  for (int i = 0; i < 4; ++i) CHECK(q.position(q.at(i)) == i);
}

TEST_CASE("a gradient's buckets are taken only in order", "[layout][buckets]") {
  BucketSequence q(BucketFlow::kGradient, 3);
  // Bucket 0 first (it would complete the gradient at once) is refused,
  // and a refusal changes nothing.
  CHECK_FALSE(q.take(0));
  CHECK_FALSE(q.take(1));
  CHECK(q.taken() == 0);
  CHECK(q.next() == 2);
  CHECK(q.take(2));
  CHECK(q.partial());
  CHECK(q.has(2));
  CHECK_FALSE(q.has(1));
  // The same bucket twice, or one skipped, is refused.
  CHECK_FALSE(q.take(2));
  CHECK_FALSE(q.take(0));
  CHECK(q.take(1));
  CHECK_FALSE(q.complete());
  CHECK(q.take(0));
  CHECK(q.complete());
  CHECK_FALSE(q.partial());
  CHECK(q.has(0));
  // The next gradient starts at the top again.
  CHECK(q.next() == 2);
  CHECK_FALSE(q.take(0));
  CHECK(q.complete());  // (the refusal left the finished one as it was)
  CHECK(q.take(2));
  CHECK(q.taken() == 1);
}

TEST_CASE("parameters are taken only in forward order", "[layout][buckets]") {
  BucketSequence q(BucketFlow::kParams, 3);
  CHECK_FALSE(q.take(2));
  CHECK_FALSE(q.take(1));
  CHECK(q.take(0));
  CHECK(q.has(0));
  CHECK_FALSE(q.has(1));
  CHECK_FALSE(q.take(2));
  CHECK(q.take(1));
  CHECK(q.take(2));
  CHECK(q.complete());
  CHECK(q.next() == 0);
}

TEST_CASE("a message cut short: reset starts over, end counts it complete", "[layout][buckets]") {
  BucketSequence g(BucketFlow::kGradient, 3);
  CHECK(g.take(2));
  g.reset();  // the worker was lost halfway through its gradient
  CHECK(g.taken() == 0);
  CHECK_FALSE(g.partial());
  CHECK(g.next() == 2);
  BucketSequence p(BucketFlow::kParams, 3);
  CHECK(p.take(0));
  p.end();  // STOP after bucket 0 (a divergence found in bucket 1)
  CHECK(p.complete());
  CHECK(p.has(2));
  CHECK(p.next() == 0);
}

TEST_CASE("one bucket (no pipeline): every message is that bucket", "[layout][buckets]") {
  for (const auto flow : {BucketFlow::kParams, BucketFlow::kGradient}) {
    BucketSequence q(flow, 1);
    CHECK(q.order() == std::vector<int>{0});
    CHECK(q.last() == 0);
    CHECK(q.take(0));
    CHECK(q.complete());
    CHECK(q.take(0));
    CHECK_FALSE(q.take(1));
  }
  CHECK_THROWS_AS(BucketSequence(BucketFlow::kParams, 0), InternalError);
}

TEST_CASE("the rule is stated for error messages", "[layout][buckets]") {
  CHECK(BucketSequence(BucketFlow::kGradient, 4).rule() == "buckets go from 3 down to 0");
  CHECK(BucketSequence(BucketFlow::kParams, 4).rule() == "a shard sends them in forward order");
}
