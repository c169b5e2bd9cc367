// Polling waits with back-off (see poll.hpp).
#include "comm/poll.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/mpi.hpp"

namespace syncopt::comm {

namespace {
constexpr int kSpinTests = 8;
constexpr double kMaxSleepUs = 500.0;
}  // namespace

void sleep_s(double seconds) {
  if (seconds <= 0.0) return;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
}

void IdleBackoff::idle(double limit_s) {
  ++m_idle;
  if (m_idle <= kSpinTests) {
    std::this_thread::yield();
    return;
  }
  double us = std::min(kMaxSleepUs, 20.0 * static_cast<double>(1 << std::min(m_idle - kSpinTests, 5)));
  if (limit_s >= 0.0) us = std::min(us, limit_s * 1e6);
  if (us > 0.0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

std::vector<int> test_some(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses) {
  std::vector<int> idx(reqs.size());
  statuses.resize(reqs.size());
  int outcount = 0;
  SYNCOPT_CHECK_MPI(MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &outcount, idx.data(),
                                 statuses.data()));
  if (outcount == MPI_UNDEFINED) outcount = 0;
  idx.resize(static_cast<std::size_t>(outcount));
  statuses.resize(static_cast<std::size_t>(outcount));
  return idx;
}

std::vector<int> wait_some(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses,
                           IdleBackoff& backoff) {
  const bool any_active = std::any_of(reqs.begin(), reqs.end(),
                                      [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
  if (!any_active) return {};
  for (;;) {
    auto idx = test_some(reqs, statuses);
    if (!idx.empty()) {
      backoff.busy();
      return idx;
    }
    backoff.idle();
  }
}

void wait_all(std::vector<MPI_Request>& reqs) {
  IdleBackoff backoff;
  for (;;) {
    int flag = 0;
    SYNCOPT_CHECK_MPI(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &flag,
                                  MPI_STATUSES_IGNORE));
    if (flag) return;
    backoff.idle();
  }
}

}  // namespace syncopt::comm
