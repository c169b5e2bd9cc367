// The parameter-server shard (DESIGN.md §3-§4): a thin MPI loop around
// ShardCore. It keeps one receive posted per worker (and one for the
// evaluator), feeds gradients to the core, applies the optimiser to its
// slice when an update is due, answers pulls under the mode's rule, serves
// the evaluator, and drains every message before it returns.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "comm/poll.hpp"
#include "comm/requests.hpp"
#include "common/clock.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "metrics/step_record.hpp"
#include "optim/optimizer.hpp"
#include "ps/shard_core.hpp"

namespace syncopt::ps {

struct ShardSetup {
  const config::Config* cfg = nullptr;
  const layout::Roles* roles = nullptr;
  const layout::Plan* plan = nullptr;
  int shard = 0;
  layout::Slice slice;
  const float* initial = nullptr;  // the slice's initial parameters
  MPI_Comm data_comm = MPI_COMM_NULL;
  MPI_Comm ctrl_comm = MPI_COMM_NULL;
  const RunClock* clock = nullptr;        // run-relative seconds
  metrics::StepLog* steps_log = nullptr;  // where this shard's step records go
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
  std::uint64_t examples = 0;  // accepted examples
  std::int64_t after_end = 0;  // gradients that arrived after the last update
};

class Shard {
 public:
  explicit Shard(const ShardSetup& setup);
  ~Shard();
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  // Serves workers and the evaluator until training has ended and every
  // worker and the evaluator have said goodbye; then drains.
  ShardResult run();

 private:
  struct Pending {
    bool waiting = false;
    std::uint64_t version = 0;
  };

  bool receive();
  void on_worker_message(int w, int bytes, double seen);
  void on_evaluator_message(int bytes);
  bool apply_due();
  void apply_one();
  bool answer_pulls();
  bool serve_evaluator();
  void notify_evaluator();
  void drain();
  const comm::SharedMessage& publish();
  bool done_training() const;
  [[noreturn]] void protocol_error(const std::string& what) const;

  const ShardSetup& m_st;
  const config::Config& m_cfg;
  const layout::Roles& m_roles;
  const int m_self;
  const int m_workers;
  const std::size_t m_count;
  const bool m_has_eval;
  const bool m_use_ema;

  ShardCore m_core;
  std::vector<float> m_theta, m_mean;
  optim::Optimizer m_opt;
  optim::Ema m_ema;
  optim::ScheduleOptions m_sched;

  // Receives: slot w for worker w, slot K for the evaluator.
  comm::RecvSlots m_recvs;
  comm::SendQueue m_data_sends, m_ctrl_sends;
  std::vector<comm::SharedMessage> m_snapshots;  // published versions, reused once free
  comm::SharedMessage m_current;                 // snapshot of the current version, if any
  comm::SharedMessage m_stop;                    // STOP, built once at the end

  std::vector<Pending> m_pending;  // a worker's request waiting for an answer
  std::vector<char> m_done;        // worker said goodbye
  int m_done_workers = 0;
  bool m_eval_done;
  bool m_eval_waiting = false;
  bool m_eval_notified = false;
  std::uint64_t m_eval_version = 0;

  bool m_finished = false;
  std::uint64_t m_examples = 0;
  std::int64_t m_after_end = 0;
  std::mt19937_64 m_rng;  // the order of receives that completed together
  comm::IdleBackoff m_backoff;
};

}  // namespace syncopt::ps
