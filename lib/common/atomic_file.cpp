// Atomic whole-file writes (temporary, fsync, rename, fsync the directory)
// and whole-file reads, see atomic_file.hpp. POSIX calls rather than
// std::ofstream: a stream reports "failed" at best, and never an fsync error.
#include "common/atomic_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/error.hpp"

namespace syncopt {

namespace fs = std::filesystem;

namespace {

// What the user can do about a failed write, by errno.
std::string advice(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return "free space on that file system (or point run.dir elsewhere) and run again";
    case ENOENT:
    case ENOTDIR:
      return "the directory is missing; check run.dir and that nothing removed it during the run";
    case EACCES:
    case EPERM:
    case EROFS:
      return "make the directory writable (or point run.dir elsewhere) and run again";
    default:
      return "check that the directory exists, is writable and has free space, then run again";
  }
}

[[noreturn]] void throw_write_error(const fs::path& path, const std::string& step, int err) {
  throw OutputError(ExitCode::kIoError, "cannot write '" + path.string() + "': " +
                                            std::strerror(err) + " (" + step + "); " + advice(err));
}

// Closes a descriptor once; close errors are reported by the caller that
// asks for them (after fsync, a close error still means lost data on NFS).
class Fd {
 public:
  explicit Fd(int fd) : m_fd(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (m_fd >= 0) ::close(m_fd);
  }
  int get() const { return m_fd; }
  // 0 on success, else the errno of close().
  int close() {
    const int fd = m_fd;
    m_fd = -1;
    return ::close(fd) == 0 ? 0 : errno;
  }

 private:
  int m_fd;
};

int open_retry(const char* path, int flags, mode_t mode = 0) {
  int fd;
  do {
    fd = ::open(path, flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

// Writes all of `bytes`, across short writes and signals. 0 or an errno.
int write_all(int fd, std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return 0;
}

int fsync_retry(int fd) {
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  return rc == 0 ? 0 : errno;
}

}  // namespace

bool is_atomic_temporary(const fs::path& path) {
  return path.filename().string().find(".tmp.") != std::string::npos;
}

void fsync_dir(const fs::path& dir) {
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  Fd fd(open_retry(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) throw_write_error(d, "opening the directory to fsync it", errno);
  // Some file systems cannot fsync a directory (EINVAL): they give no
  // stronger guarantee to ask for, so that is not an error.
  const int err = fsync_retry(fd.get());
  if (err != 0 && err != EINVAL) throw_write_error(d, "fsync of the directory", err);
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  const fs::path tmp = path.string() + ".tmp." + std::to_string(::getpid());
  const auto fail = [&](const std::string& step, int err) {
    ::unlink(tmp.c_str());  // best effort; the error to report is `err`
    throw_write_error(path, step + " '" + tmp.filename().string() + "'", err);
  };
  Fd fd(open_retry(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    // Nothing was created, so there is nothing to remove.
    throw_write_error(path, "creating the temporary '" + tmp.filename().string() + "'", errno);
  }
  if (const int err = write_all(fd.get(), bytes); err != 0) fail("writing", err);
  // The data must be on disk before the rename makes it visible under
  // `path`; else a power loss can leave a renamed but empty file.
  if (const int err = fsync_retry(fd.get()); err != 0) fail("fsync of", err);
  if (const int err = fd.close(); err != 0) fail("closing", err);
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming into place", errno);
  // The rename itself is durable only once the directory is.
  fsync_dir(path.parent_path());
}

std::string read_file_bytes(const fs::path& path) {
  Fd fd(open_retry(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    throw MissingInputError("cannot read '" + path.string() + "': " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || S_ISDIR(st.st_mode)) {
    const int err = S_ISDIR(st.st_mode) ? EISDIR : errno;
    throw MissingInputError("cannot read '" + path.string() + "': " + std::strerror(err));
  }
  std::string out;
  out.reserve(static_cast<std::size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw DataError("reading '" + path.string() + "' failed after " + std::to_string(out.size()) +
                      " bytes: " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

}  // namespace syncopt
