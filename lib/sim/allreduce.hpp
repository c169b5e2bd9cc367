// `syncopt simulate` of train.mode = allreduce (docs/design.md §3): K ranks
// each compute a batch (or, with train.micro_batch, micro-batches within a
// compute budget, worker::ComputeBudget), then join one ring allreduce of
// the gradient; every rank applies the update. Step by step, no events
// needed: a step ends when the last rank's gradient is ready plus the
// allreduce and the update. The same model as a virtual-clock allreduce
// run (train/allreduce.cpp): the same seeded compute draws, the same
// straggler pacing over micro-batches, the same budget decisions; with no
// network and no overhead, the same step times.
//
// The ring allreduce of n floats over K ranks moves 2 (K - 1) / K of the
// message through every rank's link in 2 (K - 1) rounds:
//   allreduce_s = 2 (K - 1) * (latency + (4 n / K) / bandwidth)
// (bus bandwidth = algorithm bandwidth * 2 (K - 1) / K, as nccl-tests
// report it).
#pragma once

#include <cstdint>
#include <functional>

#include "config/config.hpp"
#include "metrics/step_record.hpp"
#include "sim/network.hpp"
#include "sim/simulator.hpp"
#include "sim/timing.hpp"
#include "worker/straggler.hpp"

namespace syncopt::sim {

struct AllreduceSimSetup {
  int workers = 1;                // K
  config::TrainConfig train;      // batch, micro_batch, compute budget
  std::uint64_t total_steps = 0;  // updates, when target_examples = 0
  std::uint64_t target_examples = 0;
  std::size_t param_count = 0;  // floats of the gradient
  float lr = 0.0f;              // written into every record
  NetworkParams network;
  TimingModel timing;
  const worker::StragglerModel* stragglers = nullptr;  // none: no delays
  std::function<void(metrics::StepRecord&&)> on_step;
};

// Seconds of one ring allreduce of `floats` floats over `ranks` ranks.
double ring_allreduce_s(const NetworkParams& net, int ranks, std::size_t floats);

SimResult simulate_allreduce(const AllreduceSimSetup& setup);

}  // namespace syncopt::sim
