// Roles by rank (docs/design.md §2): ranks 0..S-1 are parameter-server shards,
// then an optional evaluator, then the workers. In allreduce mode every rank
// is a worker; a world of one rank trains locally. The layout is a pure
// function of the config and the world size, so every rank computes the same
// one and the same errors. Below ps/, worker/ and train/, which all use it.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "config/update_rule.hpp"

namespace syncopt::layout {

enum class Role { kShard, kEvaluator, kWorker };

struct Slice {
  std::size_t offset = 0;  // floats into the flat parameter vector
  std::size_t count = 0;
};

struct Roles {
  config::Mode mode = config::Mode::kLocal;
  int world = 1;
  int shards = 0;           // S (0 without a parameter server)
  int evaluator_rank = -1;  // -1: none
  int first_worker = 0;
  int workers = 1;          // K
  config::UpdateRule rule;  // N, b, adaptive b and the lr multiplier

  Role role_of(int rank) const;
  int shard_of(int rank) const { return rank; }
  int worker_of(int rank) const { return rank - first_worker; }
  int worker_rank(int worker) const { return first_worker + worker; }
  // The rank that evaluates and writes eval.jsonl: the evaluator, else rank 0.
  int eval_writer() const { return evaluator_rank >= 0 ? evaluator_rank : 0; }
  std::string role_name(int rank) const;
};

// Every problem of fitting cfg to `world` ranks, one message each (empty = fits).
std::vector<std::string> check_layout(const config::Config& cfg, int world);
// The layout; throws ConfigError listing check_layout's problems. A world of
// one rank is the local trainer, whatever train.mode says.
Roles make_roles(const config::Config& cfg, int world);

// Balanced contiguous slices of `count` floats over `shards` shards: the
// first count % shards shards get one more float. (Training places whole
// layers: layout::balanced_slices in placement.hpp.)
std::vector<Slice> shard_slices(std::size_t count, int shards);

// One line per rank: "rank 3: worker 1 (data shard 1 of 5)" for --dry-run;
// a shard's line gives its slice of `slices` (layout::balanced_slices).
std::string describe(const Roles& roles, const std::vector<Slice>& slices);

// How long the run is and how its schedule counts, the same on every rank:
// from train.steps, or from train.epochs counted in accepted examples.
struct Plan {
  double train_count = 1.0;          // examples in the training set (one epoch)
  double examples_per_update = 1.0;  // N * batch
  std::uint64_t total_steps = 0;     // updates (an estimate in timeout mode)
  // train.epochs in accepted examples when train.steps = 0 (else 0): the
  // shards stop on this, since a timeout update may carry fewer than N.
  std::uint64_t target_examples = 0;
  double total_epochs = 0.0;  // the schedule's length
};
Plan make_plan(const config::Config& cfg, const Roles& roles, std::int64_t train_count);

}  // namespace syncopt::layout
