// The parameter-server shard (docs/design.md §3, §4, §10): a thin MPI loop around
// ShardCore. It keeps one receive posted per worker (and one for the
// evaluator and each other shard), feeds gradients to the core, applies the
// optimiser to its slice when an update is due, answers pulls under the
// mode's rule, serves the evaluator, watches every peer's heartbeat, and
// drains every message before it returns.
//
// The pipelined exchange (docs/design.md §4): the slice is cut into buckets
// of whole layers. A worker's gradient comes bucket by bucket, top layer
// first, bucket 0 last (which also asks for parameters). In sync, timeout
// and softsync the buckets are assembled and the whole gradient decided on
// as without the pipeline; the update is then applied bucket by bucket in
// forward order, and each bucket's new parameters go to the workers waiting
// for them at once, so a worker starts its forward while the shard still
// updates the layers above. In async and ssp each bucket is applied on
// arrival, with its own version and staleness.
//
// Shard 0 also coordinates: it decides when a checkpoint is taken (every
// run.checkpoint_every_s / _steps, at the end, and when a stop signal
// reaches any rank), tells the other shards and the evaluator to save their
// parts, flags its next answer to every worker so that each saves its own,
// and commits the checkpoint once every live rank's part is written.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/state.hpp"
#include "comm/liveness.hpp"
#include "comm/peers.hpp"
#include "comm/poll.hpp"
#include "comm/requests.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "layout/bucket_sequence.hpp"
#include "layout/roles.hpp"
#include "metrics/records.hpp"
#include "metrics/step_record.hpp"
#include "optim/optimizer.hpp"
#include "optim/param_state.hpp"
#include "ps/adaptive.hpp"
#include "ps/checkpoint_plan.hpp"
#include "ps/roster.hpp"
#include "ps/shard_core.hpp"

