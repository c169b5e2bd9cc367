// Mini-batch assembly (see batch.hpp).
#include "data/batch.hpp"

#include <algorithm>
#include <sstream>

#include "common/error.hpp"

namespace syncopt::data {

BatchLoader::BatchLoader(const Dataset& data, int batch, std::uint64_t seed, int shard, int shards,
                         bool augment, const AugmentOptions& aug)
    : m_data(data),
      m_batch(batch),
      m_sampler(data.count, seed, shard, shards),
      m_augment(augment),
      m_aug(aug),
      m_rng(seed ^ (0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(shard + 1))),
      m_images(static_cast<std::size_t>(batch * data.image_size())),
      m_labels(static_cast<std::size_t>(batch)) {}

void BatchLoader::next() {
  m_sampler.next_batch(m_batch, m_indices);
  const std::int64_t size = m_data.image_size();
  for (int i = 0; i < m_batch; ++i) {
    const auto idx = m_indices[static_cast<std::size_t>(i)];
    float* dst = m_images.data() + i * size;
    m_data.read(idx, 1, dst);
    if (m_augment) {
      augment_image(dst, m_data.channels, m_data.height, m_data.width, m_aug, m_rng, m_scratch);
    }
    m_labels[static_cast<std::size_t>(i)] = m_data.labels[static_cast<std::size_t>(idx)];
  }
}

void BatchLoader::skip(std::uint64_t batches) {
  const std::uint64_t images = batches * static_cast<std::uint64_t>(m_batch);
  m_sampler.skip(images);
  // augment_image draws theta and scale for every image, whatever the options.
  if (m_augment) m_rng.discard(2 * images);
}

checkpoint::State BatchLoader::state() const {
  checkpoint::State s;
  s.put_child("sampler", m_sampler.state());
  std::ostringstream rng;
  rng << m_rng;
  s.put("rng", rng.str());
  return s;
}

void BatchLoader::restore(const checkpoint::State& s) {
  // Parse the RNG first, so a damaged state leaves the loader as it was.
  std::mt19937_64 rng;
  std::istringstream in(s.get<std::string>("rng"));
  in >> rng;
  if (in.fail() || !(in >> std::ws).eof()) {
    throw DataError(s.field_error("rng", "not the text form of a std::mt19937_64 state"));
  }
  m_sampler.restore(s.child("sampler"));
  m_rng = rng;
}

}  // namespace syncopt::data
