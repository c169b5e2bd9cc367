// Roles by rank (DESIGN.md §2): ranks 0..S-1 are parameter-server shards,
// then an optional evaluator, then the workers. In allreduce mode every rank
// is a worker. The layout is a pure function of the config and world size,
// so every rank computes the same one and the same errors.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace syncopt::train {

enum class Role { kShard, kEvaluator, kWorker };

struct Slice {
  std::size_t offset = 0;  // floats into the flat parameter vector
  std::size_t count = 0;
};

struct Roles {
  std::string mode;
  int world = 1;
  int shards = 0;           // S (0 in allreduce)
  int evaluator_rank = -1;  // -1: none
  int first_worker = 0;
  int workers = 1;          // K
  int n = 1;                // gradients per update (sync/timeout: K - b; softsync: c; else 1)
  int backups = 0;          // b

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
// The layout; throws ConfigError listing check_layout's problems.
Roles make_roles(const config::Config& cfg, int world);

// Balanced contiguous slices of `count` floats over `shards` shards: the
// first count % shards shards get one more float.
std::vector<Slice> shard_slices(std::size_t count, int shards);

// One line per rank: "rank 3: worker 1 (host ...)" style table for --dry-run.
std::string describe(const Roles& roles, std::size_t param_count);

}  // namespace syncopt::train