namespace syncopt::ps {

struct ShardSetup {
  const config::Config* cfg = nullptr;
  const layout::Roles* roles = nullptr;
  const layout::Plan* plan = nullptr;
  const std::vector<comm::Peer>* peers = nullptr;  // every rank's host and pid
  int shard = 0;
  layout::Slice slice;
  // The slice's buckets in forward order (offsets into the flat parameter
  // vector), as layout::make_buckets cuts them; empty: the slice is one.
  std::vector<layout::Slice> buckets;
  const float* initial = nullptr;  // the slice's initial parameters
  MPI_Comm data_comm = MPI_COMM_NULL;
  MPI_Comm ctrl_comm = MPI_COMM_NULL;
  MPI_Comm live_comm = MPI_COMM_NULL;  // heartbeats alone
  // The rank's liveness (comm/liveness.hpp), owned by the job so that it
  // outlives the loop; null: the shard watches on its own (tests).
  comm::Watch* watch = nullptr;
  // Every rank of this node has a core of its own: wait for messages by
  // spinning (yielding), as MPI's own blocking calls do, rather than
  // sleeping, which adds up to a sleep's length to every message's latency.
  bool own_core = false;
  const RunClock* clock = nullptr;        // run-relative seconds
  metrics::StepLog* steps_log = nullptr;  // where this shard's step records go
  // Shard 0 without an evaluator rank: eval.jsonl, whose length a checkpoint records.
  metrics::JsonlWriter* eval_file = nullptr;
  std::filesystem::path run_dir;    // checkpoints go below it
  nlohmann::json checkpoint_stamp;  // shard 0: its manifests' run (rundir::checkpoint_stamp)
  const checkpoint::State* resume = nullptr;  // this shard's part of the checkpoint resumed
  // Called after every update (the progress line on rank 0).
  std::function<void(std::uint64_t step, std::uint64_t examples, float loss)> on_update;
  // Called after every update but the last with the full slice of theta and
  // its EMA: evaluation in place (one shard, no evaluator rank), which
  // decides itself whether it is due and stalls this step when it is.
  std::function<void(std::uint64_t step, std::uint64_t examples, const float* theta,
                     const float* ema)>
      inline_eval;
};

struct ShardResult {
  std::vector<float> theta, ema;
  std::uint64_t steps = 0;
  std::uint64_t examples = 0;     // accepted examples
  std::int64_t after_end = 0;     // gradients that arrived after the last update
  ExitCode code = ExitCode::kOk;  // its RunStatus: status_of(code)
  std::string detail;             // "SIGUSR1 at step 40", or why it failed
  nlohmann::json lost_workers = nlohmann::json::array();
  std::vector<int> dead_ranks;   // every rank this shard found dead
  std::vector<int> ended_ranks;  // ranks that ended on an error of theirs (ENDING)
  int reported_by = 0;           // the rank whose finding ended training (this shard's own: itself)
};

class Shard {
 public:
  explicit Shard(const ShardSetup& setup);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Serves workers and the evaluator until training has ended (or been
  // stopped), every live worker and the evaluator have said goodbye, and
  // the last checkpoint is saved; then drains.
  ShardResult run();

 private:
  struct Pending {
    bool waiting = false;
    std::uint64_t version = 0;
  };

  bool receive();
  void on_decision(int bytes);
  void send_decision(const metrics::StepRecord& rec);
  void on_worker_message(int w, int bytes, double seen);
  void on_gradient(int w, double seen);
  void stage(int w, const comm::MsgHeader& h, const float* data);
  void apply_bucket(int w, const comm::MsgHeader& h, const float* data);
  float* staging(int w);
  void on_peer_message(int slot, int bytes);
  bool apply_due();
  void apply_one();
  void diverged(const metrics::StepRecord& rec, float lr, const std::string& what);
  bool apply_buckets(const metrics::StepRecord& rec, float lr, bool last);
  std::vector<int> answerable() const;
  bool mean_of_bucket(std::size_t b);
  void optimise_bucket(std::size_t b, float lr);
  void record_update(metrics::StepRecord& rec, float lr);
  void adapt(const metrics::StepRecord& rec);
  bool answer_pulls();
  void send_params(int w, int bucket);
  bool would_finish(std::uint64_t examples, std::uint64_t version) const;
  bool serve_evaluator();
  void notify_evaluator();
  void check_liveness();
  void lose_worker(int w, double now);
  void on_ending(const comm::Notice& n);
  // Training ends here; `reporter`: the rank whose finding it is (-1: this one).
  void finish(ExitCode code, const std::string& detail, int reporter = -1);
  bool keep_running() const;
  void drain();
  const comm::SharedMessage& publish(int bucket);
  bool done_training() const;
  std::string rank_name(int rank) const;
  [[noreturn]] void protocol_error(const std::string& what) const;

  // Checkpoints and stops.
  void coordinate();
  void request_stop(int sig);
  void begin_checkpoint(bool final);
  void end_others_unsaved();
  void on_checkpoint_command(const comm::MsgHeader& h);
  void answer_checkpoint(const comm::MsgHeader& h);
  bool take_deferred_command();
  void on_saved(int rank, std::uint64_t step);
  void commit_if_complete();
  checkpoint::State part_state() const;
  void restore(const checkpoint::State& s);

  const ShardSetup& m_st;
  const config::Config& m_cfg;
  const layout::Roles& m_roles;
  const int m_self;
  const int m_workers;
  const std::size_t m_count;
  const bool m_has_eval;
  // Several shards agree on the N workers of each update (shard 0 decides).
  const bool m_agree;
  std::vector<comm::BucketSpan> m_buckets;  // of the slice (offsets into the flat vector)
  // Async and ssp with several buckets: each applied on arrival.
  const bool m_per_bucket;
  // Parameters go out bucket 0 first, in forward order; the update is
  // applied in the same order, each bucket sent as soon as it is.
  const layout::BucketSequence m_param_order;

  ShardCore m_core;
  // train.backups = auto: the N of the next update (shard 0; every shard
  // under the virtual clock, where all see the same finish times).
  std::unique_ptr<AdaptiveN> m_adaptive;
  std::map<std::uint64_t, double> m_version_start;  // recent versions' start times
  optim::ParamState m_params;                       // θ, optimiser and EMA of this slice
  std::vector<float> m_mean;
  optim::ScheduleOptions m_sched;

  // Receives: slot w for worker w, then the evaluator, then the other shards.
  comm::RecvSlots m_recvs;
  int m_eval_slot = -1;
  int m_decision_slot = -1;       // a follower's receive of shard 0's decisions
  std::vector<int> m_shard_slot;  // per shard rank (-1 for this one)
  comm::SendQueue m_data_sends, m_ctrl_sends;
  // Per bucket: published versions, reused once no send holds them, and
  // the snapshot of the current version (if published).
  std::vector<std::vector<comm::SharedMessage>> m_snapshots;
  std::vector<comm::SharedMessage> m_current;
  std::vector<layout::BucketSequence> m_grad_order;  // per worker: its gradient's buckets
  std::vector<std::vector<float>> m_staging;         // softsync, bucketed: per worker
  comm::SharedMessage m_stop;                        // STOP, built once at the end
  // A follower (m_agree): shard 0's CHECKPOINT for a step this shard has
  // not applied yet (its decision or gradients still on the way), kept
  // until it has, and since when.
  std::optional<comm::MsgHeader> m_deferred_command;
  double m_deferred_since = 0.0;
  // exchange.wire = bf16: gradients and parameters travel as bf16.
  bool m_wire_bf16 = false;
  // Payload bytes of gradients in and parameters out, and up to the last record.
  std::uint64_t m_wire_bytes = 0, m_wire_recorded = 0;
  std::unique_ptr<comm::Watch> m_own_watch;
  comm::Watch* m_watch = nullptr;

  std::vector<Pending> m_pending;         // a worker's request waiting for an answer
  WorkerRoster m_roster;                  // done, lost and live workers
  std::vector<std::uint64_t> m_flag;      // checkpoint step to flag in the next answer (0: none)
  std::vector<std::uint64_t> m_last_seq;  // last gradient seen per worker
  bool m_eval_done;
  bool m_eval_waiting = false;
  bool m_eval_notified = false;
  std::uint64_t m_eval_version = 0;

  bool m_finished = false;
  ExitCode m_code = ExitCode::kOk;
  std::string m_detail;
  int m_reported_by;
  int m_stop_signal = 0;
  std::uint64_t m_examples = 0;
  std::int64_t m_after_end = 0;
  // Checkpoints (shard 0); the others use its final_saved(): my part of
  // the last checkpoint is written.
  CheckpointPlan m_checkpoints;
  std::vector<int> m_dead_ranks, m_ended_ranks;
  std::mt19937_64 m_rng;  // the order of receives that completed together
  comm::IdleBackoff m_backoff;
};

}  // namespace syncopt::ps
