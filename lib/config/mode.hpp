// The training modes (docs/design.md §3), parsed once from train.mode into an
// enum, and the one table of what each mode is: whether it has parameter
// servers, whether a gradient is judged by the version it was computed on,
// what N (gradients per update) means, and what follows from N. Every other
// file asks this table instead of comparing mode names.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "config/enums.hpp"

namespace syncopt::config {

enum class Mode { kLocal, kSync, kAsync, kSoftsync, kSsp, kTimeout, kAllreduce };

// clang-format off
template <> struct EnumTable<Mode> {
  static constexpr std::array<EnumName<Mode>, 7> kNames{{
      {Mode::kLocal, "local"}, {Mode::kSync, "sync"}, {Mode::kAsync, "async"},
      {Mode::kSoftsync, "softsync"}, {Mode::kSsp, "ssp"}, {Mode::kTimeout, "timeout"},
      {Mode::kAllreduce, "allreduce"}}};
};
// clang-format on

// What N, the number of gradients one update averages, is in a mode.
enum class NRule {
  kOne,                  // local, async, ssp: every gradient is its own update
  kWorkersMinusBackups,  // sync, timeout: N = K - b (timeout: at most N)
  kSoftsyncC,            // softsync: N = train.softsync_c
  kAllRanks,             // allreduce: every rank's gradient, N = world
};

struct ModeTraits {
  Mode mode;
  bool uses_ps;  // parameter-server shards, (evaluator), workers
  // A gradient is accepted only if computed on the shard's current version
  // (sync, timeout): late ones are dropped, pulls wait for a newer version,
  // and the time to the k-th gradient of a version is meaningful.
  bool versioned;
  bool has_backups;  // train.backups applies
  NRule n_rule;
  std::string_view summary;  // one line, for --help and --dry-run
};

const ModeTraits& traits(Mode mode);
inline std::string_view mode_name(Mode mode) { return enum_name(mode); }

// Examples one update consumes (N * batch; in timeout mode at most that),
// the unit in which epochs and the schedule are counted.
double examples_per_update(int n, std::int64_t batch);

}  // namespace syncopt::config
