// TensorBoard event files: CRC-32C against published vectors, the TFRecord
// framing byte by byte, histogram buckets, and a written file read back by a
// small reader of the framing here (both CRCs checked) that decodes each
// record with the generated Event class. tests/tensorboard/ does the same
// with the real TensorBoard reader.
#include <sys/resource.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cfloat>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "metrics/tensorboard.hpp"
#include "metrics/tensorboard_event.pb.h"

namespace fs = std::filesystem;
using syncopt::ExitCode;
using syncopt::OutputError;
using syncopt::metrics::crc32c;
using syncopt::metrics::frame_record;
using syncopt::metrics::make_histogram;
using syncopt::metrics::masked_crc32c;
using syncopt::metrics::TensorBoardWriter;
namespace tb = syncopt::metrics::tb;

namespace {

std::string bytes_of(std::initializer_list<int> list) {
  std::string s;
  for (const int b : list) s.push_back(static_cast<char>(b));
  return s;
}

std::uint64_t get_le(const std::string& s, std::size_t at, int nbytes) {
  std::uint64_t v = 0;
  for (int i = nbytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  return v;
}

// The reader side of the framing, written from the format's description
// rather than from the writer: every record's length CRC and data CRC must
// match, and the file must end exactly at a record boundary.
std::vector<std::string> read_records(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  std::size_t at = 0;
  while (at < file.size()) {
    REQUIRE(file.size() - at >= 12);
    const std::uint64_t n = get_le(file, at, 8);
    REQUIRE(get_le(file, at + 8, 4) == masked_crc32c(std::string_view(file).substr(at, 8)));
    REQUIRE(file.size() - at - 12 >= n + 4);
    std::string data = file.substr(at + 12, n);
    REQUIRE(get_le(file, at + 12 + n, 4) == masked_crc32c(data));
    records.push_back(std::move(data));
    at += 12 + n + 4;
  }
  return records;
}

std::vector<tb::Event> read_events(const fs::path& path) {
  std::vector<tb::Event> events;
  for (const std::string& r : read_records(path)) {
    tb::Event e;
    REQUIRE(e.ParseFromString(r));
    events.push_back(e);
  }
  return events;
}

// A fresh, empty directory under the build tree for one test case.
fs::path scratch_dir(const std::string& name) {
  const fs::path dir = fs::path(SYNCOPT_BINARY_DIR) / "test_scratch" / "tensorboard" / name;
  fs::remove_all(dir);
  return dir;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

TEST_CASE("crc32c matches the published check values", "[tensorboard]") {
  CHECK(crc32c("123456789") == 0xE3069283u);
  CHECK(crc32c("") == 0u);
  // RFC 3720 (iSCSI) appendix B.4.
  CHECK(crc32c(std::string(32, '\0')) == 0x8A9136AAu);
  CHECK(crc32c(std::string(32, '\xFF')) == 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending.push_back(static_cast<char>(i));
  CHECK(crc32c(ascending) == 0x46DD794Eu);
}

TEST_CASE("masked crc32c is TFRecord's rotate-and-add", "[tensorboard]") {
  // Values from TensorBoard's own Python implementation.
  CHECK(masked_crc32c("") == 0xA282EAD8u);
  CHECK(masked_crc32c("123456789") == 0xC78AB0E5u);
}

TEST_CASE("one record is framed byte by byte as TFRecord", "[tensorboard]") {
  // Length 3 (uint64 LE), masked CRC of those 8 bytes, "abc", masked CRC of
  // "abc"; the CRC bytes come from TensorBoard's Python reader code.
  const std::string expected = bytes_of({0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xB0, 0x99,
                                         0x49, 0x0E, 0x61, 0x62, 0x63, 0x6E, 0x57, 0xF1, 0x21});
  CHECK(frame_record("abc") == expected);
  CHECK(frame_record("").size() == 16);
}

TEST_CASE("histograms use TensorFlow's bucket limits", "[tensorboard]") {
  SECTION("counts, sums and merged empty buckets") {
    const auto h = make_histogram({0.5, 0.5, 2.0, 1000.0, -1.0});
    CHECK(h.num == 5.0);
    CHECK(h.min == -1.0);
    CHECK(h.max == 1000.0);
    CHECK(h.sum == Approx(1002.0));
    CHECK(h.sum_squares == Approx(0.25 + 0.25 + 4.0 + 1e6 + 1.0));
    REQUIRE(h.bucket.size() == h.bucket_limit.size());
    double total = 0.0;
    for (std::size_t i = 0; i < h.bucket.size(); ++i) {
      total += h.bucket[i];
      if (i > 0) CHECK(h.bucket_limit[i - 1] < h.bucket_limit[i]);
    }
    CHECK(total == 5.0);
    // Occupied buckets alternate with one merged empty bucket between them.
    CHECK(h.bucket == std::vector<double>{1, 0, 2, 0, 1, 0, 1});
    CHECK(h.bucket.front() > 0.0);
    CHECK(h.bucket.back() > 0.0);
    // Each value lies in [previous limit, its limit), 10% wide at most.
    CHECK(h.bucket_limit[0] > -1.0);
    CHECK(h.bucket_limit[1] <= 0.5);
    CHECK(h.bucket_limit[2] > 0.5);
    CHECK(h.bucket_limit[2] <= 0.5 * 1.1);
    CHECK(h.bucket_limit[6] > 1000.0);
    CHECK(h.bucket_limit[5] <= 1000.0);
  }
  SECTION("zero and adjacent buckets") {
    const auto h = make_histogram({0.0, 0.0});
    CHECK(h.bucket == std::vector<double>{2});
    CHECK(h.bucket_limit.size() == 1);
    CHECK(h.bucket_limit[0] > 0.0);
    CHECK(h.bucket_limit[0] <= 1e-12);
  }
  SECTION("non-finite values are left out; DBL_MAX is in the last bucket") {
    const auto h = make_histogram({std::numeric_limits<double>::quiet_NaN(), DBL_MAX, 1.0,
                                   -std::numeric_limits<double>::infinity()});
    CHECK(h.num == 2.0);
    CHECK(h.max == DBL_MAX);
    CHECK(h.bucket_limit.back() == DBL_MAX);
    CHECK(h.bucket.back() == 1.0);
  }
  SECTION("no finite value: one empty bucket") {
    const auto h = make_histogram({});
    CHECK(h.num == 0.0);
    CHECK(h.bucket == std::vector<double>{0});
    CHECK(make_histogram({std::numeric_limits<double>::quiet_NaN()}).num == 0.0);
  }
}

TEST_CASE("a written event file reads back record by record", "[tensorboard]") {
  const fs::path dir = scratch_dir("readback") / "run" / "tb";  // parents are created
  fs::path path;
  {
    TensorBoardWriter w(dir, "shard0");
    path = w.path();
    w.scalar("train/loss", 0, 0.0, 1700000000.5);
    w.scalar("train/loss", 1, 2.25, 1700000001.5);
    w.scalar("train/lr", std::int64_t{1} << 40, 0.1, 1700000002.5);
    w.histogram("sync/arrival_s", 3, {0.01, 0.02, 0.02}, 1700000003.5);
    // No flush: the destructor writes the rest.
  }
  const std::string name = path.filename().string();
  CHECK(path.parent_path() == dir);
  CHECK(name.rfind("events.out.tfevents.", 0) == 0);
  CHECK(name.size() > 7);
  CHECK(name.substr(name.size() - 7) == ".shard0");

  const auto events = read_events(path);
  REQUIRE(events.size() == 5);
  CHECK(events[0].file_version() == "brain.Event:2");
  CHECK(events[0].wall_time() > 1.6e9);

  CHECK(events[1].step() == 0);
  CHECK(events[1].wall_time() == 1700000000.5);
  REQUIRE(events[1].summary().value_size() == 1);
  CHECK(events[1].summary().value(0).tag() == "train/loss");
  // A zero scalar is still present: oneof members carry presence.
  CHECK(events[1].summary().value(0).has_simple_value());
  CHECK(events[1].summary().value(0).simple_value() == 0.0f);
  CHECK(events[2].summary().value(0).simple_value() == 2.25f);
  CHECK(events[3].step() == std::int64_t{1} << 40);
  CHECK(events[3].summary().value(0).simple_value() == 0.1f);

  const auto& v = events[4].summary().value(0);
  CHECK(v.tag() == "sync/arrival_s");
  REQUIRE(v.has_histo());
  CHECK(v.histo().num() == 3.0);
  CHECK(v.histo().min() == 0.01);
  CHECK(v.histo().max() == 0.02);
  CHECK(v.histo().bucket_size() == 3);  // 0.01, one merged empty, 0.02 twice
  CHECK(v.histo().bucket(2) == 2.0);
}

TEST_CASE("writers never share or overwrite a file", "[tensorboard]") {
  const fs::path dir = scratch_dir("two_writers");
  TensorBoardWriter a(dir, "x");
  TensorBoardWriter b(dir, "x");  // same second, pid and tag: gets a suffix
  CHECK(a.path() != b.path());
  a.scalar("s", 1, 1.0, 1.0);
  TensorBoardWriter moved = std::move(a);
  moved.scalar("s", 2, 2.0, 2.0);
  moved.flush();
  b.flush();
  CHECK(files_in(dir).size() == 2);
  CHECK(read_events(moved.path()).size() == 3);
  CHECK(read_events(b.path()).size() == 1);
}

TEST_CASE("a directory that cannot be made is an OutputError naming it", "[tensorboard]") {
  const fs::path dir = scratch_dir("not_a_dir");
  fs::create_directories(dir);
  const fs::path file = dir / "plain_file";
  std::ofstream(file) << "x";
  try {
    TensorBoardWriter w(file / "tb");
    FAIL("no error");
  } catch (const OutputError& e) {
    CHECK(e.code() == ExitCode::kCantCreate);
    CHECK_THAT(e.what(), Catch::Contains((file / "tb").string()));
    CHECK_THAT(e.what(), Catch::Contains("Not a directory"));
  }
}

TEST_CASE("a failed write is an OutputError with the path and strerror", "[tensorboard]") {
  // The file size limit makes write(2) fail with EFBIG once the stdio buffer
  // is flushed; SIGXFSZ, which would end the process, is ignored meanwhile.
  // As root, permissions cannot make a write fail; this works for anyone.
  const fs::path dir = scratch_dir("write_error");
  TensorBoardWriter w(dir);
  rlimit saved{};
  REQUIRE(getrlimit(RLIMIT_FSIZE, &saved) == 0);
  auto* const old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 4096;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  std::string message;
  ExitCode code = ExitCode::kOk;
  try {
    for (int s = 0; s < 10000; ++s) w.scalar("train/loss", s, 1.0, 1.0);
    w.flush();
  } catch (const OutputError& e) {
    message = e.what();
    code = e.code();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  CHECK(code == ExitCode::kIoError);
  CHECK_THAT(message, Catch::Contains(w.path().string()));
  CHECK_THAT(message, Catch::Contains(std::strerror(EFBIG)));
}
