// Assembling a mini-batch from a data set: the examples a sampler chose,
// copied contiguously, optionally augmented; and the loader's checkpoint
// state (sampler position and augmentation RNG).
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
  // The example indices of the current batch [batch].
  const std::vector<std::int64_t>& indices() const { return m_indices; }
  int batch() const { return m_batch; }
  // Moves on as `batches` calls of next() would, without assembling them:
  // the sampler's position, and two augmentation draws per image (every
  // image draws exactly two). Afterwards state() is what it would be. Lets a
  // rank write the part of a peer whose position is known, as allreduce's
  // rank 0 does for a rank that died (every rank takes one batch a step).
  void skip(std::uint64_t batches);

  // The sampler's state (child "sampler") and the augmentation RNG's
  // ("rng", std::mt19937_64's standard text form, the same on every
  // standard library). After restore(), next() gives the batch the saved
  // loader would have given next. The current batch is not saved.
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);

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
