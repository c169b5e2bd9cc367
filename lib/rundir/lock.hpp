// One job at a time in a run directory (docs/design.md §10): rank 0 (the only
// process of a local run) holds an advisory lock, flock(2) on
// <run>/run.lock, for the run's life; the file says who holds it (host,
// pid, SLURM job, launch). A second start or resume of the same run finds
// the lock taken and exits 73 naming the holder, before it writes anything.
// The kernel drops the lock when the holder's process ends however it ends
// (kill -9 included), so a stale lock of a dead process is simply taken.
//
// NFS: Linux emulates flock() there with POSIX byte-range locks (fcntl),
// which the server arbitrates between clients (NLM for NFSv3, the protocol
// itself for v4): the lock holds across nodes as long as the file system is
// mounted with locking (not `nolock`, which makes locks local to each
// client). A lock held by a process on a client that crashed is released
// when the server's lease runs out (NFSv4: about 90 s), not at once. POSIX
// locks are per process and closing *any* descriptor of the file drops
// them, so the holder never opens run.lock a second time.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace syncopt::rundir {

// Who holds (or wants) a run directory.
struct LockHolder {
  std::string host;
  int pid = 0;
  std::string job;  // SLURM job id, or empty
  std::string launch_id;
  std::string since;  // UTC
  // "host vm, pid 1234 (SLURM job 77), since 2026-12-01T17:11:24Z".
  std::string describe() const;
};

// This process, for `launch_id`.
LockHolder this_process(const std::string& launch_id);

class RunLock {
 public:
  RunLock() = default;  // holds nothing
  ~RunLock();
  RunLock(RunLock&& other) noexcept;
  RunLock& operator=(RunLock&& other) noexcept;
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Takes the lock of `run_dir` for `me`, or returns nullopt (and, in
  // `holder`, what run.lock says) when another process holds it. OutputError
  // (73) when run.lock cannot be opened.
  static std::optional<RunLock> try_acquire(const std::filesystem::path& run_dir,
                                            const LockHolder& me, LockHolder* holder = nullptr);
  // The same, or OutputError (73) naming the holder; `doing` says what was
  // refused ("resume", "start").
  static RunLock acquire(const std::filesystem::path& run_dir, const LockHolder& me,
                         const std::string& doing);
  // What run.lock says, if it says anything (a holder, or the last one).
  static std::optional<LockHolder> read_holder(const std::filesystem::path& run_dir);
  // Whether some process holds the lock of `run_dir` now (tries and lets go).
  static bool held_by_other(const std::filesystem::path& run_dir);

  bool held() const { return m_fd >= 0; }

 private:
  explicit RunLock(int fd) : m_fd(fd) {}
  int m_fd = -1;
};

inline constexpr const char* kRunLockFile = "run.lock";

}  // namespace syncopt::rundir
