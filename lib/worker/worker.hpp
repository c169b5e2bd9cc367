// The worker in parameter-server modes: pull parameters from every shard,
// compute a gradient on its own data shard, push the slices, repeat until
// every shard has said STOP.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "comm/poll.hpp"
#include "comm/requests.hpp"
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
  int worker = 0;                     // 0..K-1
  std::vector<layout::Slice> slices;  // of every shard
  std::size_t param_count = 0;
  nn::Network* net = nullptr;
  const data::Dataset* train = nullptr;
  const StragglerModel* stragglers = nullptr;
  MPI_Comm data_comm = MPI_COMM_NULL;
};

struct WorkerResult {
  std::uint64_t gradients = 0;  // computed and pushed
  double compute_s = 0.0;       // total time in train_step
  double delay_s = 0.0;         // total injected straggler delay
  double wait_s = 0.0;          // total time waiting for parameters
};

class Worker {
 public:
  explicit Worker(const WorkerSetup& setup);
  WorkerResult run();

 private:
  void pull_any();
  bool receive_params();
  void compute();
  void push_gradient();
  void say_goodbye();

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
  comm::IdleBackoff m_backoff;
  std::uint64_t m_step = 0;
  float m_loss = 0.0f;
  double m_compute_s = 0.0;
  WorkerResult m_result;
};

}  // namespace syncopt::worker
