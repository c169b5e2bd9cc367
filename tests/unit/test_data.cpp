// Tests of lib/data: IDX and CIFAR-10 readers on fixture files written to a
// temp dir (plain and gzip), every malformed-input error, the real
// Fashion-MNIST package, the synthetic set, the epoch sampler and augmentation.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/dataset.hpp"

namespace fs = std::filesystem;
using namespace syncopt;
using namespace syncopt::data;

namespace {

using Bytes = std::vector<std::uint8_t>;

// A fresh directory under the system temp dir, removed at scope exit.
class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    m_path = fs::temp_directory_path() /
             ("syncopt_test_data_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(m_path);
    fs::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  std::string file(const std::string& name) const { return (m_path / name).string(); }
  std::string str() const { return m_path.string(); }

 private:
  fs::path m_path;
};

void put_be32(Bytes& b, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(v >> s));
}

Bytes idx_images(std::uint32_t count, std::uint32_t rows, std::uint32_t cols, const Bytes& pixels,
                 std::uint32_t magic = 0x00000803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, count);
  put_be32(b, rows);
  put_be32(b, cols);
  b.insert(b.end(), pixels.begin(), pixels.end());
  return b;
}

Bytes idx_labels(std::uint32_t count, const Bytes& labels) {
  Bytes b;
  put_be32(b, 0x00000801);
  put_be32(b, count);
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}

void write_file(const std::string& path, const Bytes& bytes, bool gz) {
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    REQUIRE(f != nullptr);
    if (!bytes.empty())
      REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
              static_cast<int>(bytes.size()));
    REQUIRE(gzclose(f) == Z_OK);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    REQUIRE(out.good());
  }
}

// Three 2x3 images with distinct pixels and labels 4, 0, 9.
const Bytes kPixels = {0, 255, 1, 2, 3, 4, 10, 20, 30, 40, 50, 60, 100, 110, 120, 130, 140, 150};
const Bytes kLabels = {4, 0, 9};

// The what() of the E that f throws; any other exception fails the test.
template <class E, class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    const std::string m = e.what();
    CHECK(m.find('\n') == std::string::npos);  // one line
    return m;
  }
  FAIL("expected an exception, none was thrown");
  return "";
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Expects read_idx(images, labels) to throw DataError whose message names
// `path` and contains every one of `parts`.
void expect_data_error(const std::string& images, const std::string& labels,
                       const std::string& path, const std::vector<std::string>& parts) {
  const std::string m = message_of<DataError>([&] { read_idx(images, labels); });
  INFO(m);
  CHECK(contains(m, path));
  for (const auto& p : parts) CHECK(contains(m, p));
}

std::uint64_t fnv1a(const void* data, std::size_t n) {
  auto* p = static_cast<const unsigned char*>(data);
  std::uint64_t h = 1469598103934665603ULL;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ULL;
  return h;
}

}  // namespace

TEST_CASE("read_idx reads plain and gzip pairs, detected by content", "[data]") {
  TempDir dir;
  for (bool gz : {false, true}) {
    // The names lie about compression on purpose: detection is by content.
    const std::string images = dir.file(gz ? "imgs_plain_name" : "imgs.gz");
    const std::string labels = dir.file(gz ? "lbls_plain_name" : "lbls.gz");
    write_file(images, idx_images(3, 2, 3, kPixels), gz);
    write_file(labels, idx_labels(3, kLabels), gz);
    const Dataset ds = read_idx(images, labels);
    CHECK(ds.count == 3);
    CHECK(ds.channels == 1);
    CHECK(ds.height == 2);
    CHECK(ds.width == 3);
    CHECK(ds.classes == 10);
    REQUIRE(ds.images.size() == kPixels.size());
    for (std::size_t i = 0; i < kPixels.size(); ++i) CHECK(ds.images[i] == kPixels[i] / 255.0f);
    CHECK(ds.labels == std::vector<std::int32_t>{4, 0, 9});
    CHECK(ds.image(1)[0] == 10 / 255.0f);
  }
}

