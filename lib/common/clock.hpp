// The run's wall clock: seconds since a start that every rank sets at the
// same barrier, so that records from different ranks share one time axis.
#pragma once

#include <chrono>

namespace syncopt {

class RunClock {
 public:
  RunClock() : m_start(std::chrono::steady_clock::now()), m_unix_start_s(unix_now()) {}
  // Starts counting from `offset_s` (a resumed run continues its time axis).
  void restart(double offset_s = 0.0) {
    m_start = std::chrono::steady_clock::now();
    m_unix_start_s = unix_now();
    m_offset_s = offset_s;
  }
  double now() const {
    return m_offset_s +
           std::chrono::duration<double>(std::chrono::steady_clock::now() - m_start).count();
  }
  // The calendar time (seconds since the Unix epoch) at which now() reads
  // `run_s`, e.g. a record's time for TensorBoard's wall-time axis. A resumed
  // run's times are placed from its restart, so the break between its parts
  // shows as it was.
  double unix_s(double run_s) const { return m_unix_start_s + (run_s - m_offset_s); }

 private:
  static double unix_now() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
        .count();
  }

  std::chrono::steady_clock::time_point m_start;
  double m_unix_start_s;
  double m_offset_s = 0.0;
};

}  // namespace syncopt
