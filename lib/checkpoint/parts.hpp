// What the parts of a checkpoint are called and what the parameter part
// holds: the one place that knows a checkpoint's layout above the file
// format (checkpoint.hpp). Every saver and every loader asks here, so a
// part name or a field cannot be spelt two ways.
//
//   shard<s>     a shard's slice: params layout below, its core, its records
//   worker<w>    a worker's sampler, RNG and counters
//   evaluator    the evaluator's timer and eval.jsonl offset
//   rank<r>      an allreduce rank's replica
//   run          the run-wide record offsets of a run without shards
//   local        the local trainer
//
// The params layout {theta, optim, ema} is shared by a shard's slice, the
// host replica and the CUDA replica.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/state.hpp"

namespace syncopt::checkpoint {

std::string shard_part(int shard);
std::string worker_part(int worker);
std::string rank_part(int rank);
inline constexpr const char* kEvaluatorPart = "evaluator";
inline constexpr const char* kRunPart = "run";
inline constexpr const char* kLocalPart = "local";

// θ, the optimiser's state and the EMA's (absent without an EMA).
struct ParamsPart {
  std::vector<float> theta;
  State optim;
  std::optional<State> ema;
};

// The params fields, added to `into` (which may hold other fields).
void put_params(State& into, const std::vector<float>& theta, State optim,
                std::optional<State> ema);
// The params fields of `s`, checked: θ must have `count` floats, and an EMA
// must be there iff `with_ema`. A mismatch is a ConfigError (78) naming the
// field and `what_differs` (the model, cluster.ps, optim.ema), since a
// checkpoint whose checksums hold was written by another configuration.
ParamsPart get_params(const State& s, std::size_t count, bool with_ema,
                      const std::string& what_differs);

}  // namespace syncopt::checkpoint
