// A partition of the network, told apart from a death through the shared
// file system (docs/design.md §10, "A partition"): the run directory that
// every host sees.
//
// - Rank 0 keeps a mark in the run directory, `.alive-<launch>`, rewritten
//   every kAliveEveryS by a thread of its own while the roles run. A rank
//   that finds rank 0 silent on the network reads it twice: if it changed,
//   rank 0 is running and this rank's host is the one cut off from it.
// - Such a rank leaves a report, `.cut-<launch>-r<rank>.json` (its rank,
//   host and the silent ranks with theirs), and ends without recording the
//   outcome: rank 0 records it, and from the reports it says which host was
//   cut off instead of blaming the workers for its own lost link.
//
// On NFS, the mark is rewritten in place and read with a fresh open(), so
// close-to-open consistency makes every rewrite visible to a reader on
// another node (attribute caching would hide a changed mtime).
#pragma once

#include <atomic>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

namespace syncopt::rundir {

inline constexpr double kAliveEveryS = 0.25;

// Rank 0's mark: written from construction to destruction (which removes
// it). Never throws after construction (a failed write is logged once).
class AliveMark {
 public:
  AliveMark(const std::filesystem::path& run_dir, const std::string& launch_id);
  ~AliveMark();
  AliveMark(const AliveMark&) = delete;
  AliveMark& operator=(const AliveMark&) = delete;

 private:
  std::filesystem::path m_path;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
};

// Whether rank 0's mark changes within `watch_s` (it runs, whatever the
// network says). False when there is no mark (rank 0 gone, or done).
bool rank0_running(const std::filesystem::path& run_dir, const std::string& launch_id,
                   double watch_s);

// A rank cut off from rank 0 reports it: `report` holds its rank, host and
// the ranks it lost ({"rank", "host", "silent": [{"rank", "host"}...]}).
// Never throws (logs).
void report_cut_off(const std::filesystem::path& run_dir, const std::string& launch_id,
                    const nlohmann::json& report) noexcept;

// The reports of `launch_id` (each one's object), waiting up to `wait_s`
// for one from a rank of every host in `hosts` (the hosts of the ranks
// rank 0 lost). Never throws.
std::vector<nlohmann::json> cut_off_reports(const std::filesystem::path& run_dir,
                                            const std::string& launch_id,
                                            const std::vector<std::string>& hosts, double wait_s);

// Removes the reports and the mark of `launch_id` (rank 0, once recorded).
void remove_partition_files(const std::filesystem::path& run_dir,
                            const std::string& launch_id) noexcept;

// What rank 0 records of a partition, from the hosts of the ranks it lost
// and the reports: {"cut_off": [hosts], "from": [hosts], "reported_by":
// [ranks], "detail": text}, or null when no rank reported (a death, not a
// partition). `own_host` is rank 0's, `all_hosts` every host of the job.
nlohmann::json describe_partition(const std::string& own_host,
                                  const std::vector<std::string>& lost_hosts,
                                  const std::vector<std::string>& all_hosts,
                                  const std::vector<nlohmann::json>& reports);

}  // namespace syncopt::rundir
