// The mode table (see mode.hpp).
#include "config/mode.hpp"

#include <array>
#include <string>

#include "common/error.hpp"

namespace syncopt::config {

namespace {

// clang-format off
constexpr std::array<ModeTraits, 7> kModes{{
    {Mode::kLocal, "local", false, false, false, NRule::kOne,
     "one process, the reference loop"},
    {Mode::kSync, "sync", true, true, true, NRule::kWorkersMinusBackups,
     "each update averages the first N = K - b fresh gradients; the b late ones are dropped"},
    {Mode::kAsync, "async", true, false, false, NRule::kOne,
     "every gradient applied on arrival; its staleness recorded"},
    {Mode::kSoftsync, "softsync", true, false, false, NRule::kSoftsyncC,
     "each update averages the next c gradients, whatever their version"},
    {Mode::kSsp, "ssp", true, false, false, NRule::kOne,
     "async, but a worker more than train.ssp_bound gradients ahead of the slowest waits"},
    {Mode::kTimeout, "timeout", true, true, true, NRule::kWorkersMinusBackups,
     "sync, but an update also falls due train.timeout_ms after the first fresh gradient"},
    {Mode::kAllreduce, "allreduce", false, false, false, NRule::kAllRanks,
     "no parameter server: the mean of every rank's gradient by allreduce"},
}};
// clang-format on

}  // namespace

const ModeTraits& traits(Mode mode) {
  for (const auto& t : kModes) {
    if (t.mode == mode) return t;
  }
  throw InternalError("mode table has no entry for mode " + std::to_string(static_cast<int>(mode)));
}

std::string_view mode_name(Mode mode) { return traits(mode).name; }

std::optional<Mode> mode_from_name(std::string_view name) {
  for (const auto& t : kModes) {
    if (t.name == name) return t.mode;
  }
  return std::nullopt;
}

std::vector<std::string_view> mode_names() {
  std::vector<std::string_view> out;
  for (const auto& t : kModes) out.push_back(t.name);
  return out;
}

int gradients_per_update(Mode mode, int workers, int backups, int softsync_c) {
  switch (traits(mode).n_rule) {
    case NRule::kOne:
      return 1;
    case NRule::kWorkersMinusBackups:
      return workers - backups;
    case NRule::kSoftsyncC:
      return softsync_c;
    case NRule::kAllRanks:
      return workers;
  }
  return 1;
}

double examples_per_update(int n, std::int64_t batch) {
  return static_cast<double>(n) * static_cast<double>(batch);
}

double lr_multiplier(int n, bool scale_lr_by_n) {
  return scale_lr_by_n ? static_cast<double>(n) : 1.0;
}

}  // namespace syncopt::config
