// Shard 0's checkpoint bookkeeping (see checkpoint_plan.hpp).
#include "ps/checkpoint_plan.hpp"

#include "checkpoint/parts.hpp"
#include "common/error.hpp"

namespace syncopt::ps {

CheckpointPlan::CheckpointPlan(const config::RunConfig& run, const layout::Roles& roles, double now)
    : m_run(run), m_roles(roles), m_last_s(now) {}

bool CheckpointPlan::due(std::uint64_t version, double now) const {
  if (m_saving || version == m_resumed_step) return false;
  const bool by_steps = m_run.checkpoint_every_steps > 0 &&
                        version % static_cast<std::uint64_t>(m_run.checkpoint_every_steps) == 0;
  const bool by_time = m_run.checkpoint_every_s > 0.0 && now - m_last_s >= m_run.checkpoint_every_s;
  return by_steps || by_time;
}

void CheckpointPlan::begin(std::uint64_t step, bool final, double now,
                           const std::vector<int>& ranks) {
  if (m_saving) {
    throw InternalError("checkpoint " + std::to_string(step) + " begun while " +
                        std::to_string(m_saving->step) + " is being saved");
  }
  m_last_s = now;
  Saving s;
  s.step = step;
  s.final = final;
  s.parts.push_back(checkpoint::shard_part(0));
  s.waiting.insert(ranks.begin(), ranks.end());
  s.waiting.erase(0);
  m_saving = std::move(s);
}

void CheckpointPlan::already_saved(bool final, double now) {
  m_last_s = now;
  if (final) m_final_saved = true;
}

void CheckpointPlan::on_saved(int rank, std::uint64_t step) {
  if (!m_saving || m_saving->step != step || m_saving->waiting.erase(rank) == 0) return;
  m_saving->parts.push_back(part_of(rank));
}

void CheckpointPlan::forget(int rank) {
  if (m_saving) m_saving->waiting.erase(rank);
}

void CheckpointPlan::abandon() { m_saving.reset(); }

std::vector<std::string> CheckpointPlan::finish_save() {
  if (!complete()) throw InternalError("checkpoint committed before every part was written");
  auto parts = std::move(m_saving->parts);
  if (m_saving->final) m_final_saved = true;
  m_saving.reset();
  return parts;
}

std::string CheckpointPlan::part_of(int rank) const {
  switch (m_roles.role_of(rank)) {
    case layout::Role::kShard:
      return checkpoint::shard_part(rank);
    case layout::Role::kEvaluator:
      return checkpoint::kEvaluatorPart;
    case layout::Role::kWorker:
      return checkpoint::worker_part(m_roles.worker_of(rank));
  }
  return {};
}

}  // namespace syncopt::ps
