// The liveness decisions of comm/liveness.hpp, without MPI: who is dead
// after dead_after_s of silence, and the pause that must not count as a
// death (a stopped or suspended job: the timers restart).
#include <catch2/catch.hpp>

#include "comm/liveness.hpp"

using namespace syncopt::comm;

TEST_CASE("liveness: silence past dead_after_s is death, each peer declared once", "[liveness]") {
  LivenessCore core(3, 3.0, 0.0);
  core.heard(0, 1.0);
  core.heard(1, 2.5);
  CHECK(core.newly_dead(2.9).empty());
  CHECK(core.newly_dead(3.0) == std::vector<int>{2});  // never heard since the start
  CHECK(core.newly_dead(3.9).empty());
  CHECK(core.newly_dead(4.0) == std::vector<int>{0});
  CHECK(core.newly_dead(100.0) == std::vector<int>{1});
  CHECK(core.newly_dead(200.0).empty());
  CHECK(core.dead_count() == 3);
}

TEST_CASE("liveness: a restart gives every live peer a full window, not the dead", "[liveness]") {
  LivenessCore core(3, 3.0, 0.0);
  core.retire(1);
  CHECK(core.newly_dead(3.0) == std::vector<int>{0, 2});
  LivenessCore paused(3, 3.0, 0.0);
  paused.heard(0, 0.5);
  // The rank was stopped for 9 s: it hears nothing, but nobody is dead.
  paused.restart(9.5);
  CHECK(paused.newly_dead(9.5).empty());
  CHECK(paused.newly_dead(12.4).empty());
  CHECK(paused.newly_dead(12.5) == std::vector<int>{0, 1, 2});
  // A restart never revives a dead peer nor moves a timer back.
  paused.restart(5.0);
  CHECK(paused.last_heard(0) == 9.5);
  CHECK_FALSE(paused.alive(0));
}

TEST_CASE("pause detector: a gap of the monotonic clock, or a boot clock ahead of it",
          "[liveness]") {
  PauseDetector d(1.5);
  CHECK(d.tick(10.0, 110.0) == 0.0);  // the first look has nothing to compare
  CHECK(d.tick(10.4, 110.4) == 0.0);  // a round on time
  CHECK(d.tick(11.8, 111.8) == 0.0);  // late, but under the threshold
  // SIGSTOP for 9 s: both clocks ran, no round happened.
  CHECK(d.tick(20.8, 120.8) == Approx(9.0));
  CHECK(d.tick(21.2, 121.2) == 0.0);
  // A suspended machine: the monotonic clock stood still, the boot clock
  // ran 30 s.
  CHECK(d.tick(21.6, 151.6) == Approx(30.0));
  CHECK(d.tick(22.0, 152.0) == 0.0);
}

TEST_CASE("pause threshold: above the heartbeat interval, below dead_after_s", "[liveness]") {
  for (const double dead_after : {0.5, 2.0, 3.0, 60.0, 600.0}) {
    INFO("dead_after_s " << dead_after);
    const double t = pause_threshold_s(dead_after);
    CHECK(t >= 4 * heartbeat_interval_s(dead_after));
    // Any pause that can make a peer look dead (silence of dead_after_s,
    // the peer's last beat up to one interval before the pause) is seen.
    CHECK(t < dead_after - heartbeat_interval_s(dead_after));
  }
}