TEST_CASE("read_idx limit keeps the first examples", "[data]") {
  TempDir dir;
  write_file(dir.file("i"), idx_images(3, 2, 3, kPixels), true);
  write_file(dir.file("l"), idx_labels(3, kLabels), true);
  const Dataset two = read_idx(dir.file("i"), dir.file("l"), 2);
  CHECK(two.count == 2);
  CHECK(two.images.size() == 12);
  CHECK(two.labels == std::vector<std::int32_t>{4, 0});
  CHECK(two.images[11] == 60 / 255.0f);
  CHECK(read_idx(dir.file("i"), dir.file("l"), 100).count == 3);
  CHECK_THROWS_AS(read_idx(dir.file("i"), dir.file("l"), -1), ConfigError);
}

TEST_CASE("read_idx: missing files are MissingInputError with a hint", "[data]") {
  TempDir dir;
  write_file(dir.file("l"), idx_labels(3, kLabels), false);
  const std::string missing = dir.file("nope-idx3-ubyte.gz");
  std::string m = message_of<MissingInputError>([&] { read_idx(missing, dir.file("l")); });
  CHECK(contains(m, missing));
  CHECK(contains(m, "data.path"));

  const std::string pkg = std::string(kFashionMnistDir) + "/no-such-file-idx3-ubyte.gz";
  m = message_of<MissingInputError>([&] { read_idx(pkg, dir.file("l")); });
  CHECK(contains(m, pkg));
  CHECK(contains(m, "apt-get install dataset-fashion-mnist"));

  // A directory is not a readable IDX file.
  m = message_of<MissingInputError>([&] { read_idx(dir.str(), dir.file("l")); });
  CHECK(contains(m, dir.str()));

  // The exit code the app will use.
  try {
    read_idx(missing, dir.file("l"));
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kNoInput);
  }
}

TEST_CASE("read_idx: malformed headers are DataError naming path, expected and found", "[data]") {
  TempDir dir;
  const std::string labels = dir.file("labels");
  write_file(labels, idx_labels(3, kLabels), false);
  const std::string images = dir.file("images");

  SECTION("empty file") {
    for (bool gz : {false, true}) {
      write_file(images, {}, gz);
      expect_data_error(images, labels, images, {"empty", "0x00000803", "0 bytes"});
    }
  }
  SECTION("bad magic") {
    for (bool gz : {false, true}) {
      write_file(images, idx_images(3, 2, 3, kPixels, 0x12345678), gz);
      expect_data_error(images, labels, images, {"magic", "0x00000803", "0x12345678"});
    }
  }
  SECTION("wrong type byte") {
    write_file(images, idx_images(3, 2, 3, kPixels, 0x00000d03), false);
    expect_data_error(images, labels, images, {"type", "0x08", "0x0d"});
  }
  SECTION("wrong number of dims: a labels file given as images") {
    write_file(images, idx_labels(3, kLabels), false);
    expect_data_error(images, labels, images, {"dimensions", "3 dims", "found 1 dims"});
    // And the other way round.
    const std::string good_images = dir.file("good_images");
    write_file(good_images, idx_images(3, 2, 3, kPixels), false);
    expect_data_error(good_images, good_images, good_images,
                      {"0x00000801", "1 dims", "found 3 dims"});
  }
  SECTION("truncated header") {
    Bytes b = idx_images(3, 2, 3, kPixels);
    b.resize(10);
    write_file(images, b, false);
    expect_data_error(images, labels, images, {"truncated", "16", "10"});
    b.resize(3);
    write_file(images, b, true);
    expect_data_error(images, labels, images, {"truncated", "3 bytes"});
  }
  SECTION("header dims out of bounds, rejected before reading the payload") {
    write_file(images, idx_images(3, 0, 3, kPixels), true);
    expect_data_error(images, labels, images, {"1..1024", "3x0x3"});
    write_file(images, idx_images(3, 2, 5000, kPixels), true);
    expect_data_error(images, labels, images, {"1..1024", "3x2x5000"});
    write_file(images, idx_images(20'000'000, 2, 3, kPixels), true);
    expect_data_error(images, labels, images, {"1..10000000", "20000000"});
    write_file(images, idx_images(0, 2, 3, {}), false);
    expect_data_error(images, labels, images, {"1..10000000", "found 0"});
    // Each dim within bounds, the product (~8.4 GB) not.
    write_file(images, idx_images(8'000'000, 1024, 1024, kPixels), true);
    expect_data_error(images, labels, images, {"2147483648", "8000000x1024x1024"});
  }
}

