// Polling waits with back-off (see poll.hpp).
#include "comm/poll.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "comm/mpi.hpp"
#include "common/error.hpp"

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
  const int rc = MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &outcount, idx.data(),
                              statuses.data());
  if (rc == MPI_ERR_IN_STATUS) {
    // A receive failed, typically a message longer than the receive buffer:
    // name the sender, since that rank is the one sending malformed data.
    for (int j = 0; j < outcount; ++j) {
      const MPI_Status& st = statuses[static_cast<std::size_t>(j)];
      if (st.MPI_ERROR == MPI_SUCCESS) continue;
      char text[MPI_MAX_ERROR_STRING] = {0};
      int len = 0;
      MPI_Error_string(st.MPI_ERROR, text, &len);
      throw InternalError("message from rank " + std::to_string(st.MPI_SOURCE) +
                          " could not be received: " + text +
                          " (longer than any message of this protocol: a corrupt count or a "
                          "different syncopt build on that rank)");
    }
  }
  SYNCOPT_CHECK_MPI(rc);
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

CancelOnExit::~CancelOnExit() {
  for (auto& r : m_reqs) {
    if (r == MPI_REQUEST_NULL) continue;
    // Errors are ignored here: this runs while unwinding from another error.
    MPI_Cancel(&r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
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
