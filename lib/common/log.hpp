// spdlog set-up with a rank/role prefix ("[r3 worker]"): rank 0 logs at info,
// other ranks at warn unless verbose.
#pragma once

#include <string>

namespace syncopt {

void setup_logging(int rank, const std::string& role, bool verbose, bool quiet);

}  // namespace syncopt
