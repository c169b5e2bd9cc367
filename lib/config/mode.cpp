// The mode table (see mode.hpp).
#include "config/mode.hpp"

#include <array>
#include <string>

#include "common/error.hpp"

namespace syncopt::config {

namespace {

// clang-format off
constexpr std::array<ModeTraits, 7> kModes{{
    {Mode::kLocal, false, false, false, NRule::kOne,
     "one process, the reference loop"},
    {Mode::kSync, true, true, true, NRule::kWorkersMinusBackups,
     "each update averages the first N = K - b fresh gradients; the b late ones are dropped"},
    {Mode::kAsync, true, false, false, NRule::kOne,
     "every gradient applied on arrival; its staleness recorded"},
    {Mode::kSoftsync, true, false, false, NRule::kSoftsyncC,
     "each update averages the next c gradients, whatever their version"},
    {Mode::kSsp, true, false, false, NRule::kOne,
     "async, but a worker more than train.ssp_bound gradients ahead of the slowest waits"},
    {Mode::kTimeout, true, true, true, NRule::kWorkersMinusBackups,
     "sync, but an update also falls due train.timeout_ms after the first fresh gradient"},
    {Mode::kAllreduce, false, false, false, NRule::kAllRanks,
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

double examples_per_update(int n, std::int64_t batch) {
  return static_cast<double>(n) * static_cast<double>(batch);
}

}  // namespace syncopt::config
