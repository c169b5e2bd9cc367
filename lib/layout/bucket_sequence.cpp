// The order of a message's buckets (see bucket_sequence.hpp, docs/design.md §4).
#include "layout/bucket_sequence.hpp"

#include "common/error.hpp"

namespace syncopt::layout {

BucketSequence::BucketSequence(BucketFlow flow, int buckets) : m_flow(flow), m_buckets(buckets) {
  if (buckets < 1) {
    throw InternalError("a bucket sequence of " + std::to_string(buckets) +
                        " buckets (a slice has at least one)");
  }
}

int BucketSequence::at(int i) const {
  return m_flow == BucketFlow::kParams ? i : m_buckets - 1 - i;
}

// The order is its own inverse in both flows (identity, reversal).
int BucketSequence::position(int bucket) const { return at(bucket); }

std::vector<int> BucketSequence::order() const {
  std::vector<int> all;
  all.reserve(static_cast<std::size_t>(m_buckets));
  for (int i = 0; i < m_buckets; ++i) all.push_back(at(i));
  return all;
}

bool BucketSequence::take(int bucket) {
  const int from = complete() ? 0 : m_taken;
  if (bucket != at(from)) return false;
  m_taken = from + 1;
  return true;
}

std::string BucketSequence::rule() const {
  return m_flow == BucketFlow::kParams
             ? "a shard sends them in forward order"
             : "buckets go from " + std::to_string(m_buckets - 1) + " down to 0";
}

}  // namespace syncopt::layout
