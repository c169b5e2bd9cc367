// The idle loop's back-off schedule (see poll.hpp).
#include "sim/poll.hpp"

#include <algorithm>
#include <cmath>

namespace syncopt::sim {

namespace {
constexpr double kFirstSleepS = 40e-6;  // comm/poll.cpp: 20 us * 2 on the first sleep
}  // namespace

double next_poll(double idle_since, double t, double poll_max_s, double u) {
  return t + u * sleep_at(t - idle_since, poll_max_s);
}

double sleep_at(double idle_s, double poll_max_s) {
  if (poll_max_s <= 0.0 || idle_s <= 0.0) return 0.0;
  double check = 0.0;
  for (double sleep = kFirstSleepS; sleep < poll_max_s; sleep *= 2.0) {
    check += sleep;
    if (check >= idle_s) return sleep;
  }
  return poll_max_s;
}

}  // namespace syncopt::sim
