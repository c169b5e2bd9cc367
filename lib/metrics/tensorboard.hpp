// TensorBoard event files: a run writes runs/<name>/tb/events.out.tfevents.*
// so that `tensorboard --logdir runs` shows runs side by side (train loss, lr,
// steps/s, test accuracy of θ and θ̄, drops, staleness, arrival-time
// histograms). The file is a sequence of TFRecords, each holding one
// serialized Event (schema subset in tensorboard_event.proto); the framing,
// its CRC-32C and the histogram buckets are here so they can be tested alone.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace syncopt::metrics {

// CRC-32C (Castagnoli polynomial, reflected, init and final xor ~0), the
// checksum TFRecord uses: crc32c("123456789") == 0xE3069283.
std::uint32_t crc32c(std::string_view bytes);

// TFRecord stores checksums "masked" (rotated right by 15, plus a constant),
// because a CRC of data that itself contains CRCs is weak.
std::uint32_t masked_crc32c(std::string_view bytes);

// One TFRecord around `data`: uint64 length (little-endian), masked CRC-32C of
// those 8 bytes, data, masked CRC-32C of data; 16 bytes of overhead.
std::string frame_record(std::string_view data);

// A histogram in TensorBoard's HistogramProto layout. bucket[i] counts the
// values in [bucket_limit[i-1], bucket_limit[i]), the first bucket starting at
// min. The limits are TensorFlow's default ones (±1e-12 growing by 10% up to
// ±1e20, then ±DBL_MAX, and 0), so histograms from different steps and runs
// share edges and compare; empty buckets before the first and after the last
// value are left out and runs of empty ones inside are merged into one, so a
// histogram of K arrival times has at most 2K buckets.
struct Histogram {
  double min = 0.0;
  double max = 0.0;
  double num = 0.0;
  double sum = 0.0;
  double sum_squares = 0.0;
  std::vector<double> bucket_limit;
  std::vector<double> bucket;
};

// Non-finite values (NaN, ±inf) are left out: num counts the finite ones.
// No finite value gives num = 0 and one empty bucket at 0, which TensorBoard
// shows as an empty histogram (no buckets at all would break its converter).
Histogram make_histogram(const std::vector<double>& values);

// One events.out.tfevents.<unix time>.<host>.<pid>[.<tag>] file in `dir`
// (created with its parents). Should that name exist (two writers in one
// second), ".1", ".2", ... is appended, so a writer never overwrites a file.
// The first record is the file version ("brain.Event:2"), without which
// TensorBoard treats out-of-order steps as a restart and drops data.
//
// wall_time is seconds since the Unix epoch (TensorBoard's "wall" and
// "relative" axes); step is the x of the "step" axis. Scalars are stored as
// float32, as TensorBoard's format has it. Each call serializes one Event into
// a stdio buffer; the buffer reaches the file on flush(), every few seconds
// of writing, and on destruction, so a live TensorBoard sees data within
// seconds. Not thread-safe: one writer per thread (e.g. per shard, with tag).
//
// Errors (creating, writing, flushing) are OutputError naming the path and
// the system's reason; the destructor never throws and logs instead, so call
// flush() at the end to learn of a failed last write. A moved-from writer may
// only be destroyed or assigned to.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::filesystem::path& dir, const std::string& tag = "");
  ~TensorBoardWriter();
  TensorBoardWriter(TensorBoardWriter&&) noexcept;
  TensorBoardWriter& operator=(TensorBoardWriter&&) noexcept;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void scalar(const std::string& name, std::int64_t step, double value, double wall_time);
  void histogram(const std::string& name, std::int64_t step, const std::vector<double>& values,
                 double wall_time);
  // A text summary (TensorBoard's Text tab renders it as Markdown), as
  // upstream's text_pb() writes one: a string tensor, plugin "text".
  void text(const std::string& name, std::int64_t step, const std::string& markdown,
            double wall_time);
  // The run's hyperparameters for the HParams tab (its session start info:
  // one session named `group`), as upstream's hparams_pb() writes them.
  using HParam = std::variant<double, std::string, bool>;
  void hparams(const std::map<std::string, HParam>& values, const std::string& group,
               double start_time, double wall_time);
  void flush();

  const std::filesystem::path& path() const;

 private:
  // Keeps protobuf's generated headers out of every caller's includes.
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace syncopt::metrics
