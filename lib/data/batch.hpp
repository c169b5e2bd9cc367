// Assembling a mini-batch from a data set: the examples a sampler chose,
// copied contiguously, optionally augmented.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "data/dataset.hpp"

namespace syncopt::data {

class BatchLoader {
 public:
  // Reader `shard` of `shards` over `data`'s seeded per-epoch permutation.
  BatchLoader(const Dataset& data, int batch, std::uint64_t seed, int shard, int shards,
              bool augment, const AugmentOptions& aug);
  // Fills images() [batch, C, H, W] and labels() [batch] with the next batch.
  void next();
  const float* images() const { return m_images.data(); }
  const std::int32_t* labels() const { return m_labels.data(); }
  int batch() const { return m_batch; }

 private:
  const Dataset& m_data;
  int m_batch;
  EpochSampler m_sampler;
  bool m_augment;
  AugmentOptions m_aug;
  std::mt19937_64 m_rng;
  std::vector<float> m_images, m_scratch;
  std::vector<std::int32_t> m_labels;
  std::vector<std::int64_t> m_indices;
};

}  // namespace syncopt::data
