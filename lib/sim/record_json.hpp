// A step record as one JSON line, fast: the same object metrics::to_json()
// builds (keys in the same sorted order, numbers that read back to the same
// values; a unit test holds the two equal), written straight into a string.
// A simulation of a thousand workers records ten million gradients; building
// a json object per gradient would take most of its time.
#pragma once

#include <string>

#include "metrics/step_record.hpp"

namespace syncopt::sim {

// Appends `r` as one line ("...}\n"), with "clock": "simulated" when
// `simulated`.
void append_json_line(std::string& out, const metrics::StepRecord& r, bool simulated);

}  // namespace syncopt::sim
