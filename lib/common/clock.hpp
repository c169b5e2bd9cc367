// The run's wall clock: seconds since a start that every rank sets at the
// same barrier, so that records from different ranks share one time axis.
#pragma once

#include <chrono>

namespace syncopt {

class RunClock {
 public:
  RunClock() : m_start(std::chrono::steady_clock::now()) {}
  void restart() { m_start = std::chrono::steady_clock::now(); }
  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  }

 private:
  std::chrono::steady_clock::time_point m_start;
};

}  // namespace syncopt
