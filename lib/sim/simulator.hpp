// The discrete-event simulation of a parameter-server cluster (docs/design.md
// §10, `syncopt simulate`): K workers and S shards run the real loops'
// protocol in simulated seconds, and every decision (accept, drop, apply,
// answer a pull) is taken by the same ps::ShardCore as in a real run, on
// gradients of one float.
//
// What the real loops do, and so the simulation:
//   worker  at t = 0 pulls any version from every shard; once every shard
//           answered: overhead o, compute c, straggler delay d (the same
//           seeded worker::StragglerModel: d = delay_s(w, seq, c)); then it
//           sends its gradient slice to every shard, tagged with the version
//           it read, which also asks for newer parameters;
//   shard   takes a gradient (ShardCore::on_grad); when ready() it applies,
//           busy for apply_s (messages wait); answers every waiting pull
//           that may_answer() allows: sync/timeout once its version passed
//           the worker's (a dropped worker is answered at once, with the
//           current version), async/softsync at once, ssp under the clock
//           bound; timeout applies at N or timeout_s after its first
//           accepted gradient; after the last update it answers STOP.
//           Like the real loop it works in passes: every message that came
//           in while it was busy (or, idle, during its back-off sleep) is
//           taken in one pass, all stamped with the pass's start; each may
//           complete an update, applied at once; the pulls are answered at
//           the end of the pass, with the version current then.
// Messages cross the network model (network.hpp); waiting pulls are
// answered in worker order, as the real shard loop does. Agreeing shards
// (train.agree_shards, several shards, sync and timeout) work as in a real
// run: shard 0 decides each update's workers (accepting a gradient only if
// it was fresh on every shard) and sends its choice to the others, which
// apply once it is in, with the gradients it names.
//
// The pipelined exchange (exchange.pipeline = true, with the model's layers
// known): a shard's slice is whole layers (layout::balanced_slices), cut
// into buckets of at least exchange.bucket_bytes, formed from its top layer
// down (PyTorch DDP's order). A shard applies an update bucket by bucket in
// forward order (apply_s split by bytes); each worker it answers gets its
// buckets in forward order, each no earlier than it is applied, the workers
// one after another in worker order over the shard's link (first come first
// served, as whole replies are). A worker's compute time c plus its
// straggler delay d (a slow machine is slow at every layer) is split over
// the layers by their forward FLOPs, a third for the forward pass and two
// thirds for the backward (backward costs about twice the forward); it
// loads its batch (overhead o) from the moment its first parameters arrive,
// runs each layer's forward once that layer's parameters are in, and sends
// each bucket of gradients as soon as backward has produced it (the top
// layers first). A shard takes a gradient when its last bucket is in.
// Without the pipeline (or without layers: sim.param_count) the whole
// slice goes in one message each way, after the whole computation.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "config/mode.hpp"
#include "metrics/step_record.hpp"
#include "sim/network.hpp"
#include "sim/poll.hpp"
#include "sim/timing.hpp"
#include "worker/straggler.hpp"

namespace syncopt::sim {

// One parameter group of the model (a layer's weights and biases), in
// forward order: its floats and its share of the forward FLOPs (the
// parameter-free layers after it, up to the next group, counted with it).
struct LayerCost {
  std::size_t count = 0;
  double flops_share = 0.0;
};

struct SimSetup {
  config::Mode mode = config::Mode::kSync;  // a parameter-server mode
  int workers = 1;                          // K
  int n = 1;                                // N (sync, timeout) or c (softsync)
  std::vector<std::size_t> slice_counts;    // floats of each shard's slice (S = size)
  // The model's layers (empty: one undivided vector); with them, every
  // slice must be whole layers (layout::balanced_slices).
  std::vector<LayerCost> layers;
  // sync and timeout with several shards: shard 0 decides which workers an
  // update averages and tells the others (a small message over the
  // network), which apply the same set (train.agree_shards).
  bool agree = false;
  bool pipeline = false;           // exchange.pipeline (with layers only)
  double bucket_bytes = 262144.0;  // exchange.bucket_bytes
  std::int64_t batch = 1;
  std::uint64_t total_steps = 0;      // updates per shard, when target_examples = 0
  std::uint64_t target_examples = 0;  // else: accepted examples per shard
  double timeout_s = 0.1;
  double poll_max_s = 0.0;  // idle shard loop's longest back-off sleep; 0 = event-driven
  std::int64_t ssp_bound = 0;
  float lr = 0.0f;  // written into every record (the schedule is not simulated)
  NetworkParams network;
  std::vector<int> host_of;  // the host of every node (shards, then workers); empty: each its own
  TimingModel timing;
  const worker::StragglerModel* stragglers = nullptr;  // none: no delays
  // Every finished step record of every shard, in simulated-time order.
  std::function<void(metrics::StepRecord&&)> on_step;
};

struct SimResult {
  std::uint64_t steps = 0;          // updates of shard 0
  std::uint64_t examples = 0;       // accepted examples of shard 0
  double end_s = 0.0;               // simulated time of the last update of any shard
  std::uint64_t events = 0;         // events processed
  std::uint64_t gradients = 0;      // gradients computed by all workers
  std::vector<std::int64_t> drops;  // shard 0, per worker
};

// Runs the simulation until every shard made its last update. Throws
// ConfigError for a setup that cannot run (no worker, N > K, ...) and
// InternalError if the events run out before the end (a protocol bug).
SimResult simulate(const SimSetup& setup);

}  // namespace syncopt::sim