TEST_CASE("read_idx: payload size problems are DataError", "[data]") {
  TempDir dir;
  const std::string labels = dir.file("labels");
  const std::string images = dir.file("images");
  write_file(labels, idx_labels(3, kLabels), false);

  SECTION("truncated plain file: header says 3 images, 2 present") {
    write_file(images, idx_images(3, 2, 3, Bytes(kPixels.begin(), kPixels.begin() + 12)), false);
    expect_data_error(images, labels, images, {"truncated", "expected 34 bytes", "got 28 bytes"});
  }
  SECTION("truncated gzip payload") {
    write_file(images, idx_images(3, 2, 3, Bytes(kPixels.begin(), kPixels.begin() + 12)), true);
    expect_data_error(images, labels, images, {"truncated", "expected 18 payload bytes", "got 12"});
  }
  SECTION("truncated gzip stream (compressed file cut short)") {
    Bytes big(4000);
    for (std::size_t i = 0; i < big.size(); ++i)
      big[i] = static_cast<std::uint8_t>((i * 7919) >> 3);
    write_file(images, idx_images(1000, 2, 2, big), true);
    const auto full = fs::file_size(images);
    fs::resize_file(images, full / 2);
    write_file(labels, idx_labels(1000, Bytes(1000, 1)), false);
    expect_data_error(images, labels, images, {"truncated"});
  }
  SECTION("trailing data after the payload") {
    Bytes extra = kPixels;
    extra.push_back(7);
    extra.push_back(8);
    write_file(images, idx_images(3, 2, 3, extra), false);
    expect_data_error(images, labels, images, {"size mismatch", "3x2x3", "34 bytes", "36 bytes"});
    write_file(images, idx_images(3, 2, 3, extra), true);
    expect_data_error(images, labels, images, {"size mismatch", "3x2x3", "trailing"});
  }
  SECTION("corrupt gzip stream") {
    Bytes junk = {0x1f, 0x8b, 0x08, 0x00, 0, 0, 0, 0, 0, 0x03, 0xff, 0xfe, 0xfd, 0xfc, 0x01, 0x02};
    write_file(images, junk, false);
    expect_data_error(images, labels, images, {"gzip"});
  }
}

TEST_CASE("read_idx: labels out of range and count mismatch", "[data]") {
  TempDir dir;
  const std::string images = dir.file("images");
  const std::string labels = dir.file("labels");
  write_file(images, idx_images(3, 2, 3, kPixels), false);

  write_file(labels, idx_labels(3, {4, 0, 10}), true);
  expect_data_error(images, labels, labels, {"out of range", "index 2", "0..9", "found 10"});

  write_file(labels, idx_labels(3, {1, 5, 2}), false);
  std::string m = message_of<DataError>([&] { read_idx(images, labels, 0, 3); });
  CHECK(contains(m, labels));
  CHECK(contains(m, "index 1"));
  CHECK(contains(m, "0..2"));
  CHECK(contains(m, "found 5"));
  CHECK(read_idx(images, labels, 0, 6).classes == 6);

  write_file(labels, idx_labels(4, {1, 2, 3, 4}), false);
  m = message_of<DataError>([&] { read_idx(images, labels); });
  CHECK(contains(m, images));
  CHECK(contains(m, labels));
  CHECK(contains(m, "count mismatch"));
  CHECK(contains(m, "expected 3"));
  CHECK(contains(m, "found 4"));
  try {
    read_idx(images, labels);
  } catch (const Error& e) {
    CHECK(e.code() == ExitCode::kDataFormat);
  }
}

