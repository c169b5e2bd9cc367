// TensorBoard event-file writer, TFRecord framing and histogram buckets (see
// tensorboard.hpp). Events are built with the protobuf classes protoc
// generates from tensorboard_event.proto at build time.
#include "metrics/tensorboard.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <system_error>
#include <utility>

#include "common/error.hpp"
#include "metrics/tensorboard_event.pb.h"

namespace syncopt::metrics {

namespace fs = std::filesystem;

namespace {

// Byte-at-a-time table for the reflected Castagnoli polynomial. Records are
// tens of bytes, so a faster CRC (slicing-by-8, SSE4.2) would not show.
constexpr std::array<std::uint32_t, 256> make_crc32c_table() {
  std::array<std::uint32_t, 256> table{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    table[i] = c;
  }
  return table;
}
constexpr auto kCrc32cTable = make_crc32c_table();

constexpr std::uint32_t kCrcMaskDelta = 0xA282EAD8u;
const char* const kFileVersion = "brain.Event:2";
// How long written events may sit in the stdio buffer: TensorBoard polls
// every few seconds, so a live view lags by at most about this much.
constexpr auto kFlushEvery = std::chrono::seconds(5);

void put_le(char* out, std::uint64_t v, int nbytes) {
  for (int i = 0; i < nbytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xFFu);
}

// TensorFlow's default histogram limits (its Histogram class, also used by
// tf.summary.histogram v1 and TensorBoardX): ±1e-12 · 1.1^k below ±1e20, then
// ±DBL_MAX, and 0 in the middle; 3,097 limits, ~10% relative resolution.
const std::vector<double>& default_bucket_limits() {
  static const std::vector<double> limits = [] {
    std::vector<double> positive;
    for (double v = 1e-12; v < 1e20; v *= 1.1) positive.push_back(v);
    positive.push_back(DBL_MAX);
    std::vector<double> all;
    all.reserve(2 * positive.size() + 1);
    for (auto it = positive.rbegin(); it != positive.rend(); ++it) all.push_back(-*it);
    all.push_back(0.0);
    all.insert(all.end(), positive.begin(), positive.end());
    return all;
  }();
  return limits;
}

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf.data();
}

}  // namespace

std::uint32_t crc32c(std::string_view bytes) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (const char ch : bytes) {
    c = kCrc32cTable[(c ^ static_cast<unsigned char>(ch)) & 0xFFu] ^ (c >> 8);
  }
  return c ^ 0xFFFFFFFFu;
}

std::uint32_t masked_crc32c(std::string_view bytes) {
  const std::uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + kCrcMaskDelta;
}

std::string frame_record(std::string_view data) {
  std::string out(data.size() + 16, '\0');
  put_le(out.data(), data.size(), 8);
  put_le(out.data() + 8, masked_crc32c(std::string_view(out.data(), 8)), 4);
  std::memcpy(out.data() + 12, data.data(), data.size());
  put_le(out.data() + 12 + data.size(), masked_crc32c(data), 4);
  return out;
}

Histogram make_histogram(const std::vector<double>& values) {
  const std::vector<double>& limits = default_bucket_limits();
  Histogram h;
  // Bucket index of each finite value, sorted: a histogram holds a few dozen
  // values and the table has 3,097 buckets, so counting runs of equal
  // indices beats clearing a dense count array on every call.
  std::vector<std::size_t> index;
  index.reserve(values.size());
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    if (index.empty()) {
      h.min = h.max = v;
    } else {
      h.min = std::min(h.min, v);
      h.max = std::max(h.max, v);
    }
    h.sum += v;
    h.sum_squares += v * v;
    // The bucket whose limit is the first one above v; DBL_MAX itself has
    // none above it and belongs to the last bucket.
    const auto above = std::upper_bound(limits.begin(), limits.end(), v);
    index.push_back(std::min<std::size_t>(above - limits.begin(), limits.size() - 1));
  }
  h.num = static_cast<double>(index.size());
  if (index.empty()) {
    h.bucket_limit.push_back(0.0);
    h.bucket.push_back(0.0);
    return h;
  }
  std::sort(index.begin(), index.end());
  for (std::size_t i = 0; i < index.size();) {
    const std::size_t b = index[i];
    std::size_t j = i;
    while (j < index.size() && index[j] == b) ++j;
    // Empty buckets between the previous one and this one become a single
    // empty bucket, so the next bucket's left edge is still right.
    if (!h.bucket_limit.empty() && b > index[i - 1] + 1) {
      h.bucket_limit.push_back(limits[b - 1]);
      h.bucket.push_back(0.0);
    }
    h.bucket_limit.push_back(limits[b]);
    h.bucket.push_back(static_cast<double>(j - i));
    i = j;
  }
  return h;
}

