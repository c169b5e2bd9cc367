// Run directory, record writers and the progress line (see records.hpp).
#include "metrics/records.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <system_error>

#include <spdlog/spdlog.h>

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

JsonlWriter::JsonlWriter(const fs::path& path) : m_path(path), m_out(path, std::ios::trunc) {
  if (!m_out) throw OutputError(ExitCode::kCantCreate, "cannot create '" + path.string() + "'");
}

void JsonlWriter::write(const nlohmann::json& record) {
  m_out << record.dump() << '\n';
  if (!m_out) throw OutputError(ExitCode::kIoError, "write to '" + m_path.string() + "' failed");
}

void JsonlWriter::write_raw(const std::string& lines) {
  m_out << lines;
  if (!m_out) throw OutputError(ExitCode::kIoError, "write to '" + m_path.string() + "' failed");
}

void JsonlWriter::flush() {
  m_out.flush();
  if (!m_out) throw OutputError(ExitCode::kIoError, "write to '" + m_path.string() + "' failed");
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw OutputError(ExitCode::kIoError, "cannot write '" + tmp.string() + "'");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    throw OutputError(ExitCode::kIoError,
                      "cannot rename '" + tmp.string() + "' to '" + path.string() + "': " +
                          ec.message());
  }
}

void write_floats(const fs::path& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) throw OutputError(ExitCode::kIoError, "cannot write '" + path.string() + "'");
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