TEST_CASE("load idx: prefers .gz, falls back to plain, standardises with train stats", "[data]") {
  TempDir dir;
  const Bytes train_px = {0, 50, 100, 150, 200, 250, 10, 20, 30, 40, 50, 60, 1, 2, 3, 4, 5, 6};
  write_file(dir.file("train-images-idx3-ubyte"), idx_images(3, 2, 3, train_px), false);
  write_file(dir.file("train-labels-idx1-ubyte.gz"), idx_labels(3, {1, 2, 3}), true);
  write_file(dir.file("train-labels-idx1-ubyte"), idx_labels(3, {7, 7, 7}), false);  // shadowed
  write_file(dir.file("t10k-images-idx3-ubyte.gz"), idx_images(2, 2, 3, Bytes(12, 255)), true);
  write_file(dir.file("t10k-labels-idx1-ubyte"), idx_labels(2, {0, 9}), false);

  LoadOptions opt;
  opt.name = syncopt::config::DataSet::kIdx;
  opt.path = dir.str();
  TrainTest tt = load(opt);
  CHECK(tt.train.name == "idx");
  CHECK(tt.train.count == 3);
  CHECK(tt.test.count == 2);
  CHECK(tt.train.labels == std::vector<std::int32_t>{1, 2, 3});
  CHECK(tt.test.labels == std::vector<std::int32_t>{0, 9});
  double mean = 0, sq = 0;
  for (float v : tt.train.images) mean += v;
  mean /= tt.train.images.size();
  for (float v : tt.train.images) sq += (v - mean) * (v - mean);
  CHECK(std::abs(mean) < 1e-5);
  CHECK(std::sqrt(sq / tt.train.images.size()) == Approx(1.0).epsilon(1e-4));
  // The test set uses the train statistics: 255 maps to (1 - m) / s.
  double m = 0, s = 0;
  for (auto p : train_px) m += p / 255.0;
  m /= train_px.size();
  for (auto p : train_px) s += (p / 255.0 - m) * (p / 255.0 - m);
  s = std::sqrt(s / train_px.size());
  CHECK(tt.test.images[0] == Approx((1.0 - m) / s).epsilon(1e-5));

  opt.limit_train = 2;
  opt.limit_test = 1;
  tt = load(opt);
  CHECK(tt.train.count == 2);
  CHECK(tt.test.count == 1);
  CHECK(tt.test.labels == std::vector<std::int32_t>{0});

  fs::remove(dir.file("t10k-labels-idx1-ubyte"));
  const std::string msg = message_of<MissingInputError>([&] { load(opt); });
  CHECK(contains(msg, dir.file("t10k-labels-idx1-ubyte.gz")));
}

TEST_CASE("the installed Fashion-MNIST loads in full", "[data]") {
  if (!fs::is_directory(kFashionMnistDir))
    FAIL(std::string(kFashionMnistDir) +
         " is missing: install it with `apt-get install dataset-fashion-mnist`");
  LoadOptions opt;  // defaults: fashion-mnist
  opt.path = kFashionMnistDir;
  const TrainTest tt = load(opt);
  for (const Dataset* ds : {&tt.train, &tt.test}) {
    CHECK(ds->name == "fashion-mnist");
    CHECK(ds->channels == 1);
    CHECK(ds->height == 28);
    CHECK(ds->width == 28);
    CHECK(ds->classes == 10);
    CHECK(ds->images.size() == static_cast<std::size_t>(ds->count) * 784);
    CHECK(ds->labels.size() == static_cast<std::size_t>(ds->count));
  }
  CHECK(tt.train.count == 60000);
  CHECK(tt.test.count == 10000);
  // Fashion-MNIST is balanced: 6000 / 1000 examples of each of the 10 classes.
  std::vector<int> train_hist(10), test_hist(10);
  auto in_range = [](std::int32_t l) { return l >= 0 && l <= 9; };
  REQUIRE(std::all_of(tt.train.labels.begin(), tt.train.labels.end(), in_range));
  REQUIRE(std::all_of(tt.test.labels.begin(), tt.test.labels.end(), in_range));
  for (auto l : tt.train.labels) ++train_hist[l];
  for (auto l : tt.test.labels) ++test_hist[l];
  CHECK(train_hist == std::vector<int>(10, 6000));
  CHECK(test_hist == std::vector<int>(10, 1000));
  double mean = 0, sq = 0;
  for (float v : tt.train.images) {
    mean += v;
    sq += double(v) * v;
  }
  mean /= tt.train.images.size();
  CHECK(std::abs(mean) < 1e-4);
  CHECK(std::sqrt(sq / tt.train.images.size() - mean * mean) == Approx(1.0).epsilon(1e-3));
}

