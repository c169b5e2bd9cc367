// Run directory, record writers and the progress line (see records.hpp).
#include "metrics/records.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <utility>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/log.hpp"

namespace syncopt::metrics {

namespace fs = std::filesystem;

fs::path create_run_dir(const std::string& dir, const std::string& name, bool overwrite) {
  const fs::path run = fs::path(dir) / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw OutputError(ExitCode::kCantCreate, "cannot create run.dir '" + dir +
                                                 "': " + ec.message() + "; choose another run.dir");
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
                    " its checkpoint recorded: the file was cut short before the checkpoint's "
                    "end of records (" +
                    std::to_string(offset - size) +
                    " bytes of records up to the checkpoint are missing); put the file back, or "
                    "resume from an older checkpoint whose records it still holds (write its "
                    "step into checkpoints/latest)");
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
    : m_path(std::move(other.m_path)),
      m_fd(std::exchange(other.m_fd, -1)),
      m_written(other.m_written),
      m_buffer(std::move(other.m_buffer)) {}

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
  m_buffer += json_text(record);
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
  syncopt::write_file_atomic(path, std::string_view(reinterpret_cast<const char*>(values.data()),
                                                    values.size() * sizeof(float)));
}

std::string json_text(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
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

namespace {

bool is_terminal_path(const std::string& path) {
  return path.starts_with("/dev/pts/") || path.starts_with("/dev/tty") || path == "/dev/console";
}

// Open MPI's launchers: mpirun (also installed as mpiexec, orterun,
// mpirun.openmpi) and its node daemon orted; prterun/prted in Open MPI 5.
bool is_mpi_launcher(const std::string& comm) {
  for (const char* name : {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted"}) {
    if (comm.starts_with(name)) return true;
  }
  return false;
}

int terminal_columns(int fd) {
  winsize ws{};
  return ioctl(fd, TIOCGWINSZ, &ws) == 0 ? ws.ws_col : 0;
}

std::string read_link(const std::string& path) {
  char buf[512];
  const ssize_t n = readlink(path.c_str(), buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
}

// "1h02m", "3m05s", "42s".
std::string duration(double s) {
  const auto t = static_cast<long long>(std::max(0.0, s) + 0.5);
  char buf[32];
  if (t >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lldh%02lldm", t / 3600, t / 60 % 60);
  } else if (t >= 60) {
    std::snprintf(buf, sizeof(buf), "%lldm%02llds", t / 60, t % 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%llds", t);
  }
  return buf;
}

}  // namespace

TerminalFacts terminal_facts() {
  TerminalFacts f;
  f.stderr_tty = isatty(STDERR_FILENO) == 1;
  if (f.stderr_tty) f.columns = terminal_columns(STDERR_FILENO);
  const std::string parent = "/proc/" + std::to_string(getppid());
  if (std::ifstream comm(parent + "/comm"); comm) std::getline(comm, f.parent_comm);
  f.parent_stderr = read_link(parent + "/fd/2");
  if (!f.stderr_tty && is_mpi_launcher(f.parent_comm) && is_terminal_path(f.parent_stderr)) {
    // The width of the terminal mpirun writes to, through its stderr.
    const int fd = open((parent + "/fd/2").c_str(), O_WRONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      f.columns = terminal_columns(fd);
      close(fd);
    }
  }
  return f;
}

bool progress_is_live(ProgressOutput output, const TerminalFacts& facts) {
  switch (output) {
    case ProgressOutput::kLive:
      return true;
    case ProgressOutput::kLines:
      return false;
    case ProgressOutput::kAuto:
      break;
  }
  if (facts.stderr_tty) return true;
  return is_mpi_launcher(facts.parent_comm) && is_terminal_path(facts.parent_stderr);
}

Progress::Progress(std::int64_t total_steps, std::int64_t every_steps, bool quiet,
                   ProgressOutput output)
    : Progress(total_steps, every_steps, quiet, output,
               !quiet && output != ProgressOutput::kLines ? terminal_facts() : TerminalFacts{}) {}

Progress::Progress(std::int64_t total_steps, std::int64_t every_steps, bool quiet,
                   ProgressOutput output, const TerminalFacts& facts)
    : m_total(total_steps),
      m_every(std::max<std::int64_t>(1, every_steps)),
      m_live(progress_is_live(output, facts)),
      m_quiet(quiet),
      m_columns(facts.columns) {}

void Progress::update(std::int64_t step, double epoch, double loss, double examples_per_s,
                      double elapsed_s) {
  if (m_quiet) return;
  const double frac = m_total > 0 ? static_cast<double>(step) / static_cast<double>(m_total) : 0.0;
  const double eta = frac > 0.0 ? elapsed_s * (1.0 - frac) / frac : 0.0;
  char line[256];
  if (m_live) {
    // Redraw at most ~10 times a second; the last step always.
    if (step != m_total && m_last_draw_s >= 0.0 && elapsed_s - m_last_draw_s < 0.1) return;
    m_last_draw_s = elapsed_s;
    std::snprintf(line, sizeof(line),
                  "step %lld/%lld %3.0f%%  epoch %.2f  loss %.4f  %.0f ex/s  elapsed %s  eta %s",
                  static_cast<long long>(step), static_cast<long long>(m_total), 100.0 * frac,
                  epoch, loss, examples_per_s, duration(elapsed_s).c_str(), duration(eta).c_str());
    std::string text(line);
    // One row, or "\r" would go back to the start of its last row only.
    if (m_columns > 1 && text.size() >= static_cast<std::size_t>(m_columns)) {
      text.resize(static_cast<std::size_t>(m_columns - 1));
    }
    draw_status_line(text);
    // The last step's line stays: a final note (the evaluation, the
    // summary) would otherwise erase it.
    if (step == m_total) end_status_line();
  } else if (step % m_every == 0 || step == m_total) {
    std::snprintf(
        line, sizeof(line),
        "step %lld/%lld (%.1f%%)  epoch %.2f  loss %.4f  %.0f ex/s  elapsed %.0fs  eta %.0fs",
        static_cast<long long>(step), static_cast<long long>(m_total), 100.0 * frac, epoch, loss,
        examples_per_s, elapsed_s, eta);
    spdlog::info("{}", line);
  }
}

// Log messages erase the live line themselves (common/log.cpp); the next
// update draws it again below the note.
void Progress::note(const std::string& line) { spdlog::info("{}", line); }

// The line as last drawn stays on the screen (a run that ends before its
// planned last step, or stops).
void Progress::finish() {
  if (m_live) end_status_line();
}

}  // namespace syncopt::metrics
