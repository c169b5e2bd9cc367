// Distributed training under mpirun/srun: every rank takes its role from its
// rank (layout/roles.hpp), runs the role's loop, and all ranks meet once at
// the end to gather the final parameters, the records and the verdict.
#pragma once

#include <filesystem>
#include <string>

#include "config/config.hpp"
#include "train/compute.hpp"
#include "train/run_dir.hpp"

namespace syncopt::train {

struct DistributedResult {
  std::filesystem::path run_dir;
  Outcome outcome;     // completed, or stopped by a signal (exit 75)
  std::string report;  // rank 0: the end-of-run report text
};

// Requires MPI to be initialised and a world of more than one rank. Errors
// of the set-up and end phases are agreed on by every rank (comm/agree.hpp):
// each rank throws AgreedError with the same exit code. An error inside a
// role's loop is this rank's alone.
DistributedResult run_distributed(const config::Config& cfg, const Compute& compute, bool quiet);

}  // namespace syncopt::train