TEST_CASE("read_cifar10 parses records and checks the file size", "[data]") {
  TempDir dir;
  Bytes batch;
  for (int r = 0; r < 2; ++r) {
    batch.push_back(r == 0 ? 3 : 7);
    for (int i = 0; i < 3072; ++i) batch.push_back(static_cast<std::uint8_t>((i + 100 * r) % 256));
  }
  write_file(dir.file("b1.bin"), batch, false);
  Dataset ds = read_cifar10({dir.file("b1.bin")});
  CHECK(ds.count == 2);
  CHECK(ds.channels == 3);
  CHECK(ds.height == 32);
  CHECK(ds.width == 32);
  CHECK(ds.labels == std::vector<std::int32_t>{3, 7});
  REQUIRE(ds.images.size() == 2 * 3072);
  CHECK(ds.image(0)[0] == 0.0f);
  CHECK(ds.image(0)[1024] == (1024 % 256) / 255.0f);  // green plane starts at 1024
  CHECK(ds.image(1)[5] == ((5 + 100) % 256) / 255.0f);

  // Two batches and a limit spanning them.
  write_file(dir.file("b2.bin"), batch, false);
  ds = read_cifar10({dir.file("b1.bin"), dir.file("b2.bin")}, 3);
  CHECK(ds.count == 3);
  CHECK(ds.labels == std::vector<std::int32_t>{3, 7, 3});

  Bytes bad = batch;
  bad.resize(bad.size() - 5);
  write_file(dir.file("bad.bin"), bad, false);
  std::string m = message_of<DataError>([&] { read_cifar10({dir.file("bad.bin")}); });
  CHECK(contains(m, dir.file("bad.bin")));
  CHECK(contains(m, "multiple of 3073"));
  CHECK(contains(m, "found 6141 bytes"));

  Bytes bad_label = batch;
  bad_label[3073] = 12;
  write_file(dir.file("bad_label.bin"), bad_label, false);
  m = message_of<DataError>([&] { read_cifar10({dir.file("bad_label.bin")}); });
  CHECK(contains(m, "record 1"));
  CHECK(contains(m, "found 12"));

  write_file(dir.file("empty.bin"), {}, false);
  CHECK_THROWS_AS(read_cifar10({dir.file("empty.bin")}), DataError);
  m = message_of<MissingInputError>([&] { read_cifar10({dir.file("missing.bin")}); });
  CHECK(contains(m, dir.file("missing.bin")));

  // load("cifar10") with a missing batch names it.
  LoadOptions opt;
  opt.name = syncopt::config::DataSet::kCifar10;
  opt.path = dir.str();
  m = message_of<MissingInputError>([&] { load(opt); });
  CHECK(contains(m, "data_batch_1.bin"));
}

