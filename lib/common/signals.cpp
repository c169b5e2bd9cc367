// Stop-signal flag (see signals.hpp).
#include "common/signals.hpp"

#include <signal.h>

#include <csignal>

#include <atomic>

namespace syncopt {

namespace {

std::atomic<int> g_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "a signal handler needs a lock-free flag");

extern "C" void on_stop_signal(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig) && sig == SIGINT) {
    // A second Ctrl-C: the user wants out now.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
  }
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // MPI and file calls are not interrupted by the flag
  for (const int sig : {SIGTERM, SIGUSR1, SIGINT}) sigaction(sig, &sa, nullptr);
}

int stop_signal() { return g_signal.load(std::memory_order_relaxed); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "signal " + std::to_string(sig);
  }
}

void raise_stop(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace syncopt
