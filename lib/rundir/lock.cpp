// The run directory's lock (see lock.hpp).
#include "rundir/lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "metrics/records.hpp"
#include "rundir/meta.hpp"

namespace syncopt::rundir {

namespace fs = std::filesystem;

namespace {

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf.data();
}

std::string text_of(const LockHolder& h) {
  return metrics::json_text(nlohmann::json({{"host", h.host},
                                            {"pid", h.pid},
                                            {"job", h.job},
                                            {"launch_id", h.launch_id},
                                            {"since", h.since}})) +
         "\n";
}

}  // namespace

std::string LockHolder::describe() const {
  std::string out =
      "host " + (host.empty() ? std::string("?") : host) + ", pid " + std::to_string(pid);
  if (!job.empty()) out += " (SLURM job " + job + ")";
  if (!since.empty()) out += ", since " + since;
  return out;
}

LockHolder this_process(const std::string& launch_id) {
  LockHolder h;
  h.host = host_name();
  h.pid = static_cast<int>(::getpid());
  if (const char* job = std::getenv("SLURM_JOB_ID")) h.job = job;
  h.launch_id = launch_id;
  h.since = utc_now();
  return h;
}

RunLock::~RunLock() {
  if (m_fd >= 0) ::close(m_fd);  // the kernel drops the lock with the last descriptor
}

RunLock::RunLock(RunLock&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}

RunLock& RunLock::operator=(RunLock&& other) noexcept {
  if (this != &other) {
    if (m_fd >= 0) ::close(m_fd);
    m_fd = std::exchange(other.m_fd, -1);
  }
  return *this;
}

std::optional<RunLock> RunLock::try_acquire(const fs::path& run_dir, const LockHolder& me,
                                            LockHolder* holder) {
  const fs::path path = run_dir / kRunLockFile;
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw OutputError(ExitCode::kCantCreate, "cannot open the run directory's lock '" +
                                                 path.string() + "': " + std::strerror(errno) +
                                                 " (check that the directory is writable)");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err != EWOULDBLOCK) {
      throw OutputError(ExitCode::kCantCreate, "cannot lock '" + path.string() +
                                                   "': " + std::strerror(err) +
                                                   " (a file system without locks?)");
    }
    if (holder != nullptr) *holder = read_holder(run_dir).value_or(LockHolder{});
    return std::nullopt;
  }
  // Ours: say who holds it, in place (the descriptor stays open).
  const std::string text = text_of(me);
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    ::close(fd);
    throw OutputError(ExitCode::kIoError,
                      "cannot write '" + path.string() + "': " + std::strerror(err));
  }
  return RunLock(fd);
}

RunLock RunLock::acquire(const fs::path& run_dir, const LockHolder& me, const std::string& doing) {
  LockHolder holder;
  if (auto lock = try_acquire(run_dir, me, &holder)) return std::move(*lock);
  throw OutputError(
      ExitCode::kCantCreate,
      "cannot " + doing + " '" + run_dir.string() + "': the run directory is in use by " +
          holder.describe() + (holder.launch_id.empty() ? "" : ", launch " + holder.launch_id) +
          "; nothing was changed. Wait for that job to end (or end it), or use another "
          "run.name");
}

std::optional<LockHolder> RunLock::read_holder(const fs::path& run_dir) {
  try {
    const auto j = nlohmann::json::parse(read_file_bytes(run_dir / kRunLockFile));
    LockHolder h;
    h.host = j.value("host", std::string());
    h.pid = j.value("pid", 0);
    h.job = j.value("job", std::string());
    h.launch_id = j.value("launch_id", std::string());
    h.since = j.value("since", std::string());
    return h;
  } catch (const std::exception&) {
    return std::nullopt;  // no file, or one being written: unknown
  }
}

bool RunLock::held_by_other(const fs::path& run_dir) {
  const fs::path path = run_dir / kRunLockFile;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool held = ::flock(fd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  return held;
}

}  // namespace syncopt::rundir
