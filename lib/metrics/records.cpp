// Run directory, record writers and the progress line (see records.hpp).
#include "metrics/records.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <system_error>

#include <spdlog/spdlog.h>

#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace syncopt::metrics {

namespace fs = std::filesystem;

fs::path create_run_dir(const std::string& dir, const std::string& name, bool overwrite) {
  const fs::path run = fs::path(dir) / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw OutputError(ExitCode::kCantCreate, "cannot create run.dir '" + dir + "': " +
                                                 ec.message() + "; choose another run.dir");
  }
  if (fs::create_directory(run, ec)) return run;
  if (ec) {
    throw OutputError(ExitCode::kCantCreate,
                      "cannot create run directory '" + run.string() + "': " + ec.message());
  }
  if (!overwrite) {
    throw OutputError(ExitCode::kCantCreate,
                      "run directory '" + run.string() +
                          "' already exists and would be overwritten; pick a new name "
                          "(--set run.name=...) or replace it (--set run.overwrite=true)");
  }
  // Asked to replace it: remove the old contents, keep the directory.
  for (const auto& entry : fs::directory_iterator(run)) fs::remove_all(entry.path(), ec);
  if (ec) {
    throw OutputError(ExitCode::kCantCreate,
                      "cannot clear run directory '" + run.string() + "': " + ec.message());
  }
  return run;
}

namespace {

constexpr std::size_t kFlushBytes = 1 << 16;

[[noreturn]] void io_error(const std::string& what, const fs::path& path, int err) {
  throw OutputError(ExitCode::kIoError, "cannot " + what + " '" + path.string() +
                                            "': " + std::strerror(err) +
                                            " (free some space or choose another run.dir)");
}

}  // namespace

JsonlWriter::JsonlWriter(const fs::path& path, int fd, std::uint64_t written)
    : m_path(path), m_fd(fd), m_written(written) {}

JsonlWriter::JsonlWriter(const fs::path& path) : m_path(path) {
  m_fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (m_fd < 0) {
    const int err = errno;
    throw OutputError(ExitCode::kCantCreate,
                      "cannot create '" + path.string() + "': " + std::strerror(err));
  }
}

JsonlWriter JsonlWriter::resume_at(const fs::path& path, std::uint64_t offset) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  if (ec) {
    throw MissingInputError("cannot resume '" + path.string() + "': " + ec.message() +
                            " (the run directory is incomplete)");
  }
  if (size < offset) {
    throw DataError("'" + path.string() + "' has " + std::to_string(size) +
                    " bytes, fewer than the " + std::to_string(offset) +
                    " its checkpoint recorded: the records were cut short after the checkpoint");
  }
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) io_error("open", path, errno);
  if (::ftruncate(fd, static_cast<off_t>(offset)) != 0 ||
      ::lseek(fd, static_cast<off_t>(offset), SEEK_SET) < 0) {
    const int err = errno;
    ::close(fd);
    io_error("cut back", path, err);
  }
  return JsonlWriter(path, fd, offset);
}

JsonlWriter::JsonlWriter(JsonlWriter&& other) noexcept
    : m_path(std::move(other.m_path)), m_fd(std::exchange(other.m_fd, -1)),
      m_written(other.m_written), m_buffer(std::move(other.m_buffer)) {}

JsonlWriter::~JsonlWriter() {
  if (m_fd < 0) return;
  try {
    flush();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());  // a destructor must not throw; the error is still seen
  }
  ::close(m_fd);
}

void JsonlWriter::write(const nlohmann::json& record) {
  m_buffer += record.dump();
  m_buffer += '\n';
  if (m_buffer.size() >= kFlushBytes) flush();
}

void JsonlWriter::write_raw(const std::string& lines) {
  m_buffer += lines;
  if (m_buffer.size() >= kFlushBytes) flush();
}

void JsonlWriter::flush() {
  std::size_t done = 0;
  while (done < m_buffer.size()) {
    const ssize_t n = ::write(m_fd, m_buffer.data() + done, m_buffer.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      m_buffer.erase(0, done);
      m_written += done;
      io_error("write to", m_path, err);
    }
    done += static_cast<std::size_t>(n);
  }
  m_written += done;
  m_buffer.clear();
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  syncopt::write_file_atomic(path, text);
}

void write_floats(const fs::path& path, const std::vector<float>& values) {
  syncopt::write_file_atomic(
      path, std::string_view(reinterpret_cast<const char*>(values.data()),
                             values.size() * sizeof(float)));
}

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const auto hi = std::min(lo + 1, values.size() - 1);
  const double frac = pos - static_cast<double>(lo);
  return values[lo] * (1.0 - frac) + values[hi] * frac;
}

Progress::Progress(std::int64_t total_steps, std::int64_t every_steps, bool quiet)
    : m_total(total_steps), m_every(std::max<std::int64_t>(1, every_steps)),
      m_tty(isatty(STDERR_FILENO) == 1), m_quiet(quiet) {}

void Progress::update(std::int64_t step, double epoch, double loss, double examples_per_s,
                      double elapsed_s) {
  if (m_quiet) return;
  const double frac = m_total > 0 ? static_cast<double>(step) / static_cast<double>(m_total) : 0.0;
  const double eta = frac > 0.0 ? elapsed_s * (1.0 - frac) / frac : 0.0;
  char line[256];
  std::snprintf(line, sizeof(line),
                "step %lld/%lld (%.1f%%)  epoch %.2f  loss %.4f  %.0f ex/s  elapsed %.0fs  eta %.0fs",
                static_cast<long long>(step), static_cast<long long>(m_total), 100.0 * frac, epoch,
                loss, examples_per_s, elapsed_s, eta);
  if (m_tty) {
    // Redraw at most ~10 times a second; the last step always.
    if (step != m_total && elapsed_s - m_last_draw_s < 0.1) return;
    m_last_draw_s = elapsed_s;
    std::fprintf(stderr, "\r\033[K%s", line);
    std::fflush(stderr);
    m_line_open = true;
  } else if (step % m_every == 0 || step == m_total) {
    spdlog::info("{}", line);
  }
}

void Progress::note(const std::string& line) {
  if (m_line_open) {
    std::fprintf(stderr, "\r\033[K");
    m_line_open = false;
  }
  spdlog::info("{}", line);
}

void Progress::finish() {
  if (m_line_open) {
    std::fprintf(stderr, "\n");
    m_line_open = false;
  }
}

}  // namespace syncopt::metrics
