// Recording a launch's outcome (see ending.hpp).
#include "rundir/ending.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/atomic_file.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "metrics/step_record.hpp"
#include "rundir/lock.hpp"
#include "rundir/meta.hpp"

namespace syncopt::rundir {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::atomic<bool> g_outcome_written{false};

// The claim of the ending of a launch: created once, by one rank.
fs::path claim_path(const fs::path& run_dir, const std::string& launch_id) {
  return run_dir / (".ending-" + launch_id);
}

}  // namespace

json rank_json(const std::vector<comm::Peer>& peers, const layout::Roles& roles, int rank) {
  json j = {{"rank", rank}, {"role", roles.role_name(rank)}};
  if (rank >= 0 && static_cast<std::size_t>(rank) < peers.size()) {
    j["host"] = peers[static_cast<std::size_t>(rank)].host;
    j["pid"] = peers[static_cast<std::size_t>(rank)].pid;
  }
  return j;
}

void write_outcome_file(const Outcome& outcome, const std::string& launch_id,
                        const fs::path& run_dir) noexcept {
  const char* path = std::getenv("SYNCOPT_OUTCOME_FILE");
  if (path == nullptr || *path == '\0' || g_outcome_written.exchange(true)) return;
  try {
    json j = outcome.to_json();
    j["launch_id"] = launch_id;
    j["run_dir"] = run_dir.string();
    write_file_atomic(path, metrics::json_text(j) + "\n");
  } catch (const std::exception& e) {
    spdlog::error("could not write the outcome to {} (SYNCOPT_OUTCOME_FILE): {}", path, e.what());
  }
}

bool outcome_file_written() { return g_outcome_written.load(); }

void write_summary_from_records(const fs::path& run_dir, const Outcome& outcome,
                                const json& extra) noexcept {
  json all = outcome.to_json();
  all["lost_workers"] = json::array();
  all["final_eval"] = "none: the run did not complete";
  for (const auto& [k, v] : extra.items()) all[k] = v;
  try {
    const auto steps = metrics::read_steps(run_dir / "steps.jsonl", true);
    const auto evals = fs::exists(run_dir / "eval.jsonl")
                           ? metrics::read_jsonl(run_dir / "eval.jsonl", true)
                           : std::vector<json>{};
    metrics::RunInfo info = partial_run_info(run_dir, steps, evals);
    info.evaluated = false;
    metrics::write_summary(run_dir, info, all);
  } catch (const std::exception& e) {
    spdlog::warn(
        "the records of {} could not be summarised ({}): summary.json says the outcome only",
        run_dir.string(), e.what());
    write_failure_summary(run_dir, outcome, all);
  }
}

EndingClaim EndingClaim::take(const fs::path& run_dir, const std::string& launch_id,
                              const json& who) {
  EndingClaim c;
  const fs::path claim = claim_path(run_dir, launch_id);
  const int fd = ::open(claim.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    if (errno != EEXIST) {
      spdlog::error("cannot claim the end of the run in {}: {}", run_dir.string(),
                    std::strerror(errno));
      c.m_holder = {{"error", std::strerror(errno)}};
      return c;
    }
    try {
      c.m_holder = json::parse(read_file_bytes(claim));
    } catch (const std::exception&) {
      c.m_holder = {{"rank", "unknown (its claim is being written)"}};
    }
    return c;
  }
  const std::string text = metrics::json_text(who) + "\n";
  const bool wrote = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!wrote) spdlog::warn("the claim {} is incomplete: {}", claim.string(), std::strerror(errno));
  // Another rank that held the claim before has recorded the outcome.
  try {
    const json s = json::parse(read_file_bytes(run_dir / "summary.json"));
    if (s.value("launch_id", "") == launch_id) {
      std::error_code ec;
      fs::remove(claim, ec);
      c.m_holder = s.contains("ended_by") ? s["ended_by"] : s.value("reported_by", json());
      return c;
    }
  } catch (const std::exception&) {
    // no summary of this launch: the claim is this rank's
  }
  c.m_path = claim;
  c.m_holder = who;
  return c;
}

EndingClaim::EndingClaim(EndingClaim&& o) noexcept
    : m_path(std::move(o.m_path)), m_holder(std::move(o.m_holder)) {
  o.m_path.clear();
}

EndingClaim::~EndingClaim() {
  if (m_path.empty()) return;
  std::error_code ec;
  fs::remove(m_path, ec);
}

bool end_in_place_of_rank0(const EndingJob& job, const Outcome& outcome) noexcept {
  try {
    const auto claim =
        EndingClaim::take(job.run_dir, job.launch_id, rank_json(*job.peers, *job.roles, job.self));
    if (!claim.held()) return false;  // another rank ends the job (or nothing can be written)
    // Still this job's directory: its lock free (rank 0 is gone), or held
    // by this launch's rank 0 (stopped). Another job's: hands off.
    LockHolder holder;
    auto lock = RunLock::try_acquire(job.run_dir, this_process(job.launch_id), &holder);
    if (!lock && holder.launch_id != job.launch_id) {
      spdlog::error(
          "the run directory {} is now in use by {}: this launch's outcome is not written "
          "there",
          job.run_dir.string(), holder.describe());
      write_outcome_file(outcome, job.launch_id, job.run_dir);
      return true;
    }
    write_outcome_file(outcome, job.launch_id, job.run_dir);
    RunJournal::record_end(job.run_dir, job.launch_id, outcome);
    // What the records on disk say: rank 0 wrote them until it fell silent.
    write_summary_from_records(
        job.run_dir, outcome,
        {{"launch_id", job.launch_id}, {"ended_by", rank_json(*job.peers, *job.roles, job.self)}});
    return true;
  } catch (const std::exception& e) {
    spdlog::error("could not record the end of the run in {}: {}", job.run_dir.string(), e.what());
    return false;
  }
}

}  // namespace syncopt::rundir
