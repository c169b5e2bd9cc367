// The outcome of a launch, always somewhere (docs/design.md §10):
//
// - in summary.json and run.json, written by rank 0 normally, and by another
//   rank when rank 0 is silent (stopped or dead): the first rank to claim
//   the ending of this launch writes them in rank 0's place, as long as the
//   run directory is still this job's (its lock free, or held by this
//   job's own stopped rank 0);
// - in $SYNCOPT_OUTCOME_FILE, when set: one JSON object written by the rank
//   that ends the job, outside the run directory, so that wrapper scripts
//   (scripts/run.sh, scripts/slurm/*.sbatch) learn the exit code even when
//   nothing could be written in the run directory (it is locked by another
//   job, or its disk is full) and mpirun --enable-recovery exits 0.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/peers.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "rundir/open.hpp"

namespace syncopt::rundir {

// {"rank", "role", "host", "pid"} of a rank, for Outcome::reported_by.
nlohmann::json rank_json(const std::vector<comm::Peer>& peers, const layout::Roles& roles,
                         int rank);

// Writes $SYNCOPT_OUTCOME_FILE (if set) once per process: exit_code, status,
// reason, reported_by, launch_id, run_dir. Never throws (logs).
void write_outcome_file(const Outcome& outcome, const std::string& launch_id,
                        const std::filesystem::path& run_dir) noexcept;
// Whether this process has written it already.
bool outcome_file_written();

// What a rank other than rank 0 knows of the job, to end it in rank 0's place.
struct EndingJob {
  std::filesystem::path run_dir;
  std::string launch_id;
  int self = 0;
  const std::vector<comm::Peer>* peers = nullptr;
  const layout::Roles* roles = nullptr;
};

// summary.json of a launch that ended before its own summary could be
// written: the analysis of the records on disk (what was written before the
// end) with `outcome` and `extra`; just the outcome when the records cannot
// be read. Never throws (logs).
void write_summary_from_records(const std::filesystem::path& run_dir, const Outcome& outcome,
                                const nlohmann::json& extra) noexcept;

// The claim of the ending of a launch, `.ending-<launch>` in the run
// directory (created with O_EXCL: on NFS v3 and later an exclusive create
// is atomic at the server), holding the claimant's rank_json. Whoever
// records a launch's outcome takes it first, rank 0 included, so that one
// rank records it even when the network is cut between them (docs/design.md
// §10). The claim is released (removed) when the holder goes; a later
// claimant then finds the launch's summary.json and backs off.
class EndingClaim {
 public:
  // Held when this rank may record the outcome; otherwise holder() says who
  // has (the claim's content, or the summary's reported_by).
  static EndingClaim take(const std::filesystem::path& run_dir, const std::string& launch_id,
                          const nlohmann::json& who);
  EndingClaim(EndingClaim&& o) noexcept;
  EndingClaim& operator=(EndingClaim&&) = delete;
  EndingClaim(const EndingClaim&) = delete;
  ~EndingClaim();
  bool held() const { return !m_path.empty(); }
  const nlohmann::json& holder() const { return m_holder; }

 private:
  EndingClaim() = default;
  std::filesystem::path m_path;  // set while held
  nlohmann::json m_holder;
};

// Rank 0 is silent: records `outcome` (summary.json from the records on
// disk, run.json's entry of this launch, the outcome file) if this rank is
// the first to claim the ending of the launch and the run directory is
// still this job's. Returns whether it did; never throws (logs).
bool end_in_place_of_rank0(const EndingJob& job, const Outcome& outcome) noexcept;

}  // namespace syncopt::rundir
