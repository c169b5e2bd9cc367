// Writes two small runs of TensorBoard event files with known values for
// read_events.py, which loads them with the real TensorBoard reader and
// compares. Usage: write_sample ROOT  -> ROOT/<run>/tb/events.out.tfevents.*
// and, on stdout, JSON of exactly what was written (doubles, before the
// float32 rounding of scalars, which the reader side works out for itself).
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/tensorboard.hpp"

using syncopt::metrics::TensorBoardWriter;

namespace {

// Mirrors each write into `expected`, so the values live in one place.
class Recorder {
 public:
  Recorder(const std::filesystem::path& dir, const std::string& tag, nlohmann::json& expected)
      : m_writer(dir, tag), m_expected(expected) {}

  void scalar(const std::string& name, std::int64_t step, double value, double wall_time) {
    m_writer.scalar(name, step, value, wall_time);
    m_expected["scalars"][name].push_back({step, wall_time, value});
  }
  // nlohmann writes NaN and inf as null, which the reader takes as "left out".
  void histogram(const std::string& name, std::int64_t step, const std::vector<double>& values,
                 double wall_time) {
    m_writer.histogram(name, step, values, wall_time);
    m_expected["histograms"][name].push_back({step, wall_time, values});
  }
  void flush() { m_writer.flush(); }

 private:
  TensorBoardWriter m_writer;
  nlohmann::json& m_expected;
};

void write_sync_run(const std::filesystem::path& dir, nlohmann::json& expected) {
  Recorder tb(dir, "", expected);
  const double t0 = 1700000000.25;  // wall times as a trainer passes them: epoch seconds
  for (int s = 0; s < 12; ++s) {
    const double t = t0 + 0.125 * s;
    // 0.0 at step 0: a scalar of zero must still be written (oneof presence).
    tb.scalar("train/loss", s, s == 0 ? 0.0 : 2.302585092994046 / (1.0 + s), t);
    tb.scalar("train/lr", s, 0.05 * std::pow(0.94, s), t);
    tb.scalar("train/steps_per_s", s, 123.456789 + s, t);
    tb.scalar("sync/drops", s, static_cast<double>(s % 3), t);
    // Arrival times of the K = 5 gradients: the k-th one's, including a
    // straggler, and a step where two arrived at the same instant.
    std::vector<double> arrivals = {0.0123, 0.0131, 0.0131 + 0.001 * s, 0.0502, 0.75 + 0.1 * s};
    if (s == 4) arrivals = {0.02, 0.02, 0.02, 0.02, 0.02};
    tb.histogram("sync/arrival_s", s, arrivals, t);
  }
  tb.scalar("eval/test_acc", 11, 0.8125, t0 + 2.0);
  tb.scalar("eval/test_acc_ema", 11, 0.83203125, t0 + 2.0);
  // Edge cases: a huge step (multi-byte varint), negative and tiny values,
  // an empty histogram, and one with values that must be left out.
  const std::int64_t big_step = std::int64_t{1} << 40;
  tb.scalar("edge/value", 1, -1.0e-30, t0);
  tb.scalar("edge/value", 2, 3.0e38, t0);
  tb.scalar("edge/value", big_step, -7.5, t0 + 9.0);
  tb.histogram("edge/histogram", 1, {}, t0);
  tb.histogram("edge/histogram", 2,
               {-3.5, -3.5, 0.0, 1e-13, 2.0, std::numeric_limits<double>::quiet_NaN(),
                std::numeric_limits<double>::infinity(), 1e25},
               t0);
  tb.histogram("edge/histogram", big_step, {42.0}, t0 + 9.0);
  tb.flush();
}

void write_async_run(const std::filesystem::path& dir, nlohmann::json& expected) {
  Recorder tb(dir, "shard0", expected);
  const double t0 = 1700000100.5;
  for (int s = 0; s < 8; ++s) {
    const double t = t0 + 0.1 * s;
    tb.scalar("train/loss", s, 2.0 - 0.2 * s, t);
    tb.scalar("async/staleness_mean", s, 0.5 * s, t);
    tb.histogram("async/staleness", s, {0, 0, 1, 3, 3, static_cast<double>(s)}, t);
  }
  // No flush: the destructor must get the last events to the file.
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: write_sample ROOT\n";
    return 64;
  }
  try {
    const std::filesystem::path root = argv[1];
    nlohmann::json expected;
    write_sync_run(root / "sync-b1" / "tb", expected["runs"]["sync-b1"]);
    write_async_run(root / "async" / "tb", expected["runs"]["async"]);
    std::cout << expected.dump() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "write_sample: " << e.what() << "\n";
    return 70;
  }
  return 0;
}
