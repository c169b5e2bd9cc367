// MPI lifetime and communicators. MpiSession initialises MPI once (and
// finalises it once); Communicator owns a duplicate of MPI_COMM_WORLD with a
// hand-written move that nulls the source. SYNCOPT_CHECK_MPI evaluates its
// call once and throws InternalError naming the call, file, line, rank, host.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "comm/peers.hpp"

namespace syncopt::comm {

[[noreturn]] void throw_mpi_error(int rc, const char* stmt, const char* file, int line);

#define SYNCOPT_CHECK_MPI(call)                                                     \
  do {                                                                              \
    const int syncopt_mpi_rc_ = (call);                                             \
    if (syncopt_mpi_rc_ != MPI_SUCCESS)                                             \
      ::syncopt::comm::throw_mpi_error(syncopt_mpi_rc_, #call, __FILE__, __LINE__); \
  } while (0)

class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return m_rank; }
  int size() const { return m_size; }
  const std::string& host() const { return m_host; }

  // Ends MPI at the end of main: MPI_Finalize, guarded by a watchdog that
  // ends the process with `code` if a peer keeps it waiting longer than
  // `timeout_s`; after abandon(), ends the process at once with `code`
  // (stdio flushed), without MPI_Finalize. Does not return in that case.
  void finalize(int code, double timeout_s = 15.0);
  // A peer is known dead or stopped: MPI_Finalize would wait for it forever.
  void abandon() { m_abandoned = true; }
  // The exit window (docs/design.md §10): a peer on this node stopped
  // (SIGSTOP) after the run was written would keep mpirun waiting forever,
  // every other rank having exited. With the job's peer table, finalize()
  // ends such a peer once it has stayed stopped for `grace_s`
  // (cluster.dead_after_s), after MPI_Finalize, or when its watchdog fires.
  void watch_exit(std::vector<Peer> peers, double grace_s) {
    m_peers = std::move(peers);
    m_grace_s = grace_s;
  }

 private:
  bool m_abandoned = false;
  std::vector<Peer> m_peers;
  double m_grace_s = 0.0;
  int m_rank = 0;
  int m_size = 1;
  std::string m_host;
};

// This process's rank and host, usable in error messages before or after
// MPI is up (rank -1 when MPI is not initialised).
int world_rank_or_minus_one();
std::string host_name();

// This rank's index among the ranks of `comm` that share its node
// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED). A collective of `comm`.
int node_local_rank(MPI_Comm comm);

class Communicator {
 public:
  Communicator();  // MPI_Comm_dup(MPI_COMM_WORLD)
  explicit Communicator(MPI_Comm parent);
  // The ranks of `parent` on this rank's node (MPI_Comm_split_type SHARED).
  enum NodeLocal { kNodeLocal };
  Communicator(MPI_Comm parent, NodeLocal);
  ~Communicator();
  Communicator(Communicator&& other) noexcept;
  Communicator& operator=(Communicator&& other) noexcept;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  MPI_Comm get() const { return m_comm; }
  int rank() const;
  int size() const;

 private:
  MPI_Comm m_comm = MPI_COMM_NULL;
};

}  // namespace syncopt::comm
