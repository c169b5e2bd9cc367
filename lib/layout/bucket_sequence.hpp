// The order in which one message's buckets travel between a worker and a
// shard (docs/design.md §4, Buckets), one rule for every side that sends,
// checks or simulates them: parameters (shard -> worker) go bucket 0 first,
// then in forward order; a gradient (worker -> shard) goes top bucket first
// and bucket 0 last, since bucket 0 completes the gradient at the shard and
// asks for parameters. Plain data, no MPI: the shard and the worker check
// what arrives with it, the worker checks what it sends, and the simulator
// schedules and takes buckets by it.
#pragma once

#include <string>
#include <vector>

namespace syncopt::layout {

enum class BucketFlow {
  kParams,    // shard -> worker: bucket 0, 1, ..., n-1
  kGradient,  // worker -> shard: bucket n-1, n-2, ..., 0
};

// One message's buckets from one peer in one direction, as they come: which
// must come next, which are in, and when the message is complete. Taking a
// bucket after a complete message starts the next one.
class BucketSequence {
 public:
  // `buckets`: the slice's bucket count (>= 1; one without the pipeline).
  BucketSequence(BucketFlow flow, int buckets);

  BucketFlow flow() const { return m_flow; }
  int buckets() const { return m_buckets; }
  // The i-th bucket of a message (0 <= i < buckets()), and where bucket b
  // comes in it.
  int at(int i) const;
  int position(int bucket) const;
  // Every bucket in the order it travels.
  std::vector<int> order() const;
  // The bucket that completes a message.
  int last() const { return at(m_buckets - 1); }

  // The bucket that must come next (the first of the next message once
  // this one is complete).
  int next() const { return at(complete() ? 0 : m_taken); }
  // Takes `bucket`: false, and nothing changes, when it is not next().
  bool take(int bucket);
  // Buckets of the current message in so far (buckets() once complete).
  int taken() const { return m_taken; }
  bool complete() const { return m_taken == m_buckets; }
  // Some of a message is in, not all.
  bool partial() const { return m_taken > 0 && m_taken < m_buckets; }
  // Whether `bucket` of the current message is in.
  bool has(int bucket) const { return position(bucket) < m_taken; }
  // Nothing of a message in: the start (its sender was lost, or an answer
  // is asked for anew).
  void reset() { m_taken = 0; }
  // Nothing more comes of this message (STOP): it counts as complete, and
  // what is missing stays as it was.
  void end() { m_taken = m_buckets; }
  // The rule, for an error message: "buckets go from 3 down to 0" or "a
  // shard sends them in forward order".
  std::string rule() const;

 private:
  BucketFlow m_flow;
  int m_buckets;
  int m_taken = 0;
};

}  // namespace syncopt::layout
