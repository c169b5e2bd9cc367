// The worker in parameter-server modes: pull parameters from every shard,
// compute a gradient on its own data shard, push the slices, repeat until
// every shard has said STOP. It beats to the shards and watches theirs: a
// shard silent for cluster.dead_after_s is dead, and the worker stops (69).
// When an answer of shard 0 asks for it, the worker saves its state (step
// counter, sampler, augmentation RNG) as its part of a checkpoint.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "checkpoint/state.hpp"
#include "comm/liveness.hpp"
#include "comm/peers.hpp"
#include "comm/poll.hpp"
#include "comm/requests.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "data/batch.hpp"
#include "data/dataset.hpp"
#include "layout/roles.hpp"
#include "nn/backend.hpp"
#include "worker/straggler.hpp"

namespace syncopt::worker {

struct WorkerSetup {
  const config::Config* cfg = nullptr;
  const layout::Roles* roles = nullptr;
  const std::vector<comm::Peer>* peers = nullptr;
  int worker = 0;                     // 0..K-1
  std::vector<layout::Slice> slices;  // of every shard
  std::size_t param_count = 0;
  nn::Network* net = nullptr;
  const data::Dataset* train = nullptr;
  const StragglerModel* stragglers = nullptr;
  MPI_Comm data_comm = MPI_COMM_NULL;
  MPI_Comm live_comm = MPI_COMM_NULL;
  comm::Watch* watch = nullptr;  // the rank's liveness, owned by the job (null: its own)
  const RunClock* clock = nullptr;
  std::filesystem::path run_dir;
  const checkpoint::State* resume = nullptr;  // this worker's part, if the checkpoint has one
};

struct WorkerResult {
  std::uint64_t gradients = 0;    // computed and pushed
  double compute_s = 0.0;         // total time in train_step
  double delay_s = 0.0;           // total injected straggler delay
  double wait_s = 0.0;            // total time waiting for parameters
  ExitCode code = ExitCode::kOk;  // the run's outcome as shard 0 told it
  bool peer_lost = false;         // a shard said some rank of the job died
};

class Worker {
 public:
  explicit Worker(const WorkerSetup& setup);
  WorkerResult run();

 private:
  void pull_any();
  bool receive_params();
  void save_part(std::uint64_t step);
  void snapshot();
  void compute();
  void push_gradient();
  void say_goodbye();
  void send_small(comm::Kind kind, int shard, std::uint64_t seq);

  const WorkerSetup& m_st;
  const int m_shards;
  const int m_rank;
  const int m_batch;
  data::BatchLoader m_loader;
  std::vector<float> m_params, m_grad;
  std::vector<std::uint64_t> m_version;  // per shard, of the parameters held
  std::vector<char> m_stopped;           // per shard
  comm::RecvSlots m_replies;             // one per shard
  comm::SendQueue m_sends;
  // Two gradient buffers per shard: a send in flight never blocks the next
  // computation, and a buffer is only rewritten once its send completed.
  std::vector<comm::SharedMessage> m_outbox[2];
  std::unique_ptr<comm::Watch> m_own_watch;
  comm::Watch* m_watch = nullptr;
  comm::IdleBackoff m_backoff;
  std::uint64_t m_step = 0;
  std::optional<std::uint64_t> m_saved;  // the last checkpoint this worker saved its part of
  checkpoint::State m_snap;              // the state before the current compute
  std::uint64_t m_snap_version = 0;      // shard 0's version it computes on
  bool m_stop_requested = false;
  const bool m_virtual;  // train.clock = virtual
  float m_loss = 0.0f;
  double m_compute_s = 0.0;
  double m_vtime_s = 0.0;   // virtual clock: modelled finish time of the last gradient
  double m_vstart_s = 0.0;  // virtual clock: the latest start of the versions just received
  WorkerResult m_result;
};

}  // namespace syncopt::worker
