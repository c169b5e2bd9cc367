// spdlog set-up with a rank/role prefix ("[r3 worker]"): rank 0 logs at info,
// other ranks at warn unless verbose. The status line: one line at the
// bottom of a terminal that refreshes in place (metrics::Progress draws it);
// a log message first erases it, so that no message lands in its middle.
#pragma once

#include <string>

namespace syncopt {

void setup_logging(int rank, const std::string& role, bool verbose, bool quiet);

// Draws `line` on stderr in place of the previous status line ("\r", the
// line, erase to its end; no newline).
void draw_status_line(const std::string& line);
// Erases the status line if one is drawn (the cursor back at its start).
void clear_status_line();
// Ends the status line if one is drawn: it stays, and output goes on below.
void end_status_line();

}  // namespace syncopt
