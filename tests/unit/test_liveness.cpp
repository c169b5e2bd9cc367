// The liveness decisions of comm/liveness.hpp, without MPI: who is dead
// after dead_after_s of silence, and the pause that must not count as a
// death (a stopped or suspended job: the timers restart, here and, told by
// a heartbeat's kFlagPaused, at the peers).
#include <catch2/catch.hpp>

#include "comm/liveness.hpp"
#include "comm/protocol.hpp"

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

TEST_CASE("liveness: a peer's paused flag restarts every timer, so the peers still waking live",
          "[liveness]") {
  // A watcher of three peers, dead_after_s 3. The job is stopped at 1 s and
  // continued at 10 s, and this watcher did not see the pause itself (it was
  // not stopped, or its heartbeat thread had ended with its part). At 10 s
  // peer 0's first beat is in, flagged; peers 1 and 2 have not beaten yet.
  const auto paused_job = [](std::uint32_t flag) {
    LivenessCore core(3, 3.0, 0.0);
    for (int p = 0; p < 3; ++p) core.heartbeat(p, 1.0, 0);
    core.heartbeat(0, 10.0, flag);
    return core;
  };
  LivenessCore told = paused_job(kFlagPaused);
  CHECK(told.newly_dead(10.0).empty());
  CHECK(told.peer_pauses() == 1);
  CHECK(told.last_heard(2) == 10.0);
  // Peer 1 wakes a little later, its beat flagged too: another full window.
  told.heartbeat(1, 10.4, kFlagPaused);
  told.heartbeat(0, 12.0, 0);
  told.heartbeat(1, 12.4, 0);
  CHECK(told.newly_dead(13.3).empty());
  // Peer 2 never comes back: dead one window after the last restart (the
  // cost of a pause, docs/design.md §10), and a later flag cannot revive it.
  CHECK(told.newly_dead(13.4) == std::vector<int>{2});
  told.heartbeat(0, 13.5, kFlagPaused);
  CHECK_FALSE(told.alive(2));
  CHECK(told.newly_dead(16.0).empty());
  CHECK(told.peer_pauses() == 3);
  // The same beats without the flag: peers 1 and 2, waking, taken for dead.
  LivenessCore untold = paused_job(0);
  CHECK(untold.newly_dead(10.0) == std::vector<int>{1, 2});
  CHECK(untold.peer_pauses() == 0);
  // Any other flag is no pause.
  LivenessCore split = paused_job(kFlagSplit);
  CHECK(split.newly_dead(10.0) == std::vector<int>{1, 2});
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
