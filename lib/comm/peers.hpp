// Who every rank is (host and process id), gathered once at start-up, so
// that messages about a rank can say where it runs, and so that a rank that
// is stopped or hung (SIGSTOP, a paused VM) can be ended by a live rank on
// its node once everything is written: otherwise mpirun would wait for it
// forever (docs/design.md §10).
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

namespace syncopt::comm {

struct Peer {
  std::string host;
  int pid = 0;
};

// A collective of `comm` (at start-up, while every rank is alive).
std::vector<Peer> gather_peers(MPI_Comm comm);

// "rank 5 on node-a (pid 1234)".
std::string describe_rank(const std::vector<Peer>& peers, int rank);

// SIGKILLs the `silent` ranks that run on this rank's host (never itself);
// returns the ones it could not reach (other hosts), for the log.
std::vector<int> fence(const std::vector<Peer>& peers, int self, const std::vector<int>& silent);

// The ranks on this rank's host whose process is stopped (SIGSTOP, Ctrl-Z:
// state T in /proc/PID/stat), never itself.
std::vector<int> stopped_here(const std::vector<Peer>& peers, int self);

}  // namespace syncopt::comm
