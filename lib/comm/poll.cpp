// Polling waits with back-off (see poll.hpp).
#include "comm/poll.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

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
  double us =
      std::min(kMaxSleepUs, 20.0 * static_cast<double>(1 << std::min(m_idle - kSpinTests, 5)));
  if (limit_s >= 0.0) us = std::min(us, limit_s * 1e6);
  if (us > 0.0) std::this_thread::sleep_for(std::chrono::duration<double, std::micro>(us));
}

}  // namespace syncopt::comm
