// The run's wall clock: seconds since a start that every rank sets at the
// same barrier, so that records from different ranks share one time axis.
#pragma once

#include <chrono>

namespace syncopt {

class RunClock {
 public:
  RunClock() : m_start(std::chrono::steady_clock::now()) {}
  // Starts counting from `offset_s` (a resumed run continues its time axis).
  void restart(double offset_s = 0.0) {
    m_start = std::chrono::steady_clock::now();
    m_offset_s = offset_s;
  }
  double now() const {
    return m_offset_s +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  }

 private:
  std::chrono::steady_clock::time_point m_start;
  double m_offset_s = 0.0;
};

}  // namespace syncopt
