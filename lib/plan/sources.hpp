// Where `syncopt plan` takes T(N, b) and I(N) from (planner.hpp): the
// records of earlier runs, or simulations of the arrival model (lib/sim).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "sim/simulator.hpp"
#include "sim/timing.hpp"

namespace syncopt::plan {

using RunDirs = std::vector<std::filesystem::path>;

// T(N, K - N) from sync runs of K workers (others are skipped, with a note):
// for the run's own N its mean seconds between updates after the first; for
// every other N its mean time to the N-th gradient of a step plus its median
// apply time (the paper's estimate from one run's arrival times). A direct
// measurement wins over estimates; several estimates are averaged.
std::map<int, double> step_times_from_runs(const RunDirs& runs, int workers,
                                           std::vector<std::string>& notes);

// T(N, K - N) by simulating `cfg` with sim.workers = K, train.mode = sync and
// train.backups = K - N, for each N of `n_values`: the mean simulated
// seconds between updates after the first. `timing` is the given or fitted
// model; the simulations run on `threads` threads.
std::map<int, double> step_times_from_sim(const config::Config& cfg, int workers,
                                          std::size_t param_count, const sim::TimingModel& timing,
                                          const std::vector<int>& n_values, int threads,
                                          const std::vector<sim::LayerCost>& layers = {});

// (N, updates to the target) of every run whose eval.jsonl reaches
// `target_acc` (test_acc, or test_acc_ema when `ema`): its first such
// record's step. Runs that never reach it are skipped, with a note.
std::vector<std::pair<int, double>> iters_from_runs(const RunDirs& runs, double target_acc,
                                                    bool ema, std::vector<std::string>& notes);

}  // namespace syncopt::plan
