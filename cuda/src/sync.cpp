// Bounded waits for the GPU (see syncopt_cuda/sync.hpp).
#include "syncopt_cuda/sync.hpp"

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda {

namespace {

// Spinning (with yields) for this long covers nearly every wait of a step
// without adding a sleep's latency to it; longer waits sleep in small steps.
constexpr double kSpinS = 0.02;
constexpr auto kSleep = std::chrono::microseconds(200);

std::atomic<std::uint64_t> g_host_waits{0};

template <class Query>
void wait_for(Query query, double timeout_s, const std::string& what, const char* kind) {
  note_host_wait();
  Poller poll(timeout_s);
  for (;;) {
    const cudaError_t rc = query();
    if (rc == cudaSuccess) return;
    if (rc != cudaErrorNotReady) {
      (void)cudaGetLastError();
      detail::throw_error("CUDA", cudaGetErrorString(rc), (std::string(kind) + what).c_str(),
                          __FILE__, __LINE__);
    }
    if (poll.expired()) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%.1f", timeout_s);
      throw InternalError("the GPU work of " + what + " did not finish within " + secs +
                          " s (cluster.dead_after_s) on " + detail::where() +
                          "; the GPU is hung or far slower than expected");
    }
    poll.pause();
  }
}

}  // namespace

Poller::Poller(double timeout_s) : m_start(Clock::now()), m_timeout_s(timeout_s) {}

double Poller::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - m_start).count();
}

bool Poller::expired() const { return m_timeout_s > 0.0 && elapsed_s() > m_timeout_s; }

void Poller::pause() {
  if (elapsed_s() < kSpinS) {
    std::this_thread::yield();
  } else {
    std::this_thread::sleep_for(kSleep);
  }
}

std::uint64_t host_wait_count() noexcept { return g_host_waits.load(std::memory_order_relaxed); }

void note_host_wait() noexcept { g_host_waits.fetch_add(1, std::memory_order_relaxed); }

void wait_stream(cudaStream_t stream, double timeout_s, const std::string& what) {
  wait_for([stream] { return cudaStreamQuery(stream); }, timeout_s, what, "cudaStreamQuery: ");
}

void wait_event(cudaEvent_t event, double timeout_s, const std::string& what) {
  wait_for([event] { return cudaEventQuery(event); }, timeout_s, what, "cudaEventQuery: ");
}

}  // namespace syncopt::cuda
