// Dropout masks, one definition for every backend: whether an element is
// kept is a pure function of the step's key, the node and the element's
// logical position in the batch tensor (NCHW order: ((n * C + c) * H + h) *
// W + w, or n * units + u for vectors), never of the memory layout a
// backend happens to hold it in. So the CPU backend (whatever blocked layout
// oneDNN picks on this ISA) and the CUDA backend (NCHW) drop the same
// elements, and a resumed or repeated step draws what the first one drew.
//
// The step key is a hash of the batch (images, and labels when there are
// any), or a fixed key that tests set. Everything here is constexpr or
// inline and needs nothing but <cstdint>, so that the CUDA kernels call the
// very same functions (nvcc --expt-relaxed-constexpr).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/seed.hpp"

namespace syncopt::nn::dropout {

// An element is dropped when the top 53 bits of its hash fall below
// rate * 2^53.
constexpr std::uint64_t threshold(double rate) {
  return static_cast<std::uint64_t>(rate * 0x1.0p53);
}

// The key of node `node` (its index in the graph) in a step with key `step_key`.
constexpr std::uint64_t node_key(std::uint64_t step_key, std::uint64_t node) {
  return splitmix64(step_key ^ splitmix64(node));
}

// Whether the element at logical position `index` is kept.
constexpr bool keep(std::uint64_t node_key, std::uint64_t index, std::uint64_t threshold) {
  return (splitmix64(node_key + index) >> 11) >= threshold;
}

// The step key of a batch: `floats` floats of images (their bits) and, if
// labels is not null, `batch` labels.
inline std::uint64_t batch_key(const float* images, std::size_t floats, const std::int32_t* labels,
                               int batch) {
  std::uint64_t h = 0x51ed27b0f3c1a5d3ULL;
  for (std::size_t i = 0; i < floats; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, images + i, sizeof(bits));
    h = splitmix64(h ^ bits);
  }
  for (int i = 0; i < (labels != nullptr ? batch : 0); ++i) {
    h = splitmix64(h ^ static_cast<std::uint32_t>(labels[i]));
  }
  return h;
}

}  // namespace syncopt::nn::dropout
