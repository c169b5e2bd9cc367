// Waiting on MPI requests without burning a core. Open MPI's blocking waits
// spin; on an oversubscribed node (7 ranks on 2 cores) a spinning parameter
// server or idle worker steals the cycles the computing workers need. So we
// test, and when nothing completed, sleep with an exponential back-off
// (capped well below a training step, so it adds little latency).
#pragma once

#include <mpi.h>

#include <vector>

namespace syncopt::comm {

class IdleBackoff {
 public:
  // Called when a test found nothing: yield a few times, then sleep
  // 20 us, 40 us, ... up to max_sleep_us, never past `limit_s` (if >= 0).
  void idle(double limit_s = -1.0);
  void busy() { m_idle = 0; }

 private:
  int m_idle = 0;
};

// MPI_Testsome over `reqs`, polling with back-off until at least one
// completes. Returns the indices of the completed requests and fills
// `statuses` (parallel to the returned indices). Inactive (MPI_REQUEST_NULL)
// requests are ignored; returns empty when all are inactive.
std::vector<int> wait_some(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses,
                           IdleBackoff& backoff);

// Non-blocking: the indices that completed now (possibly none).
std::vector<int> test_some(std::vector<MPI_Request>& reqs, std::vector<MPI_Status>& statuses);

// Wait for all, polling with back-off.
void wait_all(std::vector<MPI_Request>& reqs);

// Cancels every still-active request of `reqs` when it goes out of scope,
// so an error never leaves a receive posted into a buffer that is about to
// be freed. Declare it after the buffers and the request vector.
class CancelOnExit {
 public:
  explicit CancelOnExit(std::vector<MPI_Request>& reqs) : m_reqs(reqs) {}
  ~CancelOnExit();
  CancelOnExit(const CancelOnExit&) = delete;
  CancelOnExit& operator=(const CancelOnExit&) = delete;

 private:
  std::vector<MPI_Request>& m_reqs;
};

// Sleep `seconds` without spinning.
void sleep_s(double seconds);

}  // namespace syncopt::comm
