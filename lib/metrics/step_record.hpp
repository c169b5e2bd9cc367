// The step record (docs/design.md §8 steps.jsonl): one per applied update per
// shard, in every mode, with every gradient that reached the shard during
// the step. One type and one writer, so local, allreduce and parameter-server
// records cannot drift apart.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/records.hpp"

namespace syncopt::metrics {

// What a rank spent a step on (docs/outputs.md, grads[].phases), in
// seconds: a worker's data, forward, backward, waiting for parameters
// (wait) and sending; an allreduce rank's data, compute and reduce. The
// names in alphabetical order, as the JSON writes them. A straggler's
// injected slowness counts in the phase it slows (compute, or data).
enum class Phase { kBackward, kCompute, kData, kForward, kReduce, kSend, kWait };
inline constexpr std::size_t kPhaseCount = 7;
inline constexpr std::array<const char*, kPhaseCount> kPhaseNames{
    "backward", "compute", "data", "forward", "reduce", "send", "wait"};
// Phases in which a rank waits for the others: not its own work, so they
// never make it the slow one (a rank that waits for a straggler is not).
inline bool waits_for_others(Phase p) { return p == Phase::kReduce || p == Phase::kWait; }

struct PhaseTimes {
  std::array<double, kPhaseCount> s{};
  unsigned mask = 0;  // the phases present
  void set(Phase p, double v) {
    s[static_cast<std::size_t>(p)] = v;
    mask |= 1u << static_cast<unsigned>(p);
  }
  bool has(Phase p) const { return (mask & (1u << static_cast<unsigned>(p))) != 0; }
  double get(Phase p) const { return s[static_cast<std::size_t>(p)]; }
  bool empty() const { return mask == 0; }
};

struct GradRecord {
  int worker = 0;
  double arrival_s = 0.0;  // since the step's start
  std::uint64_t version = 0;
  bool accepted = false;
  std::int64_t staleness = 0;
  double compute_s = 0.0;
  float loss = 0.0f;
  std::uint64_t seq = 0;  // the worker's own gradient counter (matches across shards)
  // Async and ssp with the pipelined exchange (each bucket of layers applied
  // on arrival): the staleness of every bucket of the shard's slice, in
  // forward order (bucket 0 holds the slice's first layers; its staleness
  // is `staleness`). Empty otherwise, and then left out of the JSON.
  std::vector<std::int64_t> layer_staleness = {};
  // allreduce with micro-batches (train.micro_batch): the examples this
  // rank computed, and those of its batch it did not (the compute budget
  // cut them). 0 and left out of the JSON otherwise.
  std::int64_t examples = 0;
  std::int64_t skipped = 0;
  // The rank's phases of the step that made this gradient; empty (and left
  // out of the JSON) where not measured (the simulator).
  PhaseTimes phases = {};
};

struct StepRecord {
  std::uint64_t step = 0;  // 1-based index of the update
  int shard = 0;
  std::uint64_t version = 0;  // the version the update was applied to
  double t_start = 0.0;       // run-relative seconds
  double t_apply = 0.0;
  float lr = 0.0f;
  float loss = 0.0f;  // mean loss of the applied gradients
  int used = 0;       // gradients averaged
  int n = 0;          // train.backups = auto: the N chosen for this update (else 0)
  // Payload bytes of gradients received and parameters sent by this shard
  // since its previous record (exchange.wire decides 4 or 2 bytes a value);
  // 0 and left out of the JSON where nothing was measured (the simulator).
  std::uint64_t wire_bytes = 0;
  // The clock of t_start, t_apply and arrival_s: "" (wall, the default,
  // left out of the JSON), "virtual" (train.clock = virtual: modelled
  // finish times) or "simulated" (syncopt simulate).
  std::string clock;
  std::vector<GradRecord> grads;
};

// The one writer of step records (real runs and the simulator): `r` as one
// JSON line ("{...}\n") appended to `out`, keys in sorted order, numbers
// that read back to the same values, "clock" only when set and "n" only
// when adaptive b chose it. Written straight into the string: a simulation
// of a thousand workers records ten million gradients, and building a json
// object per gradient would take most of its time.
void append_json_line(std::string& out, const StepRecord& r);
// DataError naming `origin` when a field is missing or of the wrong type.
StepRecord step_from_json(const nlohmann::json& j, const std::string& origin);

class RunBoard;

// Where step records go: streamed to steps.jsonl (the writing rank), or
// kept as JSON lines in memory (other shards, whose records travel to the
// writing rank at the end).
class StepLog {
 public:
  static StepLog to_file(const std::filesystem::path& path);
  // A resumed run: the file cut back to its checkpoint's `offset`.
  static StepLog resume_file(const std::filesystem::path& path, std::uint64_t offset);
  static StepLog in_memory();

  // A file log also writes each record to `board` (TensorBoard events;
  // nullptr: none), which it may share with the rank's EvalLog.
  void set_board(std::shared_ptr<RunBoard> board);

  void write(const StepRecord& r);
  void flush();
  // The buffered lines (in_memory) — empty for a file log.
  const std::string& buffered() const { return m_buffer; }
  // A resumed in-memory log: the lines it held at the checkpoint.
  void restore_buffer(std::string lines) { m_buffer = std::move(lines); }
  // Appends JSON lines written elsewhere (other shards' records) to the file;
  // they do not reach the board (see step_record.cpp).
  void append_lines(const std::string& lines);
  // Bytes of the file once flushed (a checkpoint's record offset); 0 in memory.
  std::uint64_t bytes() const { return m_file ? m_file->bytes() : 0; }

 private:
  StepLog() = default;
  std::unique_ptr<JsonlWriter> m_file;
  std::string m_buffer;
  std::string m_line;  // a file log's line being written (its capacity reused)
  std::shared_ptr<RunBoard> m_board;
};

}  // namespace syncopt::metrics
