// Stop-signal flag (see signals.hpp).
//
// The stop signals are blocked in every thread, and one thread of ours
// takes them with sigwait(). No handler ever interrupts a thread: an
// asynchronous handler running on a compute thread's stack was seen to
// corrupt the heap of oneDNN convolutions now and then (a JIT kernel that
// keeps data below its stack pointer would be overwritten by the signal
// frame), so none is installed.
#include "common/signals.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

namespace syncopt {

namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_at_boundaries{false};
std::atomic<int> g_dumps{0};

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  sigaddset(&set, SIGUSR2);
  return set;
}

void wait_for_signals() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) continue;
    if (sig == SIGUSR2) {
      // A request to dump the flight recorder, whenever the role loop looks.
      g_dumps.fetch_add(1);
      continue;
    }
    if (!g_at_boundaries.load()) {
      // Still loading: no step to stop at, nothing written to keep.
      std::fprintf(stderr,
                   "\nsyncopt: %s before training began (while the config and data load): "
                   "nothing was written; exiting with %d\n",
                   signal_name(sig).c_str(), 128 + sig);
      std::fflush(nullptr);
      std::_Exit(128 + sig);
    }
    int expected = 0;
    if (!g_signal.compare_exchange_strong(expected, sig) && sig == SIGINT) {
      // A second Ctrl-C: the user wants out now.
      std::fprintf(stderr, "\nsyncopt: second SIGINT, exiting at once\n");
      std::_Exit(130);
    }
  }
}

}  // namespace

void install_stop_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Before any other thread exists (MPI's, OpenMP's, ours), so that all
    // of them inherit the mask.
    const sigset_t set = stop_set();
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    // A write to a closed pipe fails (EPIPE) instead of killing the run.
    std::signal(SIGPIPE, SIG_IGN);
    std::thread(wait_for_signals).detach();
  });
}

void stops_at_step_boundaries() { g_at_boundaries.store(true); }

int stop_signal() { return g_signal.load(std::memory_order_relaxed); }

int dump_requests() { return g_dumps.load(std::memory_order_relaxed); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGINT:
      return "SIGINT";
    case SIGHUP:
      return "SIGHUP";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "signal " + std::to_string(sig);
  }
}

void raise_stop(int sig) { g_signal.store(sig, std::memory_order_relaxed); }

}  // namespace syncopt
