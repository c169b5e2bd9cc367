// Step records and their log (see step_record.hpp).
#include "metrics/step_record.hpp"

#include <charconv>
#include <cmath>

#include "common/error.hpp"
#include "metrics/run_board.hpp"

namespace syncopt::metrics {

using nlohmann::json;

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

// One gradient's fields, in sorted order, without its braces.
void put_grad(std::string& out, const GradRecord& g) {
  put_key(out, "accepted");
  out += g.accepted ? "true," : "false,";
  put_key(out, "arrival_s");
  put_double(out, g.arrival_s);
  out += ',';
  put_key(out, "compute_s");
  put_double(out, g.compute_s);
  out += ',';
  if (g.examples > 0) {
    put_key(out, "examples");
    put_int(out, g.examples);
    out += ',';
  }
  if (!g.layer_staleness.empty()) {
    put_key(out, "layer_staleness");
    out += '[';
    for (std::size_t i = 0; i < g.layer_staleness.size(); ++i) {
      if (i > 0) out += ',';
      put_int(out, g.layer_staleness[i]);
    }
    out += "],";
  }
  put_key(out, "loss");
  put_double(out, static_cast<double>(g.loss));
  out += ',';
  if (!g.phases.empty()) {
    put_key(out, "phases");
    out += '{';
    bool first_phase = true;
    for (std::size_t p = 0; p < kPhaseCount; ++p) {
      if (!g.phases.has(static_cast<Phase>(p))) continue;
      if (!first_phase) out += ',';
      first_phase = false;
      put_key(out, kPhaseNames[p]);
      put_double(out, g.phases.s[p]);
    }
    out += "},";
  }
  put_key(out, "seq");
  put_int(out, g.seq);
  out += ',';
  if (g.examples > 0) {
    put_key(out, "skipped");
    put_int(out, g.skipped);
    out += ',';
  }
  put_key(out, "staleness");
  put_int(out, g.staleness);
  out += ',';
  put_key(out, "version");
  put_int(out, g.version);
  out += ',';
  put_key(out, "worker");
  put_int(out, g.worker);
}

}  // namespace

void append_json_line(std::string& out, const StepRecord& r) {
  out += '{';
  if (!r.clock.empty()) {
    put_key(out, "clock");
    out += '"' + r.clock + "\",";
  }
  out += "\"grads\":[";
  bool first = true;
  for (const auto& g : r.grads) {
    out += first ? "{" : ",{";
    first = false;
    put_grad(out, g);
    out += '}';
  }
  out += "],";
  put_key(out, "loss");
  put_double(out, static_cast<double>(r.loss));
  out += ',';
  put_key(out, "lr");
  put_double(out, static_cast<double>(r.lr));
  out += ',';
  if (r.n > 0) {
    put_key(out, "n");
    put_int(out, r.n);
    out += ',';
  }
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
  if (r.wire_bytes > 0) {
    out += ',';
    put_key(out, "wire_bytes");
    put_int(out, r.wire_bytes);
  }
  out += "}\n";
}

StepRecord step_from_json(const json& j, const std::string& origin) {
  try {
    StepRecord r;
    r.step = j.at("step").get<std::uint64_t>();
    r.shard = j.value("shard", 0);
    r.version = j.at("version").get<std::uint64_t>();
    r.t_start = j.at("t_start").get<double>();
    r.t_apply = j.at("t_apply").get<double>();
    r.lr = j.at("lr").get<float>();
    r.loss = j.at("loss").get<float>();
    r.used = j.value("used", 0);
    r.clock = j.value("clock", std::string());
    r.n = j.value("n", 0);
    r.wire_bytes = j.value("wire_bytes", std::uint64_t{0});
    for (const auto& g : j.at("grads")) {
      GradRecord gr;
      gr.worker = g.at("worker").get<int>();
      gr.arrival_s = g.at("arrival_s").get<double>();
      gr.version = g.at("version").get<std::uint64_t>();
      gr.accepted = g.at("accepted").get<bool>();
      gr.staleness = g.at("staleness").get<std::int64_t>();
      gr.compute_s = g.value("compute_s", 0.0);
      gr.loss = g.value("loss", 0.0f);
      gr.seq = g.value("seq", std::uint64_t{0});
      gr.examples = g.value("examples", std::int64_t{0});
      gr.skipped = g.value("skipped", std::int64_t{0});
      if (const auto it = g.find("phases"); it != g.end()) {
        for (std::size_t p = 0; p < kPhaseCount; ++p) {
          if (const auto v = it->find(kPhaseNames[p]); v != it->end() && v->is_number()) {
            gr.phases.set(static_cast<Phase>(p), v->get<double>());
          }
        }
      }
      if (g.contains("layer_staleness")) {
        gr.layer_staleness = g.at("layer_staleness").get<std::vector<std::int64_t>>();
      }
      r.grads.push_back(gr);
    }
    return r;
  } catch (const json::exception& e) {
    throw DataError(origin + ": not a step record (" + e.what() + ")");
  }
}

StepLog StepLog::to_file(const std::filesystem::path& path) {
  StepLog log;
  log.m_file = std::make_unique<JsonlWriter>(path);
  return log;
}

StepLog StepLog::resume_file(const std::filesystem::path& path, std::uint64_t offset) {
  StepLog log;
  log.m_file = std::make_unique<JsonlWriter>(JsonlWriter::resume_at(path, offset));
  return log;
}

StepLog StepLog::in_memory() { return StepLog{}; }

void StepLog::set_board(std::shared_ptr<RunBoard> board) {
  if (!m_file && board) throw InternalError("StepLog::set_board on an in-memory log");
  m_board = std::move(board);
}

void StepLog::write(const StepRecord& r) {
  if (m_file) {
    m_line.clear();
    append_json_line(m_line, r);
    m_file->write_raw(m_line);
    if (m_board) m_board->step(r);
  } else {
    append_json_line(m_buffer, r);
  }
}

void StepLog::flush() {
  if (m_file) m_file->flush();
  if (m_board) m_board->flush();
}

// Only shard 0's records reach the board: the others' arrive here as text at
// the end of the run, their steps repeat shard 0's, and TensorBoard shows
// one curve per tag and run; their timings are in steps.jsonl and the report.
void StepLog::append_lines(const std::string& lines) {
  if (!m_file) throw InternalError("StepLog::append_lines on an in-memory log");
  m_file->write_raw(lines);
}

}  // namespace syncopt::metrics
