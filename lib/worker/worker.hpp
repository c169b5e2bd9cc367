// The worker in parameter-server modes: pull parameters from every shard,
// compute a gradient on its own data shard, push the slices, repeat until
// every shard has said STOP. It beats to the shards and watches theirs: a
// shard silent for cluster.dead_after_s is dead, and the worker stops (69).
// When an answer of shard 0 asks for it, the worker saves its state (step
// counter, sampler, augmentation RNG) as its part of a checkpoint.
//
// The pipelined exchange (exchange.pipeline, docs/design.md §4): parameters
// and gradients travel in buckets of whole layers. The worker starts its
// forward once every shard's first message is in, and waits for a layer's
// bucket only just before that layer's forward; backward hands over each
// bucket's gradient as soon as it is final, top layer first. Every shard's
// bucket 0, which completes the gradient there and asks for the next
// parameters, goes once the whole step is done, so that a gradient is
// complete at every shard at the same moment it is without the pipeline.
// An injected straggler is slow at every layer (docs/design.md §7): its
// slowdown is slept piece by piece, before each layer's parameters are
// asked for and before each bucket goes, in proportion to the FLOPs done.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
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
#include "layout/bucket_sequence.hpp"
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
  // Every shard's buckets in forward order (layout::make_buckets; offsets
  // into the flat parameter vector); empty: one per shard.
  std::vector<std::vector<layout::Slice>> buckets;
  bool pipeline = false;  // compute with nn::Network::train_step_staged
  // Every rank of this node has a core of its own: wait by spinning
  // (yielding) rather than sleeping (ps::ShardSetup::own_core).
  bool own_core = false;
  std::size_t param_count = 0;
  nn::Network* net = nullptr;
  const data::Dataset* train = nullptr;
  const StragglerModel* stragglers = nullptr;
  // The model's parameter groups in forward order: where each starts in the
  // flat vector and its share of the forward FLOPs (nn::group_flops_shares);
  // empty: a straggler's slowdown is slept after the whole step.
  std::vector<std::size_t> group_offsets;
  std::vector<double> group_shares;
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
  double delay_s = 0.0;           // total injected straggler delay (slept)
  double wait_s = 0.0;            // total time waiting for parameters
  ExitCode code = ExitCode::kOk;  // the run's outcome as shard 0 told it
  bool peer_lost = false;         // a shard said some rank of the job died
};

class Worker {
 public:
  explicit Worker(const WorkerSetup& setup);
  WorkerResult run();

 private:
  class Hooks;
  // A bucket of some shard's slice, as the worker keeps track of it.
  struct Bucket {
    int shard = 0, index = 0;  // index in the shard's slice (0: its first layers)
    std::size_t offset = 0, count = 0;
    std::uint64_t version = 0;  // of the parameters received for this step
  };
  void pull_any();
  bool receive_params();
  void watch(double now);
  void take(int shard, int bytes);
  void receive_until(const std::function<bool()>& enough);
  // One past shard si's last bucket in m_buckets (its first is m_first[si]).
  std::size_t end_of(std::size_t si) const {
    return si + 1 < m_first.size() ? m_first[si + 1] : m_buckets.size();
  }
  void await_bucket(std::size_t g);
  void post_bucket(int shard);
  void await_sends();
  void idle(double now);
  void need_params(std::size_t offset, std::size_t count);
  void grads_ready(std::size_t offset, float loss);
  void send_bucket(std::size_t g);
  void save_part(std::uint64_t step);
  void snapshot();
  void compute();
  void pace(double phi);
  void load_batch();
  std::size_t group_of(std::size_t offset) const;
  void push_gradient();
  void say_goodbye();
  void send_small(comm::Kind kind, int shard, std::uint64_t seq);

  const WorkerSetup& m_st;
  const int m_shards;
  const int m_rank;
  const int m_batch;
  data::BatchLoader m_loader;
  // The network's parameters and gradient, which the exchange receives into
  // and sends from in place (shared with the requests that use them).
  std::shared_ptr<std::vector<float>> m_params, m_grad;
  std::vector<std::uint64_t> m_version;  // per shard, of the parameters held (its bucket 0's)
  std::vector<char> m_stopped;           // per shard
  std::vector<Bucket> m_buckets;         // every shard's, in forward order
  std::vector<std::size_t> m_first;      // per shard: its bucket 0 in m_buckets
  // Per shard: the buckets of its answer received this step, and of this
  // step's gradient sent to it (docs/design.md §4, Buckets).
  std::vector<layout::BucketSequence> m_param_order, m_grad_order;
  std::vector<char> m_sent;   // per bucket: its gradient sent this step
  comm::RecvSlots m_replies;  // one per shard
  comm::SendQueue m_sends;
  // The header of each bucket's gradient message (its payload is m_grad's).
  std::vector<comm::SharedMessage> m_outbox;
  // exchange.wire = bf16: parameters arrive as bf16 into m_wire_in (per
  // shard, its largest bucket) and are widened into m_params; each bucket's
  // gradient is rounded into m_wire_out (per bucket) and sent from there.
  bool m_wire_bf16 = false;
  std::vector<std::shared_ptr<std::vector<std::uint16_t>>> m_wire_in, m_wire_out;
  std::unique_ptr<comm::Watch> m_own_watch;
  comm::Watch* m_watch = nullptr;
  comm::IdleBackoff m_backoff;
  std::uint64_t m_step = 0;
  std::optional<std::uint64_t> m_saved;  // the last checkpoint this worker saved its part of
  std::optional<std::uint64_t> m_checkpoint_step;  // flagged in the answer arriving
  checkpoint::State m_snap;                        // the state before the current compute
  std::uint64_t m_snap_version = 0;                // shard 0's version it computes on
  bool m_stop_requested = false;
  const bool m_virtual;  // train.clock = virtual
  float m_loss = 0.0f;
  double m_compute_s = 0.0;
  double m_vtime_s = 0.0;  // virtual clock: modelled finish time of the last gradient
  // Virtual clock, per shard: when the version of its answer started.
  std::vector<double> m_vstart;
  std::chrono::steady_clock::time_point m_compute_start;
  double m_wait_at_start = 0.0;  // m_result.wait_s when the compute started
  // The straggler's pacing: per parameter group, the share of the step's
  // work done before its forward, and once its backward is done (forward a
  // third of a layer's FLOPs, backward two thirds, as the simulator).
  StragglerPacer m_pacer;
  std::vector<double> m_share_before, m_share_after;
  // The phases of the step in progress (docs/outputs.md grads[].phases),
  // seconds; forward holds the whole compute unless a pipelined step
  // split it.
  struct StepPhases {
    double data = 0.0, forward = 0.0, backward = 0.0, wait = 0.0, send = 0.0;
    bool split = false;
  };
  StepPhases m_phase;
  std::chrono::steady_clock::time_point m_push_start;
  WorkerResult m_result;
};

}  // namespace syncopt::worker
