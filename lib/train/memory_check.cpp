// The memory check before allocation (see memory_check.hpp).
#include "train/memory_check.hpp"

#include <algorithm>
#include <string>

#include "common/error.hpp"
#include "common/memory.hpp"
#include "nn/footprint.hpp"
#include "nn/graph.hpp"
#include "train/inputs.hpp"

namespace syncopt::train {

namespace {

struct Use {
  const char* who;
  std::uint64_t copies;
  std::int64_t batch;  // 0: no network
  const char* which;   // the copies, for the message
};

Use use_of(const config::Config& cfg, Holds holds) {
  const std::int64_t both = std::max(cfg.train.batch, cfg.eval.batch);
  // RMSProp keeps a mean square beside the momentum.
  const std::uint64_t optim = cfg.optim.name == config::OptimizerName::kRmsprop ? 2 : 1;
  switch (holds) {
    case Holds::kTrainer:
      return {"a trainer", 5 + optim, both,
              "theta, its gradient, the optimiser's state, the EMA, the initial theta and the "
              "records' copy"};
    case Holds::kWorker:
      return {"a worker", 3, cfg.train.batch, "the initial theta, theta and its gradient"};
    case Holds::kShard:
      return {"a shard", 1, 0, "the initial theta"};
    case Holds::kEvaluator:
      return {"the evaluation", 3, both, "the initial theta, theta and the EMA"};
  }
  return {"a process", 1, 0, "theta"};
}

}  // namespace

void check_memory(const config::Config& cfg, Holds holds, int ranks_here) {
  const MemoryLimit limit = memory_limit(ranks_here, cfg.compute.memory_limit_gb);
  if (limit.source.empty()) return;  // nothing known of this machine
  const Use use = use_of(cfg, holds);
  const nn::Graph graph = nn::model_graph(expected_model_spec(cfg));
  const nn::Footprint f = nn::footprint(graph, use.batch, use.copies);
  const std::uint64_t need =
      use.batch > 0 ? f.total(use.copies) : f.param_bytes * use.copies;  // no activations
  if (need <= limit.nbytes) return;
  std::string acts;
  if (use.batch > 0) {
    acts = ", activations of a batch of " + std::to_string(use.batch) + " " +
           format_bytes(f.activation_bytes) + " (every layer's output and its gradient)";
  }
  throw ConfigError(
      "model." + std::string(cfg.model.name == config::ModelName::kCustom ? "layers" : "name") +
      ": the model does not fit in memory: " + use.who + " needs at least " + format_bytes(need) +
      ", more than the " + format_bytes(limit.nbytes) + " this process may use (" + limit.source +
      "). " + std::to_string(graph.layout.count) + " parameters are " +
      format_bytes(f.param_bytes) + " a copy, " + std::to_string(use.copies) + " copies (" +
      use.which + ")" + acts + "; the largest layer is " + f.largest + ", " +
      format_bytes(f.largest_bytes) +
      ". Use a smaller model or train.batch (eval.batch for evaluation), fewer ranks per node, "
      "or set compute.memory_limit_gb if this limit is wrong.");
}

}  // namespace syncopt::train
