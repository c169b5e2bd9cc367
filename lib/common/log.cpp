// Logging set-up (see log.hpp).
#include "common/log.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

namespace syncopt {

void setup_logging(int rank, const std::string& role, bool verbose, bool quiet) {
  // stderr, so stdout stays for results (summary, --dry-run tables).
  auto logger = spdlog::stderr_logger_mt("syncopt-r" + std::to_string(rank));
  logger->set_pattern("[%H:%M:%S r" + std::to_string(rank) + " " + role + "] %^%l%$: %v");
  spdlog::level::level_enum level = rank == 0 ? spdlog::level::info : spdlog::level::warn;
  if (verbose) level = spdlog::level::debug;
  if (quiet) level = spdlog::level::warn;
  logger->set_level(level);
  spdlog::set_default_logger(logger);
}

}  // namespace syncopt