struct TensorBoardWriter::Impl {
  fs::path path;
  std::FILE* file = nullptr;
  // Reused across calls: a scalar then costs a Clear(), the summary's small
  // allocations and a serialization into the payload's existing capacity.
  tb::Event event;
  std::string payload;
  std::chrono::steady_clock::time_point last_flush;

  // Only reached with a file still open when the constructor failed after
  // opening it; ~TensorBoardWriter closes it otherwise, reporting errors.
  ~Impl() {
    if (file != nullptr) std::fclose(file);
  }

  [[noreturn]] void fail(const std::string& what, int err) const {
    throw OutputError(ExitCode::kIoError, "cannot " + what + " TensorBoard events file '" +
                                              path.string() + "': " + std::strerror(err));
  }

  void write_bytes(const char* data, std::size_t n) {
    if (std::fwrite(data, 1, n, file) != n) fail("write", errno);
  }

  // Frames `event` as one TFRecord straight into the stdio buffer.
  // The event's one summary value, its tag and time set: each kind of record
  // fills in the rest, then write_event().
  tb::Summary::Value* begin_value(const std::string& tag, std::int64_t step, double wall_time) {
    event.Clear();
    event.set_wall_time(wall_time);
    event.set_step(step);
    tb::Summary::Value* v = event.mutable_summary()->add_value();
    v->set_tag(tag);
    return v;
  }

  void write_event() {
    if (!event.SerializeToString(&payload)) {
      throw InternalError("cannot serialize a TensorBoard event for '" + path.string() + "'");
    }
    std::array<char, 12> header{};
    put_le(header.data(), payload.size(), 8);
    put_le(header.data() + 8, masked_crc32c(std::string_view(header.data(), 8)), 4);
    std::array<char, 4> footer{};
    put_le(footer.data(), masked_crc32c(payload), 4);
    write_bytes(header.data(), header.size());
    write_bytes(payload.data(), payload.size());
    write_bytes(footer.data(), footer.size());
    const auto now = std::chrono::steady_clock::now();
    if (now - last_flush >= kFlushEvery) flush();
  }

  void flush() {
    if (std::fflush(file) != 0) fail("flush", errno);
    last_flush = std::chrono::steady_clock::now();
  }
};

TensorBoardWriter::TensorBoardWriter(const fs::path& dir, const std::string& tag)
    : m_impl(std::make_unique<Impl>()) {
  if (tag.find_first_of("/\\") != std::string::npos || tag.find('\0') != std::string::npos) {
    throw InternalError("TensorBoard file tag '" + tag + "' must be a plain file-name part");
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw OutputError(ExitCode::kCantCreate, "cannot create TensorBoard directory '" +
                                                 dir.string() + "': " + ec.message());
  }
  // TensorBoard picks up every file whose name contains "tfevents"; the
  // time, host and pid keep files of concurrent or successive runs apart.
  std::string base = "events.out.tfevents." + std::to_string(std::time(nullptr)) + "." +
                     host_name() + "." + std::to_string(getpid());
  if (!tag.empty()) base += "." + tag;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    m_impl->path = dir / (attempt == 0 ? base : base + "." + std::to_string(attempt));
    fd = open(m_impl->path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0 && (errno != EEXIST || attempt == 1000)) {
      throw OutputError(ExitCode::kCantCreate, "cannot create TensorBoard events file '" +
                                                   m_impl->path.string() +
                                                   "': " + std::strerror(errno));
    }
  }
  m_impl->file = fdopen(fd, "wb");
  if (m_impl->file == nullptr) {
    const int err = errno;
    close(fd);
    m_impl->fail("open", err);
  }
  m_impl->event.set_wall_time(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  m_impl->event.set_file_version(kFileVersion);
  m_impl->write_event();
  // A reader that opens the file now sees a valid, if empty, event file.
  m_impl->flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  if (!m_impl || m_impl->file == nullptr) return;
  try {
    m_impl->flush();
  } catch (const std::exception& e) {
    spdlog::warn("{}", e.what());
  }
  std::FILE* file = std::exchange(m_impl->file, nullptr);
  if (std::fclose(file) != 0) {
    spdlog::warn("cannot close TensorBoard events file '{}': {}", m_impl->path.string(),
                 std::strerror(errno));
  }
}

