// What a run's records say (docs/design.md §7): step-time percentiles, the time
// to collect the k-th of K gradients (the paper's Figure 3 in numbers), drops
// per worker, staleness, cross-shard disagreement. Used for summary.json at
// the end of a run and by `syncopt report RUN_DIR` afterwards.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/mode.hpp"
#include "metrics/step_record.hpp"

namespace syncopt::metrics {

struct RunInfo {
  config::Mode mode = config::Mode::kLocal;
  int n = 1, b = 0, shards = 0, workers = 1;
  std::int64_t batch = 0;
  double wall_s = 0.0;
  std::uint64_t examples = 0;
  double epochs = 0.0;  // < 0: unknown (a run read from its records alone)
  // Whether the final parameters were evaluated (not in a run that stopped
  // or failed, nor in a simulation): summary.json's test_* are null if not.
  bool evaluated = false;
  double test_loss = 0.0, test_acc = 0.0, test_loss_ema = 0.0, test_acc_ema = 0.0;
  // Shards whose records are analysed: 0 = all S; 1 = shard 0's alone
  // (syncopt simulate's sim.records = shard0), when whether shards disagreed
  // is unknown (null in the summary).
  int recorded_shards = 0;
  // Per shard, the layers of each bucket of the pipelined exchange in
  // forward order ("conv1..conv2"): names for staleness_by_layer (empty:
  // only bucket numbers).
  std::vector<std::vector<std::string>> bucket_layers;
  // exchange.wire of the run ("fp32", "bf16"); "" where there is no wire.
  std::string wire;
  // How far from the limit (metrics/limits.hpp): the model's forward FLOPs
  // per example, its parameters, each shard's slice of them, and the
  // machine (rank 0's host: CPU model, measured one-core peak, compute
  // threads and backend); 0 / empty / null where unknown.
  double flops_per_example = 0.0;
  std::int64_t param_count = 0;
  std::vector<std::int64_t> shard_counts;
  nlohmann::json machine;
};

struct RunAnalysis {
  nlohmann::json summary;  // the summary.json object
};

// Reads a JSON Lines file; DataError naming the file and line on a bad line,
// MissingInputError when absent. torn_tail_ok: a last line without its
// newline that is not JSON (a run still writing, or killed mid-write) is
// left out instead.
std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& path,
                                       bool torn_tail_ok = false);

// The summary of a stream of step records, in memory that does not grow
// with the records: counters per worker, one number per update, and per
// gradient of shard 0 its compute time and its time from its version's
// start (4 bytes each; the arrivals of a version are folded into the
// k-th-gradient lists once every worker has sent a later one). Shard 0's
// records must come in step order (as steps.jsonl and the simulator give
// them), the other shards' in any order. finish() gives what analyze()
// gives for the same records.
class Analyzer {
 public:
  explicit Analyzer(const RunInfo& info);
  ~Analyzer();
  Analyzer(const Analyzer&) = delete;
  Analyzer& operator=(const Analyzer&) = delete;
  void add(const StepRecord& r);
  // What finish() says of the run as a whole (wall time, examples, epochs,
  // the final evaluation) may be set here until then.
  RunInfo& info();
  // Whether a shard-0 record came out of step order (add() ignores nothing,
  // but the step times assume the order: use analyze() on all of them).
  bool out_of_order() const;
  RunAnalysis finish();

 private:
  struct State;
  std::unique_ptr<State> m;
};

// All records at once, in any order (shard 0's are sorted by step first).
RunAnalysis analyze(const std::vector<StepRecord>& steps, const RunInfo& info);

// <path>'s records read one line at a time into an Analyzer (a file of
// millions of gradients is never held in memory); shard 0's out of step
// order: read whole and sorted instead. DataError / MissingInputError as
// read_steps.
RunAnalysis analyze_file(const std::filesystem::path& path, const RunInfo& info,
                         bool torn_tail_ok = false);

// Every record of a steps.jsonl (DataError naming the file and record).
std::vector<StepRecord> read_steps(const std::filesystem::path& path, bool torn_tail_ok = false);

// Analyses <run_dir>/steps.jsonl, adds the `extra` fields and writes
// summary.json atomically; returns the analysis (for the report).
RunAnalysis write_summary(const std::filesystem::path& run_dir, const RunInfo& info,
                          const nlohmann::json& extra);

// RunInfo back from a summary.json written by analyze() or the local trainer.
RunInfo run_info_from_summary(const nlohmann::json& summary);

// The human-readable report (what `syncopt report` prints). `incomplete`:
// why the run has no final result (it stopped, failed, or has no
// summary.json), printed first; empty for a completed run.
std::string format_report(const RunAnalysis& an, const std::vector<nlohmann::json>& evals,
                          const std::string& incomplete = "");

}  // namespace syncopt::metrics
