// The run directory and its record files (DESIGN.md §8): config.toml,
// steps.jsonl, eval.jsonl, summary.json. A run never overwrites an existing
// run directory unless asked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace syncopt::metrics {

// Creates <dir>/<name>/ atomically (create_directory fails if it exists).
// An existing one is an OutputError (exit 73) naming it and the two ways out
// (another run.name, or run.overwrite = true), unless overwrite, in which
// case its old contents are removed first.
std::filesystem::path create_run_dir(const std::string& dir, const std::string& name,
                                     bool overwrite);

// Append-only JSON Lines file; each record is one line, flushed on close.
class JsonlWriter {
 public:
  explicit JsonlWriter(const std::filesystem::path& path);
  void write(const nlohmann::json& record);
  // Lines already formatted as JSON Lines (each ending in '\n').
  void write_raw(const std::string& lines);
  void flush();

 private:
  std::filesystem::path m_path;
  std::ofstream m_out;
};

// Writes `text` to `path` through a temporary file and a rename, so a reader
// never sees half a file. OutputError (74) on failure.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

// Raw float32 values (little-endian host order), e.g. final parameters.
void write_floats(const std::filesystem::path& path, const std::vector<float>& values);

// p-th percentile (0..100) by linear interpolation; 0 for an empty vector.
double percentile(std::vector<double> values, double p);

// One line that refreshes in place on a TTY ("\r"), or one log line every
// `every_steps` steps into a file/pipe; finish() ends the line.
class Progress {
 public:
  Progress(std::int64_t total_steps, std::int64_t every_steps, bool quiet);
  void update(std::int64_t step, double epoch, double loss, double examples_per_s,
              double elapsed_s);
  void note(const std::string& line);  // a permanent line (e.g. an eval result)
  void finish();

 private:
  std::int64_t m_total, m_every;
  bool m_tty, m_quiet;
  bool m_line_open = false;
  double m_last_draw_s = -1.0;
};

}  // namespace syncopt::metrics
