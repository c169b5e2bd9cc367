// Step records and their log (see step_record.hpp).
#include "metrics/step_record.hpp"

#include "common/error.hpp"
#include "metrics/run_board.hpp"

namespace syncopt::metrics {

using nlohmann::json;

json to_json(const StepRecord& r) {
  json grads = json::array();
  for (const auto& g : r.grads) {
    grads.push_back({{"worker", g.worker},
                     {"arrival_s", g.arrival_s},
                     {"version", g.version},
                     {"accepted", g.accepted},
                     {"staleness", g.staleness},
                     {"compute_s", g.compute_s},
                     {"loss", g.loss},
                     {"seq", g.seq}});
  }
  json j = {{"step", r.step},       {"shard", r.shard},     {"t_start", r.t_start},
            {"t_apply", r.t_apply}, {"version", r.version}, {"lr", r.lr},
            {"loss", r.loss},       {"used", r.used},       {"grads", std::move(grads)}};
  if (!r.clock.empty()) j["clock"] = r.clock;
  if (r.n > 0) j["n"] = r.n;
  return j;
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
    m_file->write(to_json(r));
    if (m_board) m_board->step(r);
  } else {
    m_buffer += to_json(r).dump();
    m_buffer += '\n';
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
