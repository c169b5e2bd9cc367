// Logging set-up and the status line (see log.hpp).
#include "common/log.hpp"

#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <mutex>

namespace syncopt {

namespace {

std::mutex g_status_mutex;
bool g_status_drawn = false;  // guarded by g_status_mutex

// Placed before the stderr sink: erases a drawn status line, so that the
// message starts at the beginning of an empty line (the next draw puts the
// status line back below it).
class StatusLineGuard final : public spdlog::sinks::base_sink<spdlog::details::null_mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg&) override { clear_status_line(); }
  void flush_() override {}
};

}  // namespace

void setup_logging(int rank, const std::string& role, bool verbose, bool quiet) {
  // stderr, so stdout stays for results (summary, --dry-run tables).
  auto guard = std::make_shared<StatusLineGuard>();
  auto out = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("syncopt-r" + std::to_string(rank),
                                                 spdlog::sinks_init_list{guard, out});
  logger->set_pattern("[%H:%M:%S r" + std::to_string(rank) + " " + role + "] %^%l%$: %v");
  spdlog::level::level_enum level = rank == 0 ? spdlog::level::info : spdlog::level::warn;
  if (verbose) level = spdlog::level::debug;
  if (quiet) level = spdlog::level::warn;
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

void draw_status_line(const std::string& line) {
  std::lock_guard lock(g_status_mutex);
  std::fprintf(stderr, "\r%s\033[K", line.c_str());
  std::fflush(stderr);
  g_status_drawn = true;
}

void clear_status_line() {
  std::lock_guard lock(g_status_mutex);
  if (!g_status_drawn) return;
  std::fputs("\r\033[K", stderr);
  std::fflush(stderr);
  g_status_drawn = false;
}

void end_status_line() {
  std::lock_guard lock(g_status_mutex);
  if (!g_status_drawn) return;
  std::fputs("\n", stderr);
  std::fflush(stderr);
  g_status_drawn = false;
}

}  // namespace syncopt
