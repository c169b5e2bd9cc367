// Grid sweeps (`syncopt sweep CONFIG -m key=v1,v2 ...`, Hydra's multirun):
// every combination of the listed values, each one run named by the values
// it sweeps, as --set overrides. Pure: the command checks each combination
// with load() and writes them as a sweep file for scripts/slurm/sweep.sbatch.
#pragma once

#include <string>
#include <vector>

namespace syncopt::config {

// One swept key: "train.backups=0,1,2" -> {"train.backups", {"0", "1", "2"}}.
// Commas inside [...] or quotes do not split ("stragglers.workers=[0,1],[2]"
// is two values). ConfigError (78) naming the argument when it is not
// section.key=values, has an empty value, or a value with white space (a
// sweep file splits at white space).
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

}  // namespace syncopt::config
