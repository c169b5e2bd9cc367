// The training modes (DESIGN.md §3), parsed once from train.mode into an
// enum, and the one table of what each mode is: whether it has parameter
// servers, whether a gradient is judged by the version it was computed on,
// what N (gradients per update) means, and what follows from N. Every other
// file asks this table instead of comparing mode names.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace syncopt::config {

enum class Mode { kLocal, kSync, kAsync, kSoftsync, kSsp, kTimeout, kAllreduce };

// What N, the number of gradients one update averages, is in a mode.
enum class NRule {
  kOne,                  // local, async, ssp: every gradient is its own update
  kWorkersMinusBackups,  // sync, timeout: N = K - b (timeout: at most N)
  kSoftsyncC,            // softsync: N = train.softsync_c
  kAllRanks,             // allreduce: every rank's gradient, N = world
};

struct ModeTraits {
  Mode mode;
  std::string_view name;  // as in train.mode
  bool uses_ps;           // parameter-server shards, (evaluator), workers
  // A gradient is accepted only if computed on the shard's current version
  // (sync, timeout): late ones are dropped, pulls wait for a newer version,
  // and the time to the k-th gradient of a version is meaningful.
  bool versioned;
  bool has_backups;  // train.backups applies
  NRule n_rule;
  std::string_view summary;  // one line, for --help and --dry-run
};

const ModeTraits& traits(Mode mode);
std::string_view mode_name(Mode mode);
std::optional<Mode> mode_from_name(std::string_view name);
// Every mode's name, in table order (for "must be one of ...").
std::vector<std::string_view> mode_names();

// N for a layout: K workers (world ranks in allreduce), b backups, softsync c.
int gradients_per_update(Mode mode, int workers, int backups, int softsync_c);
// Examples one update consumes (N * batch; in timeout mode at most that),
// the unit in which epochs and the schedule are counted.
double examples_per_update(int n, std::int64_t batch);
// The lr multiplier: N when optim.scale_lr_by_n, else 1.
double lr_multiplier(int n, bool scale_lr_by_n);

}  // namespace syncopt::config
