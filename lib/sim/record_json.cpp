// Step records as JSON lines (see record_json.hpp).
#include "sim/record_json.hpp"

#include <charconv>
#include <cmath>
#include <cstdint>

namespace syncopt::sim {

namespace {

template <class Int>
void put_int(std::string& out, Int v) {
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, res.ptr);
}

// Shortest text that reads back to `v`; a float stays a float ("2.0"), and a
// value JSON cannot hold is null, as nlohmann writes it.
void put_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  const std::string_view text(buf, static_cast<std::size_t>(res.ptr - buf));
  out += text;
  if (text.find_first_of(".e") == std::string_view::npos) out += ".0";
}

void put_key(std::string& out, const char* key) {
  out += '"';
  out += key;
  out += "\":";
}

}  // namespace

void append_json_line(std::string& out, const metrics::StepRecord& r, bool simulated) {
  out += '{';
  if (simulated) out += "\"clock\":\"simulated\",";
  out += "\"grads\":[";
  bool first = true;
  for (const auto& g : r.grads) {
    out += first ? "{" : ",{";
    first = false;
    put_key(out, "accepted");
    out += g.accepted ? "true," : "false,";
    put_key(out, "arrival_s");
    put_double(out, g.arrival_s);
    out += ',';
    put_key(out, "compute_s");
    put_double(out, g.compute_s);
    out += ',';
    put_key(out, "loss");
    put_double(out, static_cast<double>(g.loss));
    out += ',';
    put_key(out, "seq");
    put_int(out, g.seq);
    out += ',';
    put_key(out, "staleness");
    put_int(out, g.staleness);
    out += ',';
    put_key(out, "version");
    put_int(out, g.version);
    out += ',';
    put_key(out, "worker");
    put_int(out, g.worker);
    out += '}';
  }
  out += "],";
  put_key(out, "loss");
  put_double(out, static_cast<double>(r.loss));
  out += ',';
  put_key(out, "lr");
  put_double(out, static_cast<double>(r.lr));
  out += ',';
  put_key(out, "shard");
  put_int(out, r.shard);
  out += ',';
  put_key(out, "step");
  put_int(out, r.step);
  out += ',';
  put_key(out, "t_apply");
  put_double(out, r.t_apply);
  out += ',';
  put_key(out, "t_start");
  put_double(out, r.t_start);
  out += ',';
  put_key(out, "used");
  put_int(out, r.used);
  out += ',';
  put_key(out, "version");
  put_int(out, r.version);
  out += "}\n";
}

}  // namespace syncopt::sim
