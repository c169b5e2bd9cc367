// A run's records as CSV, for spreadsheets, pandas, or an import into W&B or
// MLflow: `syncopt export RUN_DIR --csv`. Three files, one row each per
//   steps.csv  update record of steps.jsonl (every shard's), with the count
//              of its gradients and of those dropped
//   grads.csv  gradient of those records (its step and shard first): arrival,
//              version read, accepted, staleness, compute time
//   eval.csv   evaluation of eval.jsonl
// Columns are the records' own fields (a field added to the records later
// becomes a column), in a fixed order: the documented ones first
// (docs/outputs.md), then the others by name. A field a row lacks is empty;
// numbers are written as JSON writes them (shortest round trip). A record
// being written when a run was read (a torn last line) is left out only
// when the caller says the run is incomplete, as `syncopt report` does;
// in a finished run it is damage (65).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace syncopt::metrics {

// The CSV text of `rows` (objects of scalars; nested values are written as
// JSON text), columns `first` then the rest by name.
std::string to_csv(const std::vector<nlohmann::json>& rows, const std::vector<std::string>& first);

// Writes steps.csv, grads.csv and eval.csv (when the run has eval.jsonl) of
// `run_dir` into `out_dir` (created); returns the files written.
// MissingInputError (66) when the run has no steps.jsonl, DataError (65) on
// a bad line (a torn last one only when !torn_tail_ok), OutputError on writes.
std::vector<std::filesystem::path> export_csv(const std::filesystem::path& run_dir,
                                              const std::filesystem::path& out_dir,
                                              bool torn_tail_ok);

}  // namespace syncopt::metrics
