// The peer table and fencing (see peers.hpp).
#include "comm/peers.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "comm/mpi.hpp"

namespace syncopt::comm {

namespace {
constexpr int kHostBytes = 256;

// The process has ended (a zombie not yet reaped, or no process at all).
bool gone(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return true;
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'Z';
}

// The process is stopped by a signal (state T; t, stopped by a tracer, is a
// debugger's and left alone).
bool stopped(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return false;
  const auto close = text.rfind(')');
  return close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'T';
}
}  // namespace

std::vector<Peer> gather_peers(MPI_Comm comm) {
  int size = 0;
  SYNCOPT_CHECK_MPI(MPI_Comm_size(comm, &size));
  std::vector<char> mine(kHostBytes, 0), all(static_cast<std::size_t>(size) * kHostBytes);
  host_name().copy(mine.data(), kHostBytes - 1);
  SYNCOPT_CHECK_MPI(
      MPI_Allgather(mine.data(), kHostBytes, MPI_CHAR, all.data(), kHostBytes, MPI_CHAR, comm));
  int pid = static_cast<int>(::getpid());
  std::vector<int> pids(static_cast<std::size_t>(size));
  SYNCOPT_CHECK_MPI(MPI_Allgather(&pid, 1, MPI_INT, pids.data(), 1, MPI_INT, comm));
  std::vector<Peer> out(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) {
    out[static_cast<std::size_t>(r)] = {
        std::string(all.data() + static_cast<std::size_t>(r) * kHostBytes),
        pids[static_cast<std::size_t>(r)]};
  }
  return out;
}

std::string describe_rank(const std::vector<Peer>& peers, int rank) {
  if (rank < 0 || static_cast<std::size_t>(rank) >= peers.size())
    return "rank " + std::to_string(rank);
  const Peer& p = peers[static_cast<std::size_t>(rank)];
  return "rank " + std::to_string(rank) + " on " + p.host + " (pid " + std::to_string(p.pid) + ")";
}

std::vector<int> fence(const std::vector<Peer>& peers, int self, const std::vector<int>& silent) {
  std::vector<int> elsewhere;
  const std::string& here = peers[static_cast<std::size_t>(self)].host;
  for (const int r : silent) {
    if (r == self) continue;
    const Peer& p = peers[static_cast<std::size_t>(r)];
    if (p.host != here) {
      elsewhere.push_back(r);
      continue;
    }
    if (gone(p.pid)) continue;  // another rank ended it already
    if (::kill(p.pid, SIGKILL) == 0) {
      spdlog::warn(
          "ended {}: it was silent past cluster.dead_after_s (stopped or hung) and "
          "would keep mpirun waiting forever",
          describe_rank(peers, r));
    } else if (errno != ESRCH) {
      spdlog::warn("could not end silent {}: {}", describe_rank(peers, r), std::strerror(errno));
    }
  }
  return elsewhere;
}

std::vector<int> stopped_here(const std::vector<Peer>& peers, int self) {
  std::vector<int> out;
  if (self < 0 || static_cast<std::size_t>(self) >= peers.size()) return out;
  const std::string& here = peers[static_cast<std::size_t>(self)].host;
  for (std::size_t r = 0; r < peers.size(); ++r) {
    if (static_cast<int>(r) != self && peers[r].host == here && stopped(peers[r].pid))
      out.push_back(static_cast<int>(r));
  }
  return out;
}

}  // namespace syncopt::comm