TEST_CASE("make_synthetic is deterministic, seed-dependent and learnable", "[data]") {
  const Dataset a = make_synthetic(600, 1, 28, 28, 10, 42);
  const Dataset b = make_synthetic(600, 1, 28, 28, 10, 42);
  const Dataset c = make_synthetic(600, 1, 28, 28, 10, 43);
  REQUIRE(a.images.size() == 600u * 784);
  CHECK(std::memcmp(a.images.data(), b.images.data(), a.images.size() * sizeof(float)) == 0);
  CHECK(a.labels == b.labels);
  CHECK(a.images != c.images);
  CHECK(a.labels != c.labels);
  CHECK(std::all_of(a.images.begin(), a.images.end(),
                    [](float v) { return v >= 0.0f && v <= 1.0f; }));
  std::set<int> seen(a.labels.begin(), a.labels.end());
  CHECK(seen.size() == 10);
  CHECK(*seen.begin() == 0);
  CHECK(*seen.rbegin() == 9);
  // Same bytes on every machine: a fixed checksum of the generator's output.
  // If this changes, runs with the same seed stop being reproducible.
  const std::uint64_t h = fnv1a(a.images.data(), a.images.size() * sizeof(float)) ^
                          fnv1a(a.labels.data(), a.labels.size() * sizeof(std::int32_t));
  CHECK(h == 0x4243ff4cb3f09e72ULL);

  // Learnable: nearest class mean (a linear classifier) fit on `a` classifies
  // the independent draw `c` far above the 10% of chance.
  const std::int64_t size = a.image_size();
  std::vector<double> means(10 * size, 0.0);
  std::vector<int> n(10, 0);
  for (std::int64_t i = 0; i < a.count; ++i) {
    ++n[a.labels[i]];
    for (std::int64_t j = 0; j < size; ++j) means[a.labels[i] * size + j] += a.image(i)[j];
  }
  for (int k = 0; k < 10; ++k)
    for (std::int64_t j = 0; j < size; ++j) means[k * size + j] /= std::max(1, n[k]);
  int correct = 0;
  for (std::int64_t i = 0; i < c.count; ++i) {
    int best = 0;
    double best_d = 1e300;
    for (int k = 0; k < 10; ++k) {
      double d = 0;
      for (std::int64_t j = 0; j < size; ++j) d += std::pow(c.image(i)[j] - means[k * size + j], 2);
      if (d < best_d) best_d = d, best = k;
    }
    correct += best == c.labels[i];
  }
  CHECK(correct > 0.5 * c.count);
}

TEST_CASE("load synthetic: shapes, distinct train/test, normalised", "[data]") {
  LoadOptions opt;
  opt.name = syncopt::config::DataSet::kSynthetic;
  opt.synthetic_train = 300;
  opt.synthetic_test = 100;
  opt.seed = 7;
  const TrainTest tt = load(opt);
  CHECK(tt.train.count == 300);
  CHECK(tt.test.count == 100);
  CHECK(tt.train.channels == 1);
  CHECK(tt.train.height == 28);
  CHECK(tt.test.width == 28);
  CHECK(tt.train.classes == 10);
  CHECK(!std::equal(tt.test.images.begin(), tt.test.images.end(), tt.train.images.begin()));
  double mean = 0;
  for (float v : tt.train.images) mean += v;
  CHECK(std::abs(mean / tt.train.images.size()) < 1e-4);
  const TrainTest again = load(opt);
  CHECK(again.train.images == tt.train.images);
  CHECK(again.test.labels == tt.test.labels);
  opt.seed = 8;
  CHECK(load(opt).train.images != tt.train.images);
}

