// Distributed training under mpirun/srun: every rank takes its role from its
// rank (layout/roles.hpp), runs the role's loop, and the ranks that matter
// meet point to point at the end (a collective would hang on a dead rank)
// to gather the final parameters, the records and the verdict.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "comm/peers.hpp"
#include "config/config.hpp"
#include "rundir/meta.hpp"
#include "rundir/open.hpp"
#include "train/compute.hpp"

namespace syncopt::train {

struct DistributedResult {
  std::filesystem::path run_dir;
  rundir::Outcome outcome;  // this rank's view of how the run ended (its exit code)
  std::string report;       // rank 0: the end-of-run report text
  // Ranks this rank found dead (silent past cluster.dead_after_s), and every
  // rank's host and pid: the caller ends stopped ones on this node and does
  // not wait for them in MPI_Finalize.
  std::vector<int> dead_ranks;
  std::vector<comm::Peer> peers;
  // A shard said that some rank died: MPI_Finalize would wait for it.
  bool peer_lost = false;
};

// Requires MPI (with MPI_THREAD_MULTIPLE: heartbeats come from a thread) and
// a world of more than one rank. Errors of the set-up phases are agreed on
// by every rank (comm/agree.hpp): each throws AgreedError with the same exit
// code, and rank 0 records the attempt in run.json. Afterwards a rank's
// error is announced to the ranks that watch it and thrown as an
// AnnouncedError (they end with EndedByPeerError, one line each); a dead
// peer is an UnavailableError (69) of the ranks that need it. The outcome is
// recorded by rank 0, or, when rank 0 is silent, by one of the others
// (rundir/ending.hpp).
// `inv` goes into run.json (rundir/meta.hpp), written by rank 0.
DistributedResult run_distributed(const config::Config& cfg, const Compute& compute, bool quiet,
                                  const rundir::Invocation& inv = {});

}  // namespace syncopt::train
