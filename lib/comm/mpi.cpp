// MPI session, communicator RAII and the MPI error check.
#include "comm/mpi.hpp"

#include <unistd.h>

#include <utility>

#include "common/error.hpp"

namespace syncopt::comm {

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown-host";
  return buf;
}

int world_rank_or_minus_one() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return -1;
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int node_local_rank(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  SYNCOPT_CHECK_MPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
}

void throw_mpi_error(int rc, const char* stmt, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw InternalError(std::string("MPI call failed: ") + stmt + " -> " + text + " at " + file +
                      ":" + std::to_string(line) + " (rank " +
                      std::to_string(world_rank_or_minus_one()) + " on " + host_name() + ")");
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int provided = 0;
  SYNCOPT_CHECK_MPI(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided));
  // Errors come back as codes so SYNCOPT_CHECK_MPI can name the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &m_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &m_size);
  m_host = host_name();
}

MpiSession::~MpiSession() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

Communicator::Communicator() : Communicator(MPI_COMM_WORLD) {}

Communicator::Communicator(MPI_Comm parent) {
  SYNCOPT_CHECK_MPI(MPI_Comm_dup(parent, &m_comm));
  MPI_Comm_set_errhandler(m_comm, MPI_ERRORS_RETURN);
}

Communicator::~Communicator() {
  if (m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
}

Communicator::Communicator(Communicator&& other) noexcept
    : m_comm(std::exchange(other.m_comm, MPI_COMM_NULL)) {}

Communicator& Communicator::operator=(Communicator&& other) noexcept {
  if (this != &other) {
    if (m_comm != MPI_COMM_NULL) MPI_Comm_free(&m_comm);
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
