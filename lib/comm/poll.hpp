// Waiting without burning a core. Open MPI's blocking waits spin; on an
// oversubscribed node (7 ranks on 2 cores) a spinning parameter server or
// idle worker steals the cycles the computing workers need. So the request
// sets (requests.hpp) test, and when nothing completed, sleep with an
// exponential back-off (capped well below a training step, so it adds
// little latency).
#pragma once

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

// Sleep `seconds` without spinning.
void sleep_s(double seconds);

}  // namespace syncopt::comm
