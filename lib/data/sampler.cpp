// EpochSampler: a seeded permutation per epoch, sharded across readers, the
// same on every rank and every run (Fisher-Yates on mt19937_64 with our own
// unbiased bounded draw; std::shuffle's algorithm is implementation-defined).
#include <numeric>
#include <string>

#include "common/error.hpp"
#include "data/dataset.hpp"

namespace syncopt::data {

EpochSampler::EpochSampler(std::int64_t count, std::uint64_t seed, int shard, int shards)
    : m_count(count), m_seed(seed), m_shard(shard), m_shards(shards) {
  if (shards < 1 || shard < 0 || shard >= shards)
    throw ConfigError("EpochSampler: need 0 <= shard < shards, found shard " +
                      std::to_string(shard) + " of " + std::to_string(shards));
  if (count < shards)
    throw ConfigError("EpochSampler: " + std::to_string(count) +
                      " examples cannot be split across " + std::to_string(shards) +
                      " readers: expected at least one example per reader");
  reshuffle();
}

void EpochSampler::reshuffle() {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(m_count));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  std::mt19937_64 rng(mix_seed(m_seed, static_cast<std::uint64_t>(m_epoch)));
  for (std::int64_t i = m_count - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(uniform_below(rng, static_cast<std::uint64_t>(i + 1)));
    std::swap(perm[i], perm[j]);
  }
  m_perm.clear();
  for (std::int64_t p = m_shard; p < m_count; p += m_shards) m_perm.push_back(perm[p]);
  m_pos = 0;
}

void EpochSampler::next_batch(std::int64_t batch, std::vector<std::int64_t>& indices) {
  if (batch < 0)
    throw ConfigError("EpochSampler: batch must be >= 0, found " + std::to_string(batch));
  indices.clear();
  indices.reserve(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i < batch; ++i) {
    if (m_pos == m_perm.size()) {
      ++m_epoch;
      reshuffle();
    }
    indices.push_back(m_perm[m_pos++]);
  }
}

}  // namespace syncopt::data
