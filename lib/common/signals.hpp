// Stop signals (docs/design.md §10): SIGTERM, SIGUSR1, SIGINT and SIGHUP (a
// closed terminal, a dropped ssh session) only set a flag; the trainers look
// at it at step boundaries, agree to stop, save a checkpoint and exit 75
// (EX_TEMPFAIL: "requeue me"). A second SIGINT ends the process at once
// (130), for an impatient Ctrl-C. Until a trainer takes over
// (stops_at_step_boundaries), while the config and data load, there is no
// step boundary to wait for: a stop signal ends the process at once with
// 128 + its number, nothing having been written (a config on a FIFO or a
// hung NFS mount would otherwise swallow it). SIGPIPE is ignored: a closed
// pipe (syncopt train ... 2>&1 | head -1) costs the output, not the run.
// SIGUSR2 stops nothing: it is counted, and the ranks dump their flight
// recorder when they next look (comm/flight.hpp).
#pragma once

#include <string>

namespace syncopt {

// Blocks the stop signals and starts the thread that takes them
// (idempotent). Call first thing in main, before any other thread starts.
void install_stop_handlers();
// From now on stop signals wait for a step boundary (a trainer checks
// stop_signal()); before, one ends the process at once. Call it where a
// trainer is about to write its run directory.
void stops_at_step_boundaries();
// The stop signal received so far (the first one), or 0.
int stop_signal();
// SIGUSR2s received so far (each asks for a flight-recorder dump).
int dump_requests();
// "SIGTERM", "SIGUSR1", "SIGINT", "SIGHUP", or "signal N".
std::string signal_name(int sig);
// For tests: behave as if `sig` had arrived.
void raise_stop(int sig);

}  // namespace syncopt
