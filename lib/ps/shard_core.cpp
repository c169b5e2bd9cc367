// Shard decision logic (see shard_core.hpp).
#include "ps/shard_core.hpp"

#include <algorithm>
#include <limits>

#include "comm/protocol.hpp"
#include "common/error.hpp"
#include "common/finite.hpp"

namespace syncopt::ps {

using config::Mode;

namespace {
// Versions whose virtual start is kept: a gradient of an older one gives
// adaptive b no arrival time (as the wall clock's shard keeps 8).
constexpr std::size_t kVirtualStarts = 64;
}  // namespace

ShardCore::ShardCore(Mode mode, int workers, int n, std::size_t count, double timeout_s,
                     std::int64_t ssp_bound)
    : m_mode(mode),
      m_versioned(config::traits(mode).versioned),
      m_workers(workers),
      m_n(n),
      m_count(count),
      m_timeout_s(timeout_s),
      m_ssp_bound(ssp_bound),
      m_drops(static_cast<std::size_t>(workers), 0),
      m_clock(static_cast<std::size_t>(workers), 0),
      m_retired(static_cast<std::size_t>(workers), 0) {
  if (!config::traits(mode).uses_ps) {
    throw InternalError("ShardCore for train.mode = \"" + std::string(config::mode_name(mode)) +
                        "\", which has no parameter server");
  }
  if (m_versioned) {
    m_slots.assign(static_cast<std::size_t>(workers), std::vector<float>(count));
    m_contributed.assign(static_cast<std::size_t>(workers), 0);
  } else {
    m_sum.assign(count, 0.0f);
  }
}

GradRecord& ShardCore::add_grad(int worker, std::uint64_t version, double arrival_s,
                                double compute_s, float loss, std::uint64_t seq) {
  GradRecord& g = m_current.grads.emplace_back();
  g.worker = worker;
  g.arrival_s = arrival_s;
  g.version = version;
  g.compute_s = compute_s;
  g.loss = loss;
  g.seq = seq;
  const auto w = static_cast<std::size_t>(worker);
  if (w < m_phases.size() && m_phases[w].first == seq) g.phases = m_phases[w].second;
  return g;
}

void ShardCore::set_phases(int worker, std::uint64_t seq, const metrics::PhaseTimes& phases) {
  const auto w = static_cast<std::size_t>(worker);
  if (m_phases.size() <= w) m_phases.resize(w + 1);
  m_phases[w] = {seq, phases};
}

void ShardCore::record(int worker, std::uint64_t version, bool accepted, std::int64_t staleness,
                       double compute_s, float loss, double now, std::uint64_t seq) {
  GradRecord& g = add_grad(worker, version, now - m_step_start, compute_s, loss, seq);
  g.accepted = accepted;
  g.staleness = staleness;
  if (!accepted) ++m_drops[static_cast<std::size_t>(worker)];
}

void ShardCore::use_virtual_clock(double apply_s) {
  if (!m_versioned) {
    throw ConfigError("train.clock = \"virtual\" applies to sync and timeout, not train.mode = \"" +
                      std::string(config::mode_name(m_mode)) +
                      "\" (simulate that mode with syncopt simulate)");
  }
  m_virtual = true;
  m_apply_s = apply_s;
  m_vw.assign(static_cast<std::size_t>(m_workers), VWorker{});
  for (std::size_t w = 0; w < m_vw.size(); ++w) {
    m_vw[w].at = m_step_start;
    if (m_retired[w]) m_vw[w].state = VState::kGone;
  }
  m_vstart.clear();
  m_vstart[m_version] = m_step_start;
}

// Virtual clock: the gradient waits in its worker's slot (a worker has at
// most one in: it cannot compute again before it is answered) until
// take_virtual() reaches its finish time.
void ShardCore::on_virtual_grad(int worker, std::uint64_t version, const float* grad, float loss,
                                double compute_s, std::uint64_t seq, double vtime) {
  VWorker& v = m_vw[static_cast<std::size_t>(worker)];
  if (v.state != VState::kComputing || v.owed) {
    throw InternalError("shard core (virtual clock): a gradient from worker " +
                        std::to_string(worker) + " before it was answered");
  }
  if (vtime < v.at) {
    throw InternalError("shard core (virtual clock): worker " + std::to_string(worker) +
                        "'s gradient finishes at " + std::to_string(vtime) +
                        " s, before it was answered (" + std::to_string(v.at) +
                        " s): every rank must run the same syncopt and config");
  }
  std::copy(grad, grad + m_count, m_slots[static_cast<std::size_t>(worker)].begin());
  v.state = VState::kQueued;
  v.at = vtime;
  v.version = version;
  v.seq = seq;
  v.loss = loss;
  v.compute_s = compute_s;
  take_virtual();
}

// Takes queued gradients in the order of their finish times (ties: lower
// worker id) while none can be overtaken: a gradient finishing at F is
// taken once every computing worker was answered at or after F (its next
// finish is later: compute times are > 0). Stops at a due update, which
// apply() must apply first; a timeout deadline falls due like a gradient.
void ShardCore::take_virtual() {
  while (!m_due) {
    int next = -1;
    double safe = std::numeric_limits<double>::infinity();
    for (int w = 0; w < m_workers; ++w) {
      const VWorker& v = m_vw[static_cast<std::size_t>(w)];
      if (v.state == VState::kComputing) safe = std::min(safe, v.at);
      if (v.state == VState::kQueued &&
          (next < 0 || v.at < m_vw[static_cast<std::size_t>(next)].at)) {
        next = w;
      }
    }
    const double at = next >= 0 ? m_vw[static_cast<std::size_t>(next)].at
                                : std::numeric_limits<double>::infinity();
    if (m_mode == Mode::kTimeout && m_used > 0) {
      // A gradient finishing exactly at the deadline still counts.
      const double deadline = m_first_accept + m_timeout_s;
      if (deadline < at && deadline <= safe) {
        m_due = true;
        m_cutoff = deadline;
        return;
      }
    }
    if (next < 0 || at > safe) return;
    take_one_virtual(next);
  }
}

void ShardCore::take_one_virtual(int worker) {
  const auto w = static_cast<std::size_t>(worker);
  VWorker& v = m_vw[w];
  v.state = VState::kWaiting;
  if (const auto it = m_vstart.find(v.version); it != m_vstart.end()) {
    m_arrivals.emplace_back(v.version, v.at - it->second);
  }
  if (v.version == m_version && !m_contributed[w]) {
    m_contributed[w] = 1;
    if (m_used == 0) m_first_accept = v.at;
    ++m_used;
    m_loss_sum += v.loss;
    GradRecord& g = add_grad(worker, v.version, v.at - m_step_start, v.compute_s, v.loss, v.seq);
    g.accepted = true;
    if (full()) {
      m_due = true;
      m_cutoff = v.at;
    }
    return;  // answered with the update
  }
  // Late: it finished after the cutoff of its version (or during the
  // apply that ended it); the shard takes it once free, at max(F, T).
  const double taken = std::max(v.at, m_step_start);
  const auto staleness =
      static_cast<std::int64_t>(m_version) - static_cast<std::int64_t>(v.version);
  record(worker, v.version, false, staleness, v.compute_s, v.loss, taken, v.seq);
  owe_answer(worker, taken);
}

void ShardCore::owe_answer(int worker, double at) {
  VWorker& v = m_vw[static_cast<std::size_t>(worker)];
  v.at = at;
  if (m_retired[static_cast<std::size_t>(worker)]) {
    v.state = VState::kGone;
    return;
  }
  v.state = VState::kComputing;  // its next gradient finishes after `at`
  if (!v.owed) ++m_owed;
  v.owed = true;
}

void ShardCore::answered(int worker) {
  if (!m_virtual) return;
  VWorker& v = m_vw[static_cast<std::size_t>(worker)];
  if (v.owed) {
    v.owed = false;
    --m_owed;
  }
  take_virtual();
}

std::vector<std::pair<std::uint64_t, double>> ShardCore::take_arrivals() {
  std::vector<std::pair<std::uint64_t, double>> out;
  out.swap(m_arrivals);
  return out;
}

void ShardCore::follow_leader() {
  if (!m_versioned) throw InternalError("follow_leader() for a mode without versions");
  m_follower = true;
}

void ShardCore::decide(std::uint64_t version, std::vector<int> workers) {
  if (version < m_version) return;  // a decision this shard no longer needs
  m_decided[version] = std::move(workers);
}

// Follower: every fresh gradient of the version is kept; accepted or
// dropped at apply(), as the leader decided.
bool ShardCore::on_deferred_grad(int worker, std::uint64_t version, const float* grad, float loss,
                                 double compute_s, double now, std::uint64_t seq) {
  const auto w = static_cast<std::size_t>(worker);
  const auto staleness = static_cast<std::int64_t>(m_version) - static_cast<std::int64_t>(version);
  if (version != m_version || m_contributed[w]) {
    record(worker, version, false, staleness, compute_s, loss, now, seq);
    return false;
  }
  if (grad != m_slots[w].data()) std::copy(grad, grad + m_count, m_slots[w].begin());
  m_contributed[w] = 1;
  ++m_used;
  m_loss_sum += loss;
  add_grad(worker, version, now - m_step_start, compute_s, loss, seq);  // decided at apply()
  return true;
}

std::vector<int> ShardCore::choose_deferred() const {
  std::vector<int> chosen;
  for (const int w : m_decided.at(m_version)) {
    if (m_contributed[static_cast<std::size_t>(w)]) chosen.push_back(w);
  }
  return chosen;
}

void ShardCore::lead() { m_leader = true; }

float* ShardCore::slot(int worker) {
  return m_versioned ? m_slots[static_cast<std::size_t>(worker)].data() : nullptr;
}

void ShardCore::use_buckets(int buckets) {
  if (m_mode != Mode::kAsync && m_mode != Mode::kSsp) {
    throw InternalError("per-bucket apply in train.mode = \"" +
                        std::string(config::mode_name(m_mode)) + "\"");
  }
  if (buckets < 2) return;
  m_bucket_version.assign(static_cast<std::size_t>(buckets - 1), m_version);
  m_layer_staleness.assign(static_cast<std::size_t>(m_workers),
                           std::vector<std::int64_t>(static_cast<std::size_t>(buckets), 0));
}

std::int64_t ShardCore::on_bucket(int worker, int bucket, std::uint64_t version) {
  if (bucket < 0 || bucket >= buckets() || m_bucket_version.empty()) {
    throw InternalError("shard core: bucket " + std::to_string(bucket) + " of " +
                        std::to_string(buckets()) + " outside the bucketed async mode");
  }
  const std::uint64_t now = bucket_version(bucket);
  const auto staleness = static_cast<std::int64_t>(now) - static_cast<std::int64_t>(version);
  m_layer_staleness[static_cast<std::size_t>(worker)][static_cast<std::size_t>(bucket)] = staleness;
  if (bucket > 0) ++m_bucket_version[static_cast<std::size_t>(bucket - 1)];
  return staleness;
}

bool ShardCore::on_grad(int worker, std::uint64_t version, const float* grad, float loss,
                        double compute_s, double now, std::uint64_t seq, double vtime,
                        std::uint64_t oldest) {
  if (m_virtual) {
    on_virtual_grad(worker, version, grad, loss, compute_s, seq, vtime);
    return true;
  }
  if (deferred()) return on_deferred_grad(worker, version, grad, loss, compute_s, now, seq);
  // The first-N cutoff has one decision point: full() makes an update due
  // (ready()), and the loop applies it before it hands over the next
  // gradient, which then is of an older version and dropped as late. A loop
  // that does not is a bug, not a reason to accept an (N+1)-th.
  if (full()) {
    throw InternalError("shard core: a gradient from worker " + std::to_string(worker) +
                        " was handed over while the update of version " +
                        std::to_string(m_version) + " (" + std::to_string(m_used) +
                        " gradients) was due and not applied");
  }
  const auto w = static_cast<std::size_t>(worker);
  const auto staleness = static_cast<std::int64_t>(m_version) - static_cast<std::int64_t>(version);
  if (m_versioned) {
    // Fresh and first from this worker in this step; a leader also wants it
    // fresh on every shard (a worker that started, or was answered, between
    // two shards' versions is stale on one).
    const bool fresh =
        version == m_version && (!m_leader || oldest == kEveryShard || oldest >= version);
    const bool accept = fresh && !m_contributed[w];
    record(worker, version, accept, staleness, compute_s, loss, now, seq);
    if (!accept) return false;
    if (grad != m_slots[w].data()) std::copy(grad, grad + m_count, m_slots[w].begin());
    m_contributed[w] = 1;
    if (m_used == 0) m_first_accept = now;
    ++m_used;
    m_loss_sum += loss;
    return true;
  }
  // async, ssp, softsync: every gradient counts, whatever its version.
  record(worker, version, true, staleness, compute_s, loss, now, seq);
  if (grad == nullptr) {
    // Bucketed: applied bucket by bucket by the loop; the record keeps each
    // bucket's staleness.
    if (m_bucket_version.empty()) {
      throw InternalError("shard core: a gradient without data outside the bucketed async mode");
    }
    m_current.grads.back().layer_staleness = m_layer_staleness[w];
    ++m_used;
    m_loss_sum += loss;
    return true;
  }
  for (std::size_t i = 0; i < m_count; ++i) m_sum[i] += grad[i];
  ++m_used;
  m_loss_sum += loss;
  return true;
}

bool ShardCore::ready(double now) const {
  if (m_virtual) return m_due && m_owed == 0;
  if (m_follower) {
    // The leader's set is known, and each of its workers' gradients is in
    // (a worker that died meanwhile is not waited for).
    const auto it = m_decided.find(m_version);
    if (it == m_decided.end()) return false;
    int in = 0;
    for (const int w : it->second) {
      const auto wi = static_cast<std::size_t>(w);
      if (m_contributed[wi]) {
        ++in;
      } else if (!m_retired[wi]) {
        return false;
      }
    }
    return in > 0;
  }
  if (m_mode == Mode::kTimeout && m_used >= 1 && now - m_first_accept >= m_timeout_s) return true;
  return full();
}

bool ShardCore::full() const {
  switch (m_mode) {
    case Mode::kSync:
    case Mode::kTimeout:
    case Mode::kSoftsync:
      return m_used >= m_n;
    case Mode::kAsync:
    case Mode::kSsp:
      return m_used >= 1;
    case Mode::kLocal:
    case Mode::kAllreduce:
      break;
  }
  return false;
}

double ShardCore::time_to_deadline(double now) const {
  if (m_virtual || deferred() || m_mode != Mode::kTimeout || m_used == 0) return -1.0;
  return std::max(0.0, m_first_accept + m_timeout_s - now);
}

StepRecord ShardCore::apply(float* mean, double now) {
  StepRecord out = begin_apply(now);
  if (mean != nullptr) {
    m_mean_finite = average(mean, 0, m_count);
  } else {
    if (m_bucket_version.empty()) throw InternalError("shard apply() without a mean");
    m_mean_finite = true;  // the loop checked each bucket before applying it
  }
  end_apply();
  return out;
}

StepRecord ShardCore::begin_apply(double now) {
  if (m_used == 0) throw InternalError("shard apply() with no gradient");
  if (m_averaging > 0) throw InternalError("shard begin_apply() before end_apply()");
  if (deferred()) {
    // Only the chosen ones count: the others were computed, but late.
    const std::vector<int> chosen = choose_deferred();
    double loss = 0.0;
    // Marked, not searched: a thousand workers' shards apply every step.
    std::vector<char> keep(static_cast<std::size_t>(m_workers), 0);
    for (const int w : chosen) keep[static_cast<std::size_t>(w)] = 1;
    for (std::size_t w = 0; w < keep.size(); ++w) {
      if (!keep[w]) m_contributed[w] = 0;
    }
    for (auto& g : m_current.grads) {
      if (g.version != m_version) continue;  // recorded as dropped on arrival
      g.accepted = m_contributed[static_cast<std::size_t>(g.worker)] != 0;
      if (!g.accepted) ++m_drops[static_cast<std::size_t>(g.worker)];
      if (g.accepted) loss += g.loss;
    }
    const auto by_arrival = [](const GradRecord& a, const GradRecord& b) {
      return a.arrival_s < b.arrival_s;
    };
    if (!std::is_sorted(m_current.grads.begin(), m_current.grads.end(), by_arrival)) {
      std::stable_sort(m_current.grads.begin(), m_current.grads.end(), by_arrival);
    }
    m_used = static_cast<int>(chosen.size());
    m_loss_sum = loss;
    m_decided.erase(m_decided.begin(), m_decided.upper_bound(m_version));
  }
  if (m_virtual) now = m_cutoff + m_apply_s;
  StepRecord out = std::move(m_current);
  out.step = m_version + 1;
  out.version = m_version;
  out.t_start = m_step_start;
  out.t_apply = now;
  out.used = m_used;
  out.loss = static_cast<float>(m_loss_sum / m_used);
  ++m_version;
  m_averaging = m_used;
  m_used = 0;
  m_loss_sum = 0.0;
  m_first_accept = -1.0;
  m_step_start = now;
  m_current = StepRecord{};
  if (m_virtual) {
    out.clock = "virtual";
    // The contributors are answered with the new version when it is done;
    // taking resumes once the answers owed are sent (answered()).
    m_due = false;
    m_vstart[m_version] = now;
    while (m_vstart.size() > kVirtualStarts) m_vstart.erase(m_vstart.begin());
    for (const auto& g : out.grads) {
      if (g.accepted) owe_answer(g.worker, now);
    }
  }
  return out;
}

bool ShardCore::average(float* mean, std::size_t offset, std::size_t count) {
  if (m_averaging == 0) throw InternalError("shard average() outside begin_apply/end_apply");
  if (offset + count > m_count) throw InternalError("shard average() outside the slice");
  const float inv = 1.0f / static_cast<float>(m_averaging);
  mean += offset;
  std::uint32_t bad = 0;
  if (m_versioned) {
    // Sum in worker order: the same N gradients give the same bits whatever
    // order they arrived in (and in whatever ranges they are averaged).
    bool first = true;
    for (std::size_t w = 0; w < m_slots.size(); ++w) {
      if (!m_contributed[w]) continue;
      const float* g = m_slots[w].data() + offset;
      if (first) {
        std::copy(g, g + count, mean);
        first = false;
      } else {
        for (std::size_t i = 0; i < count; ++i) mean[i] += g[i];
      }
    }
    // The divergence check rides on the last pass over the mean.
    for (std::size_t i = 0; i < count; ++i) {
      mean[i] *= inv;
      bad |= nonfinite_bit(mean[i]);
    }
  } else {
    float* sum = m_sum.data() + offset;
    for (std::size_t i = 0; i < count; ++i) {
      mean[i] = sum[i] * inv;
      bad |= nonfinite_bit(mean[i]);
      sum[i] = 0.0f;
    }
  }
  return bad == 0;
}

void ShardCore::end_apply() {
  if (m_versioned) std::fill(m_contributed.begin(), m_contributed.end(), 0);
  m_averaging = 0;
}

void ShardCore::on_push(int worker) { ++m_clock[static_cast<std::size_t>(worker)]; }

void ShardCore::retire(int worker) {
  const auto w = static_cast<std::size_t>(worker);
  m_retired[w] = 1;
  if (!m_virtual) return;
  // A gradient already in is still taken; nothing more is waited for.
  VWorker& v = m_vw[w];
  if (v.owed) --m_owed;
  v.owed = false;
  if (v.state == VState::kComputing) v.state = VState::kGone;
  take_virtual();
}

bool ShardCore::may_answer(int worker, std::uint64_t wanted) const {
  if (wanted == comm::kAnyVersion) return true;
  if (m_virtual) return m_vw[static_cast<std::size_t>(worker)].owed;
  if (m_versioned) return m_version > wanted;
  if (m_mode != Mode::kSsp) return true;
  std::int64_t slowest = -1;
  for (std::size_t v = 0; v < m_clock.size(); ++v) {
    if (m_retired[v]) continue;
    slowest = slowest < 0 ? m_clock[v] : std::min(slowest, m_clock[v]);
  }
  return slowest < 0 || m_clock[static_cast<std::size_t>(worker)] - slowest <= m_ssp_bound;
}

checkpoint::State ShardCore::state() const {
  checkpoint::State s;
  s.put("version", m_version);
  if (!m_bucket_version.empty()) s.put("bucket_versions", m_bucket_version);
  s.put("drops", m_drops);
  s.put("clocks", m_clock);
  return s;
}

void ShardCore::restore(const checkpoint::State& s) {
  if (m_used != 0) throw InternalError("ShardCore::restore with gradients pending");
  const auto& drops = s.get<std::vector<std::int64_t>>("drops");
  const auto& clocks = s.get<std::vector<std::int64_t>>("clocks");
  if (drops.size() != m_drops.size() || clocks.size() != m_clock.size()) {
    throw ConfigError(s.field_error(
        "drops", "a checkpoint of " + std::to_string(drops.size()) + " workers; this run has " +
                     std::to_string(m_drops.size()) + ": resume with the same number of ranks"));
  }
  m_version = s.get<std::uint64_t>("version");
  m_drops = drops;
  m_clock = clocks;
  if (!m_bucket_version.empty()) {
    // A checkpoint without bucket versions (saved without the pipeline):
    // every bucket at the shard's version.
    std::vector<std::uint64_t> v(m_bucket_version.size(), m_version);
    if (s.has("bucket_versions")) v = s.get<std::vector<std::uint64_t>>("bucket_versions");
    if (v.size() != m_bucket_version.size()) {
      throw ConfigError(s.field_error("bucket_versions",
                                      std::to_string(v.size() + 1) + " buckets; this run has " +
                                          std::to_string(m_bucket_version.size() + 1) +
                                          ": resume with the same exchange.bucket_bytes"));
    }
    m_bucket_version = std::move(v);
  }
  // The virtual time line starts again at the resumed version: every worker
  // computes on it from the same instant (stragglers in flight at the
  // checkpoint are not carried over).
  if (m_virtual) use_virtual_clock(m_apply_s);
}

}  // namespace syncopt::ps
