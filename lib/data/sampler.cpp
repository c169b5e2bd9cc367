// EpochSampler: a seeded permutation per epoch, sharded across readers, the
// same on every rank and every run (Fisher-Yates on mt19937_64 with our own
// unbiased bounded draw; std::shuffle's algorithm is implementation-defined),
// and its checkpoint state.
#include <algorithm>
#include <numeric>
#include <string>

#include "common/error.hpp"
#include "common/seed.hpp"
#include "data/dataset.hpp"

namespace syncopt::data {

namespace {

// The sampler of a checkpoint must be the one being restored: the same
// position in another permutation would be other examples.
template <class T>
void check_same(const checkpoint::State& s, const char* field, const char* what, T now) {
  const T saved = s.get<T>(field);
  if (saved != now) {
    throw ConfigError("cannot resume: " +
                      s.field_error(field, std::string("saved with ") + what + " " +
                                               std::to_string(saved) + ", but it is " +
                                               std::to_string(now) + " now") +
                      "; resume with the data, seed and cluster layout the run started with, or "
                      "start a fresh run (run.resume = false)");
  }
}

// The permutation of epoch `epoch`: Fisher-Yates, the same everywhere.
std::vector<std::int64_t> epoch_permutation(std::int64_t count, std::uint64_t seed,
                                            std::int64_t epoch) {
  std::vector<std::int64_t> perm(static_cast<std::size_t>(count));
  std::iota(perm.begin(), perm.end(), std::int64_t{0});
  std::mt19937_64 rng(mix_seed(seed, static_cast<std::uint64_t>(epoch)));
  for (std::int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(uniform_below(rng, static_cast<std::uint64_t>(i + 1)));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

}  // namespace

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
  const std::vector<std::int64_t> perm = epoch_permutation(m_count, m_seed, m_epoch);
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
    if (m_carry_pos < m_carry.size()) {
      indices.push_back(m_carry[m_carry_pos++]);
      continue;
    }
    if (m_pos == m_perm.size()) {
      ++m_epoch;
      reshuffle();
    }
    indices.push_back(m_perm[m_pos++]);
  }
}

void EpochSampler::skip(std::uint64_t examples) {
  const auto carried = std::min<std::uint64_t>(examples, m_carry.size() - m_carry_pos);
  m_carry_pos += static_cast<std::size_t>(carried);
  examples -= carried;
  while (examples > 0) {
    // As next_batch: a new epoch starts when an example is wanted past the end.
    if (m_pos == m_perm.size()) {
      ++m_epoch;
      reshuffle();
    }
    const auto step = std::min<std::uint64_t>(examples, m_perm.size() - m_pos);
    m_pos += static_cast<std::size_t>(step);
    examples -= step;
  }
}

checkpoint::State EpochSampler::state() const {
  checkpoint::State s;
  s.put("count", m_count);
  s.put("seed", m_seed);
  s.put("shard", std::int64_t{m_shard});
  s.put("shards", std::int64_t{m_shards});
  s.put("epoch", m_epoch);
  s.put("pos", std::uint64_t{m_pos});
  if (m_carry_pos < m_carry.size()) {
    s.put("carry", std::vector<std::int64_t>(
                       m_carry.begin() + static_cast<std::ptrdiff_t>(m_carry_pos), m_carry.end()));
  }
  return s;
}

void EpochSampler::restore(const checkpoint::State& s) {
  check_same(s, "count", "examples", m_count);
  check_same(s, "seed", "run.seed", m_seed);
  check_same(s, "shard", "reader", std::int64_t{m_shard});
  check_same(s, "shards", "readers", std::int64_t{m_shards});
  const std::int64_t epoch = s.get<std::int64_t>("epoch");
  const std::uint64_t pos = s.get<std::uint64_t>("pos");
  // This reader's share of an epoch: positions shard, shard + shards, ...
  const auto share = static_cast<std::uint64_t>((m_count - m_shard + m_shards - 1) / m_shards);
  if (epoch < 0) throw DataError(s.field_error("epoch", std::to_string(epoch) + " is negative"));
  if (pos > share) {
    throw DataError(s.field_error("pos", std::to_string(pos) + " is past the end of an epoch of " +
                                             std::to_string(share) + " examples"));
  }
  std::vector<std::int64_t> carry;
  if (s.has("carry")) carry = s.get<std::vector<std::int64_t>>("carry");
  for (const auto i : carry) {
    if (i < 0 || i >= m_count) {
      throw DataError(s.field_error("carry", "example " + std::to_string(i) +
                                                 " is not one of the " + std::to_string(m_count)));
    }
  }
  m_epoch = epoch;
  reshuffle();
  m_pos = static_cast<std::size_t>(pos);
  m_carry = std::move(carry);
  m_carry_pos = 0;
}

namespace {

// One old reader's place, read from its state.
struct Place {
  std::int64_t epoch = 0;
  std::uint64_t pos = 0;
  std::vector<std::int64_t> carry;
};

}  // namespace

std::vector<checkpoint::State> continue_on(const std::vector<checkpoint::State>& old, int shards) {
  if (old.empty() || shards < 1) throw InternalError("continue_on: no readers");
  const auto count = old[0].get<std::int64_t>("count");
  const auto seed = old[0].get<std::uint64_t>("seed");
  const auto k_old = static_cast<std::int64_t>(old.size());
  std::vector<Place> at;
  for (std::size_t r = 0; r < old.size(); ++r) {
    const auto& s = old[r];
    check_same(s, "count", "examples", count);
    check_same(s, "seed", "run.seed", seed);
    check_same(s, "shard", "reader", static_cast<std::int64_t>(r));
    check_same(s, "shards", "readers", k_old);
    Place p{s.get<std::int64_t>("epoch"), s.get<std::uint64_t>("pos"), {}};
    if (s.has("carry")) p.carry = s.get<std::vector<std::int64_t>>("carry");
    at.push_back(std::move(p));
  }
  if (count < shards) {
    throw ConfigError(std::to_string(count) + " examples cannot be split across " +
                      std::to_string(shards) + " workers");
  }
  // What no old reader took: their carries, round-robin, then the rest of
  // every epoch begun, in the permutation's order.
  std::vector<std::int64_t> rest;
  for (std::size_t j = 0;; ++j) {
    bool any = false;
    for (const auto& p : at) {
      if (j < p.carry.size()) rest.push_back(p.carry[j]);
      any = any || j < p.carry.size();
    }
    if (!any) break;
  }
  std::int64_t first = at[0].epoch, last = at[0].epoch;
  for (const auto& p : at) {
    first = std::min(first, p.epoch);
    last = std::max(last, p.epoch);
  }
  for (std::int64_t e = first; e <= last; ++e) {
    const auto perm = epoch_permutation(count, seed, e);
    for (std::int64_t i = 0; i < count; ++i) {
      const Place& p = at[static_cast<std::size_t>(i % k_old)];
      const auto j = static_cast<std::uint64_t>(i / k_old);  // its place in that reader's share
      const bool taken = p.epoch > e || (p.epoch == e && j < p.pos);
      if (!taken) rest.push_back(perm[static_cast<std::size_t>(i)]);
    }
  }
  std::vector<checkpoint::State> out;
  for (int r = 0; r < shards; ++r) {
    checkpoint::State s;
    s.put("count", count);
    s.put("seed", seed);
    s.put("shard", std::int64_t{r});
    s.put("shards", std::int64_t{shards});
    s.put("epoch", last + 1);
    s.put("pos", std::uint64_t{0});
    std::vector<std::int64_t> carry;
    for (std::size_t i = static_cast<std::size_t>(r); i < rest.size();
         i += static_cast<std::size_t>(shards)) {
      carry.push_back(rest[i]);
    }
    if (!carry.empty()) s.put("carry", std::move(carry));
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace syncopt::data
