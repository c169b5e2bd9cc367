// The idle shard loop's back-off in simulated time (comm/poll.cpp): after a
// pass the real loop tests its receives at once, then sleeps 40, 80, 160,
// ... us, capped at poll_max_s, between tests; messages that arrive during a
// sleep are taken together at its end. poll_max_s = 0 models a loop that
// takes every message the moment it arrives. The sleep in progress at an
// idle time is the first of 40, 80, 160, ... us (cumulated: 40, 120, 280,
// ...) that ends at or after it; beyond the cap, poll_max_s.
#pragma once

namespace syncopt::sim {

// When the loop, idle since `idle_since`, next tests for a message that
// arrives at `t`: t + u * sleep_at(t - idle_since), u uniform in [0, 1).
// Real sleeps overshoot by a scheduler's whim (more so on an oversubscribed
// node), so the test falls at a random point of the sleep in progress, not
// on a fixed grid; messages arriving before it join the same pass.
double next_poll(double idle_since, double t, double poll_max_s, double u);

// The length of the sleep in progress `idle_s` seconds after the loop went
// idle (0 while it still spins): a message arriving then waits half of it
// on average, which fit.hpp takes out of the measured overheads.
double sleep_at(double idle_s, double poll_max_s);

}  // namespace syncopt::sim
