// The run directory and its record files (docs/design.md §8): config.toml,
// steps.jsonl, eval.jsonl, summary.json. A run never overwrites an existing
// run directory unless asked.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/enums.hpp"

namespace syncopt::metrics {

// Creates <dir>/<name>/ atomically (create_directory fails if it exists).
// An existing one is an OutputError (exit 73) naming it and the two ways out
// (another run.name, or run.overwrite = true), unless overwrite, in which
// case its old contents are removed first.
std::filesystem::path create_run_dir(const std::string& dir, const std::string& name,
                                     bool overwrite);

// Append-only JSON Lines file; each record is one line. Records are
// buffered and written at flush() (and when the buffer grows large); write
// errors name the file and the OS reason (OutputError 74).
class JsonlWriter {
 public:
  // A new, empty file.
  explicit JsonlWriter(const std::filesystem::path& path);
  // Continues an existing file after its first `offset` bytes (a resumed
  // run: what was written after the checkpoint is cut off). MissingInputError
  // if the file is absent, DataError if it is shorter than `offset`.
  static JsonlWriter resume_at(const std::filesystem::path& path, std::uint64_t offset);
  ~JsonlWriter();
  JsonlWriter(JsonlWriter&& other) noexcept;
  JsonlWriter& operator=(JsonlWriter&&) = delete;
  JsonlWriter(const JsonlWriter&) = delete;

  void write(const nlohmann::json& record);
  // Lines already formatted as JSON Lines (each ending in '\n').
  void write_raw(const std::string& lines);
  void flush();
  // Bytes in the file once flushed (the offset a checkpoint records).
  std::uint64_t bytes() const { return m_written + m_buffer.size(); }
  const std::filesystem::path& path() const { return m_path; }

 private:
  JsonlWriter(const std::filesystem::path& path, int fd, std::uint64_t written);
  std::filesystem::path m_path;
  int m_fd = -1;
  std::uint64_t m_written = 0;
  std::string m_buffer;
};

// Writes `text` to `path` through a temporary file, fsync and a rename, so a
// reader never sees half a file and a failure leaves the old one
// (common/atomic_file.hpp). OutputError (74) naming the path and the reason.
void write_file_atomic(const std::filesystem::path& path, const std::string& text);

// JSON text of a record file: bytes that are not UTF-8 (a path or a
// --set value in another encoding) become U+FFFD instead of an exception
// that would lose the record. indent < 0: one line.
std::string json_text(const nlohmann::json& j, int indent = -1);

// Raw float32 values (little-endian host order), e.g. final parameters,
// written atomically like write_file_atomic.
void write_floats(const std::filesystem::path& path, const std::vector<float>& values);

// p-th percentile (0..100) by linear interpolation; 0 for an empty vector.
double percentile(std::vector<double> values, double p);

// Where rank 0's progress goes: one live line that refreshes in place
// (steps, epoch, loss, examples/s, ETA), or a log line every N steps.
// run.progress: "auto" (live when a person watches a terminal), "live",
// "lines".
using config::ProgressOutput;

// What decides "auto", read once from the process and /proc.
struct TerminalFacts {
  bool stderr_tty = false;    // our own stderr is a terminal
  std::string parent_comm;    // /proc/<ppid>/comm: "mpirun", "orted", "bash", ...
  std::string parent_stderr;  // where the parent's stderr points (/proc/<ppid>/fd/2)
  int columns = 0;            // the terminal's width, 0 if unknown
};
TerminalFacts terminal_facts();

// Live when asked, never when "lines"; on "auto", when our stderr is a
// terminal, or when the parent is Open MPI's launcher (mpirun on its own node,
// orted elsewhere), whose stderr, where it copies ours, is a terminal
// (/dev/pts/*, /dev/tty*, /dev/console). Under mpirun a rank's stderr is a
// pipe even when the user's terminal is mpirun's. A SLURM batch job has no
// terminal on either, so it gets lines; `srun --pty` and mpirun inside
// `salloc` at a terminal are live.
bool progress_is_live(ProgressOutput output, const TerminalFacts& facts);

class Progress {
 public:
  Progress(std::int64_t total_steps, std::int64_t every_steps, bool quiet,
           ProgressOutput output = ProgressOutput::kAuto);
  Progress(std::int64_t total_steps, std::int64_t every_steps, bool quiet, ProgressOutput output,
           const TerminalFacts& facts);
  void update(std::int64_t step, double epoch, double loss, double examples_per_s,
              double elapsed_s);
  void note(const std::string& line);  // a permanent line (e.g. an eval result)
  void finish();
  bool live() const { return m_live; }

 private:
  std::int64_t m_total, m_every;
  bool m_live, m_quiet;
  int m_columns;
  double m_last_draw_s = -1.0;
};

}  // namespace syncopt::metrics
