// Where a model's parameters live and how they travel (docs/design.md §2, §4):
// which shard holds which layers, and the buckets the pipelined exchange
// cuts each shard's slice into. Both work on whole parameter groups (a layer's
// weights, gain and bias: nn::Graph::groups, handed in as layout::Group so that
// layout needs nothing of nn), are pure functions of the model and the config,
// and are shared by the trainer, --dry-run and the simulator.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "layout/roles.hpp"

namespace syncopt::layout {

// One layer's parameters: a contiguous range of the flat parameter vector.
// Groups come in forward (network) order and tile the vector.
struct Group {
  std::string name;
  std::size_t offset = 0, count = 0;  // floats
};

// S contiguous runs of whole groups, in order, covering every group: the
// split whose largest shard is smallest (so each holds about 1/S of the
// bytes where the layer sizes allow; one layer is never cut), and among
// those the one whose slice sizes have the least sum of squares (the other
// shards as even as they can be). The trainer, --dry-run and the simulator
// all place by this one function. ConfigError
// when there are fewer groups than shards (naming both), or when the
// groups do not tile [0, total).
std::vector<Slice> balanced_slices(const std::vector<Group>& groups, int shards);

// The buckets of the pipelined exchange inside one shard's `slice` (which
// must start and end on group boundaries), in forward order. Gradients come
// out of backward top layer first, so buckets are filled from the top of the
// slice down: consecutive whole groups until they hold at least
// `bucket_bytes`; what is left at the bottom is the last (smallest) bucket.
// bucket_bytes <= 0: the whole slice is one bucket (the exchange without
// the pipeline).
std::vector<Slice> make_buckets(const std::vector<Group>& groups, const Slice& slice,
                                long long bucket_bytes);

// The groups [first, last] a slice holds, as "conv1..fc1" (one name when
// it holds one group), for --dry-run and the logs.
std::string group_span(const std::vector<Group>& groups, const Slice& slice);

// --dry-run's placement table: per shard its layers, floats, MB and share of
// the bytes, and its buckets (with bucket_bytes <= 0: one per shard).
std::string describe_placement(const std::vector<Group>& groups, const std::vector<Slice>& slices,
                               long long bucket_bytes);

}  // namespace syncopt::layout