TEST_CASE("EpochSampler: permutations, shards partition them, determinism", "[data]") {
  const std::int64_t count = 10;
  const int shards = 3;
  // Shard sizes 4, 3, 3: one epoch of every shard covers [0, count) once.
  std::vector<std::vector<std::int64_t>> epoch0(shards), epoch1(shards);
  for (int s = 0; s < shards; ++s) {
    EpochSampler sampler(count, 99, s, shards);
    const std::int64_t part = (count - s + shards - 1) / shards;
    sampler.next_batch(part, epoch0[s]);
    CHECK(sampler.epoch() == 0);
    sampler.next_batch(part, epoch1[s]);
    CHECK(sampler.epoch() == 1);
  }
  for (const auto* epoch : {&epoch0, &epoch1}) {
    std::vector<std::int64_t> all;
    for (const auto& part : *epoch) all.insert(all.end(), part.begin(), part.end());
    std::sort(all.begin(), all.end());
    std::vector<std::int64_t> expected(count);
    for (std::int64_t i = 0; i < count; ++i) expected[i] = i;
    CHECK(all == expected);
  }
  CHECK(epoch0 != epoch1);  // a new permutation each epoch

  // Same seed, same stream; batches wrap across the epoch boundary.
  EpochSampler a(count, 99, 0, shards), b(count, 99, 0, shards), c(count, 100, 0, shards);
  std::vector<std::int64_t> x, y, z, stream_a, stream_c;
  for (int i = 0; i < 5; ++i) {
    a.next_batch(3, x);
    b.next_batch(3, y);
    c.next_batch(3, z);
    CHECK(x == y);
    stream_a.insert(stream_a.end(), x.begin(), x.end());
    stream_c.insert(stream_c.end(), z.begin(), z.end());
  }
  CHECK(a.epoch() == 3);  // 15 draws of 4 per epoch: epochs 0..3
  CHECK(std::vector<std::int64_t>(stream_a.begin(), stream_a.begin() + 4) == epoch0[0]);
  CHECK(std::vector<std::int64_t>(stream_a.begin() + 4, stream_a.begin() + 8) == epoch1[0]);
  CHECK(stream_a != stream_c);

  // A fixed permutation: the same on every machine and run.
  EpochSampler whole(count, 1);
  whole.next_batch(count, x);
  CHECK(x == std::vector<std::int64_t>{8, 6, 0, 9, 2, 1, 7, 4, 5, 3});

  CHECK_THROWS_AS(EpochSampler(2, 1, 0, 3), ConfigError);
  CHECK_THROWS_AS(EpochSampler(10, 1, 3, 3), ConfigError);
  CHECK_THROWS_AS(EpochSampler(10, 1, 0, 0), ConfigError);
}

TEST_CASE("augment_image: identity at zero, rotation keeps mass and fills background", "[data]") {
  const int c = 2, h = 28, w = 28;
  // A standardised-looking image: background -0.5 (not 0), a bright blob.
  std::vector<float> img(c * h * w, -0.5f);
  for (int ch = 0; ch < c; ++ch)
    for (int y = 8; y < 20; ++y)
      for (int x = 10; x < 22; ++x) img[(ch * h + y) * w + x] = 2.0f + 0.1f * x + ch;
  std::vector<float> scratch;

  std::vector<float> same = img;
  std::mt19937_64 rng(5);
  augment_image(same.data(), c, h, w, AugmentOptions{0.0, 0.0}, rng, scratch);
  float max_diff = 0;
  for (std::size_t i = 0; i < img.size(); ++i)
    max_diff = std::max(max_diff, std::abs(same[i] - img[i]));
  CHECK(max_diff == 0.0f);

  AugmentOptions opt{30.0, 0.0};
  std::vector<float> rot = img, rot2 = img;
  std::mt19937_64 r1(11), r2(11);
  augment_image(rot.data(), c, h, w, opt, r1, scratch);
  augment_image(rot2.data(), c, h, w, opt, r2, scratch);
  CHECK(rot == rot2);  // deterministic given the rng
  max_diff = 0;
  for (std::size_t i = 0; i < img.size(); ++i)
    max_diff = std::max(max_diff, std::abs(rot[i] - img[i]));
  CHECK(max_diff > 0.5f);
  // Mass above the background is roughly kept by a rotation of a centred blob.
  for (int ch = 0; ch < c; ++ch) {
    double before = 0, after = 0;
    for (int i = 0; i < h * w; ++i) {
      before += img[ch * h * w + i] + 0.5;
      after += rot[ch * h * w + i] + 0.5;
    }
    CHECK(after == Approx(before).epsilon(0.05));
  }
  // Corners come from outside the image and get the background, not 0.
  CHECK(rot[0] == Approx(-0.5f).margin(1e-6));
  CHECK(rot[w - 1] == Approx(-0.5f).margin(1e-6));

  // Zoom out: the border is filled with the channel's minimum.
  std::vector<float> zoom = img;
  std::mt19937_64 r3(3);
  augment_image(zoom.data(), c, h, w, AugmentOptions{0.0, 0.3}, r3, scratch);
  CHECK(*std::min_element(zoom.begin(), zoom.end()) == Approx(-0.5f).margin(1e-6));
  CHECK(zoom[0] == Approx(-0.5f).margin(1e-6));
  CHECK(zoom != img);
}
