// Stop signals (docs/design.md §10): SIGTERM, SIGUSR1 and SIGINT only set a flag;
// the trainers look at it at step boundaries, agree to stop, save a
// checkpoint and exit 75 (EX_TEMPFAIL: "requeue me"). A second SIGINT ends
// the process at once (130), for an impatient Ctrl-C.
#pragma once

#include <string>

namespace syncopt {

// Blocks the stop signals and starts the thread that takes them
// (idempotent). Call first thing in main, before any other thread starts.
void install_stop_handlers();
// The stop signal received so far (the first one), or 0.
int stop_signal();
// "SIGTERM", "SIGUSR1", "SIGINT", or "signal N".
std::string signal_name(int sig);
// For tests: behave as if `sig` had arrived.
void raise_stop(int sig);

}  // namespace syncopt
