// What training a network holds in memory, from its graph alone, before
// anything is allocated (docs/design.md §5, "Memory"): one copy of the
// parameters, and every node's output and its gradient for a batch. A
// lower bound of what the backends allocate (workspaces, pooling indices
// and the library's own buffers come on top), so a model refused by it
// cannot fit.
#pragma once

#include <cstdint>
#include <string>

#include "nn/graph.hpp"

namespace syncopt::nn {

struct Footprint {
  std::uint64_t param_bytes = 0;       // one FP32 copy of every parameter
  std::uint64_t activation_bytes = 0;  // every node's output and its gradient, FP32, whole batch
  std::string largest;                 // the node that needs the most: "'fc1' (layer 3)"
  std::uint64_t largest_bytes = 0;     // its parameters (times `param_copies`) and activations
  std::uint64_t total(std::uint64_t param_copies) const;
};

// For a batch of `batch` examples, with `param_copies` copies of the
// parameters deciding which node is the largest. Saturates at 2^64 - 1
// rather than wrapping (a description of 10^15 parameters is refused, not
// taken for a small one).
Footprint footprint(const Graph& graph, std::int64_t batch, std::uint64_t param_copies);

}  // namespace syncopt::nn
