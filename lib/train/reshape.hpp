// Resuming on another shape (docs/design.md §10, "Resuming on another
// shape"): a checkpoint saved by S shards and K workers read by a launch of
// S' shards and K' workers (allreduce: K ranks, K'), the mode unchanged.
// Every rank reads every part of the checkpoint and builds the parts of the
// new layout it needs in memory; nothing on disk changes until the resumed
// run saves its own checkpoint.
//
//   shard<s'>   θ, the optimiser's buffers and θ̄ of the old shards put end
//               to end and cut again by bytes for S' (layout::
//               balanced_slices); the version, the examples and the clock
//               of shard 0; per-worker counters (drops, clocks) kept for
//               the workers 0..min(K, K') - 1, new workers start at 0 drops
//               and the slowest old clock; every bucket at the version
//   worker<w'>  the samplers continued on K' readers (data::continue_on:
//               no example of an epoch begun is taken twice or skipped);
//               a worker lost before the save (no part) is placed by the
//               gradients shard 0 counted from it (clocks x batch)
//   rank<r'>    allreduce: the same for its loader; the replica is in "run"
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "layout/placement.hpp"
#include "layout/roles.hpp"

namespace syncopt::train {

// What a reshape needs of this launch.
struct Shape {
  const layout::Roles* roles = nullptr;
  std::vector<layout::Group> groups;  // the model's layers with parameters (PS modes)
  std::int64_t batch = 1;             // train.batch
  std::int64_t train_count = 0;       // examples in the training set
  std::uint64_t seed = 0;             // run.seed
};

// The layout a checkpoint's stamp says saved it, or null (a checkpoint from
// before stamps carried one).
nlohmann::json saved_layout(const checkpoint::Manifest& m);

// Whether `saved` (a stamp's layout) has another shape than `roles`: other
// shards, workers or ranks.
bool other_shape(const nlohmann::json& saved, const layout::Roles& roles);

// The latest checkpoint's parts named in `wanted` (this launch's part
// names), the parts it does not hold left out (a worker lost before the
// save). Saved by this shape: load_latest. Saved by another: every part is
// read (checksums verified) and the wanted ones are built as above; the
// Checkpoint's step and manifest are the saved one's. A reshape that
// cannot be done (another mode, a part that must be there) is a ConfigError
// (78) or a DataError (65) naming the part.
checkpoint::Checkpoint load_for_shape(const std::filesystem::path& run_dir, const Shape& shape,
                                      const std::vector<std::string>& wanted);

// The reshape itself on a loaded checkpoint (every part), for tests.
checkpoint::Checkpoint reshape(const checkpoint::Checkpoint& all, const Shape& shape,
                               const std::vector<std::string>& wanted);

}  // namespace syncopt::train
