// A model and batch that cannot fit in the memory this process may use are
// refused (78) before anything is allocated, naming the layer that needs
// the most and the bytes (docs/design.md §5, "Memory").
#pragma once

#include "config/config.hpp"

namespace syncopt::train {

// What a process holds besides its data, by what it does.
enum class Holds {
  kTrainer,    // local and allreduce: θ, its gradient, the optimiser's state, θ̄, the initial θ
               // and the records' copy of θ; a network for max(train.batch, eval.batch)
  kWorker,     // a parameter-server worker: the initial θ, θ and its gradient; a training network
  kShard,      // a shard: the initial θ (all of it); its slice's state is a fraction of it
  kEvaluator,  // the eval writer (evaluator, or shard 0 without one): θ and θ̄; a network for
               // max(train.batch, eval.batch)
};

// ConfigError (78) when the footprint of cfg's model (nn/footprint.hpp) for
// what this process `holds` exceeds memory_limit(ranks_here,
// compute.memory_limit_gb). A pure function of the config and the machine.
void check_memory(const config::Config& cfg, Holds holds, int ranks_here);

}  // namespace syncopt::train
