// Bounded waits for the GPU. Every host wait of the CUDA backend goes through
// these: they poll (cudaStreamQuery / cudaEventQuery) instead of blocking in
// cudaStreamSynchronize, so that work that never finishes — an NCCL kernel
// whose peer is gone, above all — becomes an error after a deadline
// (cluster.dead_after_s) instead of a hang.
//
// Polling costs one core while it waits, as the CUDA runtime's own default
// (spin) does: it spins with yields for the first milliseconds, where almost
// every wait of a training step ends, then sleeps in short steps.
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace syncopt::cuda {

// The schedule of one bounded wait: a clock, a deadline, and pause() that
// spins at first and sleeps later.
class Poller {
 public:
  // timeout_s <= 0: no deadline.
  explicit Poller(double timeout_s);
  bool expired() const;
  double elapsed_s() const;
  void pause();

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point m_start;
  double m_timeout_s;
};

// Waits until every piece of work enqueued on `stream` so far has finished.
// A CUDA error of that work is thrown as InternalError (SYNCOPT_CHECK_CUDA
// style); still running after timeout_s (> 0) is an InternalError naming
// `what` and the deadline. timeout_s <= 0 waits without a deadline.
void wait_stream(cudaStream_t stream, double timeout_s, const std::string& what);

// The same for the work before `event` was recorded.
void wait_event(cudaEvent_t event, double timeout_s, const std::string& what);

// How many times this process has waited on the host for GPU work (every
// wait_stream and wait_event, and the NCCL reducer's own waits), whether or
// not the work was done already: the synchronisation points of a training
// step, which tests count. note_host_wait() adds one (for waits that poll
// on their own).
std::uint64_t host_wait_count() noexcept;
void note_host_wait() noexcept;

}  // namespace syncopt::cuda
