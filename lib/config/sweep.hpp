// Grid sweeps (`syncopt sweep CONFIG -m key=v1,v2 ...`, Hydra's multirun):
// every combination of the listed values, each one run named by the values
// it sweeps, as --set overrides. Pure: the command checks each combination
// with load() and writes them as a sweep file for scripts/slurm/sweep.sbatch.
#pragma once

#include <string>
#include <vector>

namespace syncopt::config {

// One swept key: "train.backups=0,1,2" -> {"train.backups", {"0", "1", "2"}}.
// Commas inside [...], (...) or quotes do not split ("stragglers.workers=
// [0,1],[2]" is two values). A value may be a range of numbers:
// "range(a,b)" or "range(a,b,step)" as Python's (b excluded), "a:b:step"
// or "a:b" (step 1) with b included when the steps reach it (within 1e-9
// of a step); integers stay integers, other values print with 12
// significant digits (0.01:0.05:0.01 is 0.01,0.02,0.03,0.04,0.05).
// ConfigError (78) naming the argument when it is not section.key=values,
// has an empty value, a value with white space (a sweep file splits at
// white space), or a range that is empty, has step 0 or over 10000 values.
struct SweepAxis {
  std::string key;
  std::vector<std::string> values;
};
SweepAxis parse_axis(const std::string& arg);

// One run of the grid: its overrides (section.key=value, one per axis) and
// its name, `base` followed by "_<key>=<value>" per axis; <key> is the part
// after the section unless two axes share it, and characters that a run
// name or a file system would not take become '-'.
struct SweepRun {
  std::vector<std::string> overrides;
  std::string name;
};

// Every combination, the first axis varying slowest (as nested loops).
std::vector<SweepRun> expand(const std::vector<SweepAxis>& axes, const std::string& base);

// Every swept key is a config key: one ConfigError naming each that is not,
// with the nearest key, before any run is expanded (a typo in -m is said
// once, not once per run).
void check_axes(const std::vector<SweepAxis>& axes);

// Loads every run as `syncopt train CONFIG --set <overrides> --set <the
// run's>` would and names it: when run.name resolves differently between
// runs (it refers to a swept key, "ab-b${train.backups}"), each run takes
// the name it resolves to (distinct, else a ConfigError naming the two);
// otherwise the expand() name stays. Throws one ConfigError listing each
// problem once, with the runs it concerns ("in every run" when all).
std::vector<SweepRun> check_runs(const std::string& config_path,
                                 const std::vector<std::string>& overrides,
                                 std::vector<SweepRun> runs);

}  // namespace syncopt::config
