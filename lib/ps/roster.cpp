// A shard's workers (see roster.hpp).
#include "ps/roster.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace syncopt::ps {

WorkerRoster::WorkerRoster(int workers, int needed)
    : m_needed(needed),
      m_done(static_cast<std::size_t>(workers), 0),
      m_lost_flag(static_cast<std::size_t>(workers), 0) {}

void WorkerRoster::done(int w) { m_done.at(static_cast<std::size_t>(w)) = 1; }

void WorkerRoster::lose(int w, nlohmann::json record) {
  auto& flag = m_lost_flag.at(static_cast<std::size_t>(w));
  if (flag != 0) throw InternalError("worker " + std::to_string(w) + " lost twice");
  flag = 1;
  m_lost.push_back(std::move(record));
}

bool WorkerRoster::any_active() const {
  for (std::size_t w = 0; w < m_done.size(); ++w) {
    if (active(static_cast<int>(w))) return true;
  }
  return false;
}

int WorkerRoster::live() const {
  return static_cast<int>(std::count(m_lost_flag.begin(), m_lost_flag.end(), 0));
}

}  // namespace syncopt::ps
