// Waiting for nonblocking collectives (see collective.hpp).
#include "comm/collective.hpp"

#include <chrono>
#include <thread>

#include "comm/mpi.hpp"
#include "comm/poll.hpp"

namespace syncopt::comm {

namespace {

constexpr double kHookEveryS = 0.005;
// Spinning (with a yield) this long before sleeping keeps the latency of a
// collective what a blocking call's would be, which also spins.
constexpr double kSpinS = 0.002;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

void wait_collective(MPI_Request& req, const WaitHook& on_wait, double error_grace_s) {
  const auto t0 = std::chrono::steady_clock::now();
  double next_hook = kHookEveryS;
  for (;;) {
    int done = 0;
    const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      // Usually a peer that died mid-collective: give the heartbeats the
      // time to name it before reporting MPI's own error.
      const auto t_err = std::chrono::steady_clock::now();
      while (on_wait && seconds_since(t_err) < error_grace_s) {
        on_wait();
        sleep_s(0.01);
      }
      SYNCOPT_CHECK_MPI(rc);
    }
    if (done) return;
    const double waited = seconds_since(t0);
    if (on_wait && waited >= next_hook) {
      on_wait();
      next_hook = waited + kHookEveryS;
    }
    if (waited < kSpinS) {
      std::this_thread::yield();
    } else {
      sleep_s(20e-6);
    }
  }
}

}  // namespace syncopt::comm
