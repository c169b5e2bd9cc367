// Distributed training under mpirun/srun: every rank takes its role from its
// rank (roles.hpp), runs the role's loop, and all ranks meet once at the end
// to gather the final parameters, the records and the verdict.
#pragma once

#include <filesystem>
#include <string>

#include "config/config.hpp"

namespace syncopt::train {

struct DistributedResult {
  std::filesystem::path run_dir;
  std::string report;  // rank 0: the end-of-run report text
};

// Requires MPI to be initialised. Errors that every rank agrees on are
// thrown on every rank with the same exit code (AgreedError on the ranks
// that only learned of it), so no rank hangs and no rank aborts the job.
DistributedResult run_distributed(const config::Config& cfg, bool quiet);

}  // namespace syncopt::train
