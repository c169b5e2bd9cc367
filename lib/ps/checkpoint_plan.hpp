// Shard 0's bookkeeping of checkpoints, free of MPI so that it can be
// tested exactly: when a periodic checkpoint falls due, which ranks' parts
// a save waits for, which part names it commits, and whether the final one
// (at the end of training or on a stop) is on disk. The shard loop
// (ps/shard.cpp) does the messaging around it: it asks the other shards and
// the evaluator for their parts, flags its next answer to each worker, and
// commits when the plan says the save is complete.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "layout/roles.hpp"

namespace syncopt::ps {

class CheckpointPlan {
 public:
  // `now`: run-relative seconds at the start (the first periodic checkpoint
  // is run.checkpoint_every_s later).
  CheckpointPlan(const config::RunConfig& run, const layout::Roles& roles, double now);
  // A resumed run starts from `step`, whose checkpoint is on disk already.
  void resumed_at(std::uint64_t step) { m_resumed_step = step; }

  // A periodic checkpoint is due at `version`, `now` (none while one is
  // being saved, and none of the step the run resumed from).
  bool due(std::uint64_t version, double now) const;

  // Starts the save of `step`: shard 0's own part is written, the parts of
  // `ranks` are awaited. `final`: the last checkpoint of the run.
  void begin(std::uint64_t step, bool final, double now, const std::vector<int>& ranks);
  // The step on disk already is the one to save (just resumed): nothing to
  // wait for; a final one counts as saved.
  void already_saved(bool final, double now);
  bool saving() const { return m_saving.has_value(); }
  bool saving_final() const { return m_saving && m_saving->final; }
  std::uint64_t step() const { return m_saving ? m_saving->step : 0; }

  // `rank` wrote its part of `step` (ignored when not awaited: a late or
  // repeated SAVED, or one of an abandoned save).
  void on_saved(int rank, std::uint64_t step);
  // `rank` will write no part (it is dead, or said goodbye before saving).
  void forget(int rank);
  // A rank whose part is needed is gone (a shard): the save cannot complete.
  void abandon();

  // Every awaited part is written.
  bool complete() const { return m_saving && m_saving->waiting.empty(); }
  // The parts to commit (shard 0's first); the save ends here. Requires complete().
  std::vector<std::string> finish_save();

  // The final checkpoint is on disk (or none will be: divergence, a dead shard).
  bool final_saved() const { return m_final_saved; }
  void set_final_saved() { m_final_saved = true; }

 private:
  struct Saving {
    std::uint64_t step = 0;
    bool final = false;
    std::set<int> waiting;           // ranks whose part is not written yet
    std::vector<std::string> parts;  // written parts, in the order they came
  };
  std::string part_of(int rank) const;

  config::RunConfig m_run;
  layout::Roles m_roles;
  double m_last_s;
  std::uint64_t m_resumed_step = 0;
  std::optional<Saving> m_saving;
  bool m_final_saved = false;
};

}  // namespace syncopt::ps
