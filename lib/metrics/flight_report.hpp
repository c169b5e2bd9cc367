// The flight recorder's section of `syncopt report` (docs/outputs.md,
// flight/rank-<r>.jsonl; written by comm/flight.hpp): per rank, the dump
// that tells the most (the last one taken at a deadline or on SIGUSR2,
// else its last), what it last completed and what it was waiting for,
// oldest first; and the ranks the others waited for that left no dump
// (stopped or dead).
#pragma once

#include <filesystem>
#include <string>

namespace syncopt::metrics {

// The section's text, empty when the run has no flight/ dumps. Only the
// dumps of `launch_id` count (empty: each file's last launch). A line that
// is not JSON (a dump cut short) ends that file's reading, said in the text.
std::string format_flight(const std::filesystem::path& run_dir, const std::string& launch_id);

}  // namespace syncopt::metrics
