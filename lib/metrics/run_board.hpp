// The run's TensorBoard view (runs/<name>/tb/): the one place where step
// records and evaluations become TensorBoard tags, so that every mode (local,
// allreduce, the parameter-server shards, the simulator) shows the same
// curves and `tensorboard --logdir runs` compares runs side by side.
//
// Per step record (with several shards, shard 0's: the others' decide alike
// on their own slices and are in steps.jsonl), at its step and wall time:
//   train/loss             the applied (mean) loss
//   train/lr               the learning rate applied
//   train/steps_per_s      updates per second, from t_apply, smoothed over
//                          about the last 10 updates
//   sync/gradients_used    gradients averaged into the update
//   sync/drops             gradients of the record not accepted
//   sync/staleness_mean    mean staleness of the accepted gradients
//   sync/time_to_kth       arrival of the last accepted gradient (the N-th
//                          of the step: the time to k = N, seconds)
//   sync/arrival_s         histogram of every gradient's arrival (seconds
//                          since the step's start), accepted or dropped
//   sync/staleness_by_layer/<b>-<layers>
//                          async and ssp with the pipelined exchange: the
//                          mean staleness of the accepted gradients' bucket
//                          b (00 = the first layers), one tag per bucket
// Per evaluation, at its step:
//   eval/test_acc, eval/test_acc_ema, eval/test_loss, eval/test_loss_ema
// Once, at the start of a launch (rank 0), at step 0:
//   run/config             text: the resolved config.toml
//   run/command            text: the command line, the build and the host
//   hparams                every config key (section.key) as a
//                          hyperparameter of the HParams tab, one session
//                          named after the run
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "config/config.hpp"
#include "metrics/step_record.hpp"
#include "metrics/tensorboard.hpp"

namespace syncopt::metrics {

// One evaluation of θ and θ̄ on the test set (eval.jsonl's fields).
struct EvalScalars {
  std::uint64_t step = 0;
  double wall_s = 0.0;  // run time of the evaluation
  double test_loss = 0.0;
  double test_acc = 0.0;  // fraction in [0, 1], as in eval.jsonl
  double test_loss_ema = 0.0;
  double test_acc_ema = 0.0;
};

// A record costs 7 scalars and one histogram, ~10 µs. Not thread-safe: one
// board per writing thread. Errors are OutputError, as TensorBoardWriter's.
class RunBoard {
 public:
  // A new events file in `dir` whose name ends in `tag` (one per writing
  // rank, all in one directory: TensorBoard merges them as one run). Wall
  // times are clock.unix_s(record time), read at each write, so the clock
  // may be restarted after the board is made.
  RunBoard(const std::filesystem::path& dir, const std::string& tag, const RunClock& clock);

  void step(const StepRecord& r);
  // Workers up to which each one's scores get a tag of their own.
  static constexpr std::size_t kScoredWorkers = 32;
  // The layers of each bucket of the records' shard (shard 0), in forward
  // order, for the staleness_by_layer tags.
  void set_bucket_layers(std::vector<std::string> layers);
  void eval(const EvalScalars& e);
  // The resolved config as text and as hparams, and `command` (a Markdown
  // line or two: the command line, build, host) as text.
  void describe_run(const config::Config& cfg, const std::string& command);
  void flush() { m_writer.flush(); }
  const std::filesystem::path& path() const { return m_writer.path(); }

 private:
  void scores(const StepRecord& r, std::int64_t step, double wall);
  TensorBoardWriter m_writer;
  const RunClock& m_clock;
  std::vector<double> m_arrivals;         // reused across records
  std::vector<std::string> m_layer_tags;  // sync/staleness_by_layer/<b>-<layers>
  // Smoothed seconds per update, and the last record it saw.
  double m_step_s = 0.0;
  std::map<int, double> m_least_work;  // per worker: its least own work so far (metrics/blame.hpp)
  std::uint64_t m_last_step = 0;
  double m_last_apply = 0.0;
};

// The board of a run: a new events file in <run_dir>/tb/ tagged `tag`, or
// nullptr when run.tensorboard = false. Every writing rank of a run puts its
// file in the same tb/ (TensorBoard merges a directory's files into one run);
// a resumed run adds a file there (a writer never overwrites one).
std::shared_ptr<RunBoard> open_run_board(const config::RunConfig& run,
                                         const std::filesystem::path& run_dir,
                                         const std::string& tag, const RunClock& clock);

}  // namespace syncopt::metrics
