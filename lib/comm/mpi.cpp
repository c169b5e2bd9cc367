// MPI session, communicator RAII and the MPI error check.
#include "comm/mpi.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "comm/requests.hpp"
#include "common/error.hpp"

namespace syncopt::comm {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

int world_rank_or_minus_one() {
  // Used while reporting another error: failures here only mean "unknown".
  int initialized = 0, finalized = 0;
  if (MPI_Initialized(&initialized) != MPI_SUCCESS || MPI_Finalized(&finalized) != MPI_SUCCESS ||
      !initialized || finalized) {
    return -1;
  }
  int rank = -1;
  if (MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS) return -1;
  return rank;
}

int node_local_rank(MPI_Comm comm) {
  Communicator node(comm, Communicator::kNodeLocal);
  return node.rank();
}

void throw_mpi_error(int rc, const char* stmt, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
    std::snprintf(text, sizeof(text), "code %d", rc);
  throw InternalError(std::string("MPI call failed: ") + stmt + " -> " + text + " at " + file +
                      ":" + std::to_string(line) + " (rank " +
                      std::to_string(world_rank_or_minus_one()) + " on " + host_name() + ")");
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  SYNCOPT_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
  // The main thread and the heartbeat thread (comm/liveness.hpp) both call
  // MPI; OpenMP compute threads never do.
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw InternalError("the MPI library offers thread level " + std::to_string(provided) +
                        ", below MPI_THREAD_MULTIPLE, which syncopt needs (its heartbeats come "
                        "from a thread of their own): use an MPI built with thread support "
                        "(Open MPI, MPICH and Intel MPI all are)");
  }
  // Errors come back as codes so SYNCOPT_CHECK_MPI can name the call.
  SYNCOPT_CHECK_MPI(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &m_rank));
  SYNCOPT_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &m_size));
  m_host = host_name();
}

namespace {

double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The peers on this node stopped now and at every sample for `for_s`
// seconds (never a job-wide pause being resumed, whose ranks all run again
// within that time), sampled every quarter second.
std::vector<int> stopped_for(const std::vector<Peer>& peers, int rank, double for_s) {
  if (peers.empty()) return {};
  std::vector<int> still = stopped_here(peers, rank);
  const auto start = std::chrono::steady_clock::now();
  while (!still.empty() && since(start) < for_s) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    const std::vector<int> now = stopped_here(peers, rank);
    std::erase_if(still, [&](int r) { return std::find(now.begin(), now.end(), r) == now.end(); });
  }
  return still;
}

// MPI_Finalize's watchdog: a peer that keeps this rank in MPI_Finalize ends
// it with `code` after `timeout_s` (its outcome is on disk already); a peer
// of this node stopped meanwhile is ended first (the exit window).
void finalize_watchdog(int code, double timeout_s, int rank, std::vector<Peer> peers) {
  std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, timeout_s - 0.5)));
  (void)fence(peers, rank, stopped_for(peers, rank, 0.5));  // on this host only
  std::fprintf(stderr,
               "syncopt: MPI_Finalize did not return within %.0fs (a peer is gone?); "
               "exiting with %d\n",
               timeout_s, code);
  std::fflush(nullptr);
  ::_exit(code);
}

}  // namespace

void MpiSession::finalize(int code, double timeout_s) {
  std::fflush(nullptr);
  spdlog::default_logger()->flush();
  if (m_abandoned) ::_exit(code);
  int finalized = 0;
  if (MPI_Finalized(&finalized) != MPI_SUCCESS || finalized) return;
  std::thread(finalize_watchdog, code, timeout_s, m_rank, m_peers).detach();
  MPI_Finalize();
  release_kept_buffers();  // MPI holds none of them now
  // The exit window: every rank but a stopped one may be gone now, and
  // mpirun waits for that one forever. Whoever is still here ends it.
  if (!m_peers.empty() && !stopped_here(m_peers, m_rank).empty()) {
    const auto still = stopped_for(m_peers, m_rank, m_grace_s);
    (void)fence(m_peers, m_rank, still);  // another host's is out of reach
  }
}

MpiSession::~MpiSession() {
  int finalized = 0;
  if (MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
    MPI_Finalize();
    release_kept_buffers();
  }
}

Communicator::Communicator() : Communicator(MPI_COMM_WORLD) {}

Communicator::Communicator(MPI_Comm parent) {
  SYNCOPT_CHECK_MPI(MPI_Comm_dup(parent, &m_comm));
  SYNCOPT_CHECK_MPI(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN));
}

Communicator::Communicator(MPI_Comm parent, NodeLocal) {
  SYNCOPT_CHECK_MPI(MPI_Comm_split_type(parent, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &m_comm));
  SYNCOPT_CHECK_MPI(MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN));
}

Communicator::~Communicator() {
  // Not after MPI_Finalize (a communicator that outlived the session).
  int finalized = 0;
  if (m_comm != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) {
    MPI_Comm_free(&m_comm);
  }
}

Communicator::Communicator(Communicator&& other) noexcept
    : m_comm(std::exchange(other.m_comm, MPI_COMM_NULL)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (m_comm != MPI_COMM_NULL) (void)MPI_Comm_free(&m_comm);  // noexcept: nothing to report to
    m_comm = std::exchange(other.m_comm, MPI_COMM_NULL);
  }
  return *this;
}

int Communicator::rank() const {
  int r = 0;
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(m_comm, &r));
  return r;
}

int Communicator::size() const {
  int s = 0;
  SYNCOPT_CHECK_MPI(MPI_Comm_size(m_comm, &s));
  return s;
}

}  // namespace syncopt::comm