TensorBoardWriter::TensorBoardWriter(TensorBoardWriter&&) noexcept = default;
TensorBoardWriter& TensorBoardWriter::operator=(TensorBoardWriter&& other) noexcept {
  if (this != &other) {
    // Closes our file first, through the destructor's error handling.
    TensorBoardWriter closing(std::move(*this));
    m_impl = std::move(other.m_impl);
  }
  return *this;
}

void TensorBoardWriter::scalar(const std::string& name, std::int64_t step, double value,
                               double wall_time) {
  tb::Summary::Value* v = m_impl->begin_value(name, step, wall_time);
  v->set_simple_value(static_cast<float>(value));
  m_impl->write_event();
}

void TensorBoardWriter::histogram(const std::string& name, std::int64_t step,
                                  const std::vector<double>& values, double wall_time) {
  const Histogram h = make_histogram(values);
  tb::Summary::Value* v = m_impl->begin_value(name, step, wall_time);
  tb::HistogramProto* p = v->mutable_histo();
  p->set_min(h.min);
  p->set_max(h.max);
  p->set_num(h.num);
  p->set_sum(h.sum);
  p->set_sum_squares(h.sum_squares);
  p->mutable_bucket_limit()->Add(h.bucket_limit.begin(), h.bucket_limit.end());
  p->mutable_bucket()->Add(h.bucket.begin(), h.bucket.end());
  m_impl->write_event();
}

void TensorBoardWriter::text(const std::string& name, std::int64_t step,
                             const std::string& markdown, double wall_time) {
  constexpr int kDtString = 7;
  tb::Summary::Value* v = m_impl->begin_value(name, step, wall_time);
  v->mutable_metadata()->mutable_plugin_data()->set_plugin_name("text");
  tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(kDtString);
  t->mutable_tensor_shape();  // a scalar: a shape without dimensions
  t->add_string_val(markdown);
  m_impl->write_event();
}

void TensorBoardWriter::hparams(const std::map<std::string, HParam>& values,
                                const std::string& group, double start_time, double wall_time) {
  constexpr int kDtFloat = 1;
  tb::HParamsPluginData data;
  data.set_version(0);
  tb::SessionStartInfo* info = data.mutable_session_start_info();
  info->set_group_name(group);
  info->set_start_time_secs(start_time);
  for (const auto& [key, value] : values) {
    tb::HParamValue& out = (*info->mutable_hparams())[key];
    if (const auto* d = std::get_if<double>(&value)) out.set_number_value(*d);
    if (const auto* s = std::get_if<std::string>(&value)) out.set_string_value(*s);
    if (const auto* b = std::get_if<bool>(&value)) out.set_bool_value(*b);
  }
  // The plugin finds a session by this tag; its value is a null tensor
  // (float, one dimension of size 0), the data is in the metadata.
  tb::Summary::Value* v = m_impl->begin_value("_hparams_/session_start_info", 0, wall_time);
  auto* plugin = v->mutable_metadata()->mutable_plugin_data();
  plugin->set_plugin_name("hparams");
  plugin->set_content(data.SerializeAsString());
  tb::TensorProto* t = v->mutable_tensor();
  t->set_dtype(kDtFloat);
  t->mutable_tensor_shape()->add_dim()->set_size(0);
  m_impl->write_event();
}

void TensorBoardWriter::flush() { m_impl->flush(); }

const fs::path& TensorBoardWriter::path() const { return m_impl->path; }

}  // namespace syncopt::metrics
