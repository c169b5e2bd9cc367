// Fitting the simulation's timing model to a real run (`syncopt simulate
// --from runs/<name>`): from its steps.jsonl (shard 0) and config.toml,
//
//   pairs     for each gradient s of a worker after its first, its compute
//             time c_s and its overhead
//               o_s = A_s - R_s - c_s - d_s - floor - w_s,  floored at 0,
//             where A_s is its arrival at the shard (t_start + arrival_s),
//             R_s = max(A_{s-1}, t_start of the version s was computed on)
//             the moment the shard answered the previous push (the pull is
//             answered once both the push is in and that version exists),
//             d_s its straggler delay recomputed with the run's own
//             [stragglers] model (same seed, same formula), floor =
//             2 latency + the two messages' wire time, which the network
//             model adds back, and w_s the shard loop's expected back-off
//             wait (poll.hpp: half the sleep in progress when the message
//             came, from when the loop went idle), which the simulated
//             loop adds back: what is left is the software's cost (batch
//             loading, copies, the worker's own polling, the scheduler of
//             an oversubscribed node);
//   apply     every update's t_apply - (t_start + max(0, its last accepted
//             arrival)).
// The pairs are replayed round by round (timing.hpp's Recorded; a round is
// the workers answered at the same R with the same version), so that what
// the workers of one recorded pass shared stays shared.
// Simulated worker w replays recorded worker w mod K_recorded.
#pragma once

#include <cstddef>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/network.hpp"
#include "sim/timing.hpp"

namespace syncopt::sim {

struct Fit {
  TimingModel timing;  // the given model with its compute, overhead and apply replaced
  int workers = 0;     // recorded workers
  std::size_t samples = 0, apply_samples = 0;  // (compute, overhead) pairs; apply times
  double compute_p50_s = 0.0, overhead_p50_s = 0.0, apply_p50_s = 0.0;
  double floor_s = 0.0;  // network time subtracted from each overhead sample

  nlohmann::json to_json(const std::filesystem::path& run_dir) const;
};

// `base` supplies the seed (and what the run cannot tell); `network` and
// `param_count` give the floor subtracted from the overheads, `poll_max_s`
// the simulated loop's back-off (sim.poll_max_us). MissingInputError
// when the run directory or its files are missing, DataError when they hold
// no usable gradient record.
Fit fit_run(const std::filesystem::path& run_dir, const TimingModel& base,
            const NetworkParams& network, std::size_t param_count, double poll_max_s);

}  // namespace syncopt::sim
