// A shard's view of its workers, free of MPI: which are still training,
// which said goodbye, which were lost (and the record of each loss that
// summary.json's lost_workers lists), and whether the run can go on with
// the ones that are left. The shard loop (ps/shard.cpp) feeds it what the
// heartbeats and the messages say, and acts on its verdict.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace syncopt::ps {

class WorkerRoster {
 public:
  // `workers` K; `needed`: live workers without which no update can be made
  // (N in sync, timeout and softsync; 1 in async and ssp).
  WorkerRoster(int workers, int needed);

  // Worker `w` sent its last message (CTRL): it is done, not lost.
  void done(int w);
  // Worker `w` is lost; `record` is its entry in lost_workers.
  void lose(int w, nlohmann::json record);

  bool is_done(int w) const { return m_done[static_cast<std::size_t>(w)] != 0; }
  bool is_lost(int w) const { return m_lost_flag[static_cast<std::size_t>(w)] != 0; }
  // Still expected to send messages.
  bool active(int w) const { return !is_done(w) && !is_lost(w); }
  bool any_active() const;
  // Workers not lost (done ones count: they finished their part).
  int live() const;
  int needed() const { return m_needed; }
  // Whether updates can still be made.
  bool enough() const { return live() >= m_needed; }
  const nlohmann::json& lost() const { return m_lost; }

 private:
  int m_needed;
  std::vector<char> m_done, m_lost_flag;
  nlohmann::json m_lost = nlohmann::json::array();
};

}  // namespace syncopt::ps
