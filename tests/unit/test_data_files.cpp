// Tests of the data sets that stay on disk: NumPy .npy arrays (memory-
// mapped) and HDF5 datasets (read by hyperslab), on files the tests write
// (.npy bytes by hand, HDF5 through libhdf5): values, shapes, element types,
// limits and class counts, every malformed-input error (65) and missing
// input (66) naming the file and what is wrong, standardisation equal to the
// in-memory path, and batches equal to an in-memory copy's.
#include <hdf5.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "data/batch.hpp"
#include "data/dataset.hpp"

namespace fs = std::filesystem;
using namespace syncopt;
using namespace syncopt::data;
using Catch::Matchers::Contains;

namespace {

using Bytes = std::vector<std::uint8_t>;

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    m_path = fs::temp_directory_path() /
             ("syncopt_test_files_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
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

template <class T>
Bytes bytes_of(const std::vector<T>& v) {
  Bytes b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// A .npy file as numpy.save writes it: magic, version, little-endian header
// length, the dict padded with spaces to a multiple of 64 bytes, data.
Bytes npy(const std::string& descr, const std::vector<std::int64_t>& shape, const Bytes& data,
          bool fortran = false, int major = 1) {
  std::string dims = "(";  // Python's tuple: (), (n,), (a, b)
  for (std::size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  dims += shape.size() == 1 ? ",)" : ")";
  std::string dict = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                     ", 'shape': " + dims + ", }";
  const std::size_t prefix = major == 1 ? 10 : 12;
  while ((prefix + dict.size() + 1) % 64 != 0) dict += ' ';
  dict += '\n';
  Bytes b = {0x93, 'N', 'U', 'M', 'P', 'Y', static_cast<std::uint8_t>(major), 0};
  const auto n = static_cast<std::uint32_t>(dict.size());
  b.push_back(static_cast<std::uint8_t>(n));
  b.push_back(static_cast<std::uint8_t>(n >> 8));
  if (major != 1) {
    b.push_back(static_cast<std::uint8_t>(n >> 16));
    b.push_back(static_cast<std::uint8_t>(n >> 24));
  }
  b.insert(b.end(), dict.begin(), dict.end());
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

void write_file(const std::string& path, const Bytes& b) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  REQUIRE(out.good());
}

// Pixels 0, 1, 2, ... (mod 256) of `count` images of c x h x w.
Bytes ramp(std::int64_t n) {
  Bytes b(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    b[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>((i * 7) % 256);
  return b;
}

// A train/test pair of .npy files under `dir` with the default names.
void write_npy_set(const TempDir& dir, int train, int test, int c = 1, int h = 4, int w = 4) {
  const std::int64_t size = std::int64_t{c} * h * w;
  write_file(dir.file("train_images.npy"), npy("|u1", {train, c, h, w}, ramp(train * size)));
  write_file(dir.file("test_images.npy"), npy("|u1", {test, c, h, w}, ramp(test * size)));
  std::vector<std::int64_t> tl(train), sl(test);
  for (int i = 0; i < train; ++i) tl[i] = i % 3;
  for (int i = 0; i < test; ++i) sl[i] = (i + 1) % 3;
  write_file(dir.file("train_labels.npy"), npy("<i8", {train}, bytes_of(tl)));
  write_file(dir.file("test_labels.npy"), npy("<i8", {test}, bytes_of(sl)));
}

template <class E>
void require_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    FAIL("no error thrown");
  } catch (const E& e) {
    INFO(e.what());
    for (const auto& p : parts) CHECK_THAT(std::string(e.what()), Contains(p));
  }
}

// HDF5: one dataset written whole, intermediate groups created.
void h5_put(hid_t file, const std::string& name, hid_t file_type, hid_t mem_type,
            const std::vector<hsize_t>& dims, const void* data, bool chunked_gzip = false) {
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  if (chunked_gzip) {
    std::vector<hsize_t> chunk = dims;
    chunk[0] = 2;  // two images a chunk: reads cross chunk borders
    H5Pset_chunk(dcpl, static_cast<int>(chunk.size()), chunk.data());
    H5Pset_deflate(dcpl, 4);
  }
  const hid_t d = H5Dcreate2(file, name.c_str(), file_type, space, lcpl, dcpl, H5P_DEFAULT);
  REQUIRE(d >= 0);
  REQUIRE(H5Dwrite(d, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
  H5Dclose(d);
  H5Pclose(dcpl);
  H5Pclose(lcpl);
  H5Sclose(space);
}

// Raw (not standardised) images of `ds` as the reader gives them.
std::vector<float> raw_images(const Dataset& ds) {
  std::vector<float> out(static_cast<std::size_t>(ds.count * ds.image_size()));
  ds.read(0, ds.count, out.data());
  return out;
}

}  // namespace

TEST_CASE("read_npy: uint8 and float32 images, any integer labels, limit, classes", "[data][npy]") {
  TempDir dir;
  const Bytes px = ramp(3 * 2 * 2 * 3);
  write_file(dir.file("x.npy"), npy("|u1", {3, 2, 2, 3}, px));
  write_file(dir.file("y.npy"), npy("|u1", {3}, {4, 0, 9}));
  const Dataset ds = read_npy(dir.file("x.npy"), dir.file("y.npy"));
  CHECK(ds.count == 3);
  CHECK((ds.channels == 2 && ds.height == 2 && ds.width == 3));
  CHECK(ds.classes == 10);  // the largest label + 1
  CHECK_FALSE(ds.in_memory());
  CHECK(ds.labels == std::vector<std::int32_t>{4, 0, 9});
  const auto raw = raw_images(ds);
  for (std::size_t i = 0; i < px.size(); ++i) CHECK(raw[i] == px[i] / 255.0f);

  // N x H x W is one channel; float32 kept as stored; labels (N, 1), int16
  // big-endian (byte-swapped), format version 2.0.
  const std::vector<float> f = {0.5f, -1.25f, 3.0f, 1e-3f, 7.0f, 8.0f, 9.0f, 10.0f};
  write_file(dir.file("f.npy"), npy("<f4", {2, 2, 2}, bytes_of(f), false, 2));
  write_file(dir.file("l.npy"), npy(">i2", {2, 1}, {0x00, 0x02, 0x01, 0x00}));
  const Dataset fs_ = read_npy(dir.file("f.npy"), dir.file("l.npy"), 0, 300);
  CHECK((fs_.channels == 1 && fs_.height == 2 && fs_.width == 2));
  CHECK(fs_.labels == std::vector<std::int32_t>{2, 256});
  CHECK(fs_.classes == 300);
  CHECK(raw_images(fs_) == f);

  const Dataset one = read_npy(dir.file("x.npy"), dir.file("y.npy"), 1);
  CHECK(one.count == 1);
  CHECK(one.labels == std::vector<std::int32_t>{4});
  CHECK(one.classes == 5);
}

TEST_CASE("read_npy: malformed files are DataError (65) naming the file and what is wrong",
          "[data][npy]") {
  TempDir dir;
  const std::string x = dir.file("x.npy"), y = dir.file("y.npy");
  write_file(y, npy("<i8", {2}, bytes_of(std::vector<std::int64_t>{0, 1})));
  auto images = [&](const Bytes& b) {
    write_file(x, b);
    return [&] { (void)read_npy(x, y); };
  };
  require_error<DataError>(images({'n', 'o', 't', ' ', 'n', 'p', 'y', '!', '!', '!', '!'}),
                           {x, "not a NumPy .npy file"});
  require_error<DataError>(images(npy("<f8", {2, 1, 2, 2}, Bytes(64))),
                           {x, "wrong dtype '<f8' for images", "astype('float32')"});
  require_error<DataError>(images(npy(">f4", {2, 1, 2, 2}, Bytes(32))), {x, "'>f4'"});
  require_error<DataError>(images(npy("|u1", {2, 1, 2, 2}, Bytes(8), true)),
                           {x, "Fortran-ordered", "ascontiguousarray"});
  require_error<DataError>(images(npy("|u1", {2, 8}, Bytes(16))),
                           {x, "wrong shape", "(2, 8)", "N x C x H x W"});
  require_error<DataError>(images(npy("|u1", {0, 1, 2, 2}, Bytes())), {x, "empty"});
  require_error<DataError>(images(npy("|u1", {2, 1, 2, 2}, Bytes(7))),
                           {x, "truncated", "needs", "the file has"});
  require_error<DataError>(images(npy("|u1", {2, 1, 2, 2}, Bytes(9))), {x, "1 trailing bytes"});
  require_error<DataError>(images(npy("|u1", {3, 1, 2, 2}, Bytes(12))),
                           {y, "image/label count mismatch", "expected 3 labels", "found 2"});
  Bytes bad_header = npy("|u1", {2, 1, 2, 2}, Bytes(8));
  bad_header[6] = 9;
  require_error<DataError>(images(bad_header), {x, "format version 9"});

  write_file(x, npy("|u1", {2, 1, 2, 2}, Bytes(8)));
  auto labels = [&](const Bytes& b) {
    write_file(y, b);
    return [&] { (void)read_npy(x, y, 0, 2); };
  };
  require_error<DataError>(labels(npy("<f4", {2}, Bytes(8))),
                           {y, "wrong dtype '<f4' for labels", "integers"});
  require_error<DataError>(labels(npy("<i8", {2, 10}, Bytes(160))),
                           {y, "wrong shape", "(N,) or (N, 1)", "argmax"});
  require_error<DataError>(labels(npy("|i1", {2}, {0, 0xff})),
                           {y, "label out of range at index 1", "expected 0..1", "found -1"});
  require_error<DataError>(labels(npy("|u1", {2}, {1, 2})),
                           {y, "label out of range at index 1", "data.classes = 2", "found 2"});
}

TEST_CASE("read_npy: a missing file is MissingInputError (66) naming it", "[data][npy]") {
  TempDir dir;
  write_npy_set(dir, 4, 2);
  require_error<MissingInputError>(
      [&] { (void)read_npy(dir.file("nope.npy"), dir.file("train_labels.npy")); },
      {dir.file("nope.npy"), "cannot open"});
  require_error<MissingInputError>(
      [&] { (void)read_npy(dir.file("train_images.npy"), dir.file("nope.npy")); },
      {dir.file("nope.npy")});
  LoadOptions opt;
  opt.name = config::DataSet::kNpy;
  opt.path = dir.str();
  opt.test_labels = "labels_of_test";
  require_error<MissingInputError>([&] { (void)load(opt); }, {dir.file("labels_of_test.npy")});
}

TEST_CASE("read_npy: a non-finite float32 pixel is a DataError naming the image", "[data][npy]") {
  TempDir dir;
  std::vector<float> f(2 * 4, 0.25f);
  f[6] = std::numeric_limits<float>::quiet_NaN();
  write_file(dir.file("train_images.npy"), npy("<f4", {2, 1, 2, 2}, bytes_of(f)));
  write_file(dir.file("test_images.npy"),
             npy("<f4", {1, 1, 2, 2}, bytes_of(std::vector<float>(4, 1.0f))));
  const Bytes l = bytes_of(std::vector<std::int64_t>{0, 1});
  write_file(dir.file("train_labels.npy"), npy("<i8", {2}, l));
  write_file(dir.file("test_labels.npy"), npy("<i8", {1}, bytes_of(std::vector<std::int64_t>{1})));
  LoadOptions opt;
  opt.name = config::DataSet::kNpy;
  opt.path = dir.str();
  require_error<DataError>([&] { (void)load(opt); },
                           {dir.file("train_images.npy"), "image 1 holds NaN at element 2"});
}

TEST_CASE("load npy: standardised as the same pixels in memory, batches alike", "[data][npy]") {
  TempDir dir;
  write_npy_set(dir, 10, 4, 2, 3, 3);
  LoadOptions opt;
  opt.name = config::DataSet::kNpy;
  opt.path = dir.str();
  TrainTest disk = load(opt);
  CHECK(disk.train.name == "npy");
  CHECK(disk.train.classes == 3);
  CHECK(disk.test.classes == 3);

  // The same pixels, in memory, through the same standardisation.
  TrainTest mem;
  for (auto [ds, n] : {std::pair{&mem.train, 10}, std::pair{&mem.test, 4}}) {
    ds->count = n;
    ds->channels = 2;
    ds->height = ds->width = 3;
    ds->classes = 3;
    const Bytes px = ramp(n * 18);
    for (auto b : px) ds->images.push_back(b / 255.0f);
    ds->labels.resize(n);
  }
  standardize(mem.train, mem.test);
  CHECK(raw_images(disk.train) == mem.train.images);
  CHECK(raw_images(disk.test) == mem.test.images);

  BatchLoader a(disk.train, 4, 7, 0, 1, false, {}), b(mem.train, 4, 7, 0, 1, false, {});
  for (int step = 0; step < 5; ++step) {
    a.next();
    b.next();
    CHECK(std::equal(a.images(), a.images() + 4 * 18, b.images()));
  }
  // A limited training set and its test set still agree on the classes.
  opt.limit_train = 1;
  TrainTest lim = load(opt);
  CHECK(lim.train.count == 1);
  CHECK(lim.train.classes == 3);  // test labels reach 2
}

TEST_CASE("load npy: train and test of other image shapes are refused", "[data][npy]") {
  TempDir dir;
  write_npy_set(dir, 4, 2);
  write_file(dir.file("test_images.npy"), npy("|u1", {2, 1, 5, 4}, Bytes(40)));
  LoadOptions opt;
  opt.name = config::DataSet::kNpy;
  opt.path = dir.str();
  require_error<DataError>(
      [&] { (void)load(opt); },
      {dir.file("test_images.npy"), "image shape mismatch", "1x4x4", "found 1x5x4"});
}

TEST_CASE("read_hdf5: datasets by name, any layout, uint8 and float32", "[data][hdf5]") {
  TempDir dir;
  const std::string path = dir.file("set.h5");
  const Bytes px = ramp(5 * 3 * 4 * 4);
  const std::vector<float> fpx = {1.5f, -2.0f, 0.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f};
  const std::vector<std::int64_t> labels = {3, 1, 4, 1, 5};
  const std::vector<std::uint8_t> small = {0, 7};
  {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_put(f, "train/images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {5, 3, 4, 4}, px.data(), true);
    h5_put(f, "train/labels", H5T_STD_I64BE, H5T_NATIVE_INT64, {5, 1}, labels.data());
    h5_put(f, "test_images", H5T_IEEE_F32BE, H5T_NATIVE_FLOAT, {2, 2, 2}, fpx.data());
    h5_put(f, "test_labels", H5T_STD_U8LE, H5T_NATIVE_UINT8, {2}, small.data());
    H5Fclose(f);
  }
  const Dataset tr = read_hdf5(path, "train/images", "train/labels");
  CHECK(tr.name == "hdf5");
  CHECK((tr.count == 5 && tr.channels == 3 && tr.height == 4 && tr.width == 4));
  CHECK(tr.labels == std::vector<std::int32_t>{3, 1, 4, 1, 5});
  CHECK(tr.classes == 6);
  const auto raw = raw_images(tr);
  for (std::size_t i = 0; i < px.size(); ++i) CHECK(raw[i] == px[i] / 255.0f);
  std::vector<float> two(2 * 48);  // a read across the chunk border (images 1, 2)
  tr.source->read(1, 2, two.data());
  CHECK(std::equal(two.begin(), two.end(), raw.begin() + 48));

  const Dataset te = read_hdf5(path, "test_images", "test_labels", 0, 8);
  CHECK((te.channels == 1 && te.height == 2 && te.width == 2 && te.classes == 8));
  CHECK(raw_images(te) == fpx);  // big-endian in the file, converted by HDF5
  CHECK(read_hdf5(path, "train/images", "train/labels", 2).count == 2);
}

TEST_CASE("read_hdf5: errors name the file, the dataset and what is wrong", "[data][hdf5]") {
  TempDir dir;
  const std::string path = dir.file("set.h5");
  const std::vector<double> d8(8, 0.5);
  const std::vector<std::int64_t> labels = {0, 1};
  const std::vector<std::int64_t> bad_labels = {0, 12};
  const std::vector<float> nan = {0, 0, 0, 0, 0, 0, std::numeric_limits<float>::infinity(), 0};
  const Bytes px(8);
  {
    const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_put(f, "images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {2, 1, 2, 2}, px.data());
    h5_put(f, "doubles", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {2, 1, 2, 2}, d8.data());
    h5_put(f, "flat", H5T_STD_U8LE, H5T_NATIVE_UINT8, {8}, px.data());
    h5_put(f, "g/labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {2}, labels.data());
    h5_put(f, "bad_labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {2}, bad_labels.data());
    h5_put(f, "three_labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {3},
           std::vector<std::int64_t>{0, 0, 0}.data());
    h5_put(f, "float_labels", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {2}, d8.data());
    h5_put(f, "inf", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {2, 1, 2, 2}, nan.data());
    H5Fclose(f);
  }
  require_error<MissingInputError>(
      [&] { (void)read_hdf5(path, "train_images", "g/labels"); },
      {path, "no dataset 'train_images'", "g/labels (2,) int64", "images (2, 1, 2, 2) uint8"});
  require_error<MissingInputError>([&] { (void)read_hdf5(path, "images", "g/nope"); },
                                   {path, "no dataset 'g/nope' (the labels)"});
  require_error<MissingInputError>([&] { (void)read_hdf5(dir.file("no.h5"), "a", "b"); },
                                   {dir.file("no.h5"), "cannot open the HDF5 file"});
  write_file(dir.file("text.h5"), {'h', 'e', 'l', 'l', 'o'});
  require_error<DataError>([&] { (void)read_hdf5(dir.file("text.h5"), "a", "b"); },
                           {dir.file("text.h5"), "not an HDF5 file"});
  require_error<DataError>([&] { (void)read_hdf5(path, "doubles", "g/labels"); },
                           {path, "dataset doubles", "wrong type float64 for images"});
  require_error<DataError>([&] { (void)read_hdf5(path, "flat", "g/labels"); },
                           {path, "dataset flat", "wrong shape", "(8,)"});
  require_error<DataError>([&] { (void)read_hdf5(path, "images", "three_labels"); },
                           {"dataset three_labels", "count mismatch", "expected 2", "found 3"});
  require_error<DataError>([&] { (void)read_hdf5(path, "images", "float_labels"); },
                           {"dataset float_labels", "wrong type float64 for labels"});
  require_error<DataError>([&] { (void)read_hdf5(path, "images", "bad_labels", 0, 10); },
                           {"dataset bad_labels", "label out of range at index 1", "found 12"});
  const Dataset inf = read_hdf5(path, "inf", "g/labels");
  require_error<DataError>([&] { (void)raw_images(inf); },
                           {"dataset inf", "image 1 holds an infinity at element 2"});
}

TEST_CASE("load hdf5 and npy of the same arrays give the same standardised images",
          "[data][hdf5][npy]") {
  TempDir dir;
  write_npy_set(dir, 6, 3, 1, 4, 4);
  const Bytes tr = ramp(6 * 16), te = ramp(3 * 16);
  std::vector<std::int64_t> tl(6), sl(3);
  for (int i = 0; i < 6; ++i) tl[i] = i % 3;
  for (int i = 0; i < 3; ++i) sl[i] = (i + 1) % 3;
  const std::string h5 = dir.file("set.h5");
  {
    const hid_t f = H5Fcreate(h5.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    h5_put(f, "train_images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {6, 1, 4, 4}, tr.data(), true);
    h5_put(f, "train_labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {6}, tl.data());
    h5_put(f, "test_images", H5T_STD_U8LE, H5T_NATIVE_UINT8, {3, 1, 4, 4}, te.data());
    h5_put(f, "test_labels", H5T_STD_I64LE, H5T_NATIVE_INT64, {3}, sl.data());
    H5Fclose(f);
  }
  LoadOptions a, b;
  a.name = config::DataSet::kNpy;
  a.path = dir.str();
  b.name = config::DataSet::kHdf5;
  b.path = h5;
  const TrainTest x = load(a), y = load(b);
  CHECK(raw_images(x.train) == raw_images(y.train));
  CHECK(raw_images(x.test) == raw_images(y.test));
  CHECK(x.train.labels == y.train.labels);
  CHECK(x.train.mean == y.train.mean);
  CHECK(y.test.mean == y.train.mean);  // the test set takes the training statistics
}
