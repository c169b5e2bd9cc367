// Data sets by name (load), train-statistics standardisation, the seeded
// synthetic set and the portable random draws the data module uses.
#include "data/dataset.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "common/seed.hpp"

namespace syncopt::data {

double uniform01(std::mt19937_64& rng) {
  // The top 53 bits as a double: exact, so identical everywhere.
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n) {
  // Rejection of the low 2^64 mod n values removes the modulo bias.
  const std::uint64_t threshold = (0 - n) % n;
  for (;;) {
    const std::uint64_t r = rng();
    if (r >= threshold) return r % n;
  }
}

namespace {

// Approximately N(0, 1) as the Irwin-Hall sum of 12 uniforms minus 6: only
// additions of exact doubles, so unlike Box-Muller (log, cos) it gives the
// same bits on every libm.
double approx_normal(std::mt19937_64& rng) {
  double s = 0.0;
  for (int i = 0; i < 12; ++i) s += uniform01(rng);
  return s - 6.0;
}

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// The .gz file if present, else the plain one; a MissingInputError naming
// the .gz path (and the plain alternative) if neither exists.
std::string pick_idx_file(const std::string& dir, const std::string& stem, bool fashion) {
  const std::string base = dir + "/" + stem;
  if (is_file(base + ".gz")) return base + ".gz";
  if (is_file(base)) return base;
  std::string hint = "check data.path in the config";
  if (dir.rfind(kFashionMnistDir, 0) == 0)
    hint = "install it with `apt-get install dataset-fashion-mnist`";
  else if (fashion)
    hint += " (`apt-get install dataset-fashion-mnist` puts Fashion-MNIST in " +
            std::string(kFashionMnistDir) + ")";
  throw MissingInputError(base + ".gz: no such file (nor " + stem + " uncompressed) in " + dir +
                          "; " + hint);
}

}  // namespace

Dataset make_synthetic(std::int64_t count, int channels, int height, int width, int classes,
                       std::uint64_t seed) {
  // Shapes: prototypes [classes][c*h*w], output images [count][c*h*w].
  if (count < 1 || channels < 1 || height < 1 || width < 1 || classes < 1 || classes > 256)
    throw ConfigError(
        "make_synthetic: need count, channels, height, width >= 1 and classes in "
        "1..256, found count " +
        std::to_string(count) + ", shape " + std::to_string(channels) + "x" +
        std::to_string(height) + "x" + std::to_string(width) + ", classes " +
        std::to_string(classes));
  Dataset ds;
  ds.name = "synthetic";
  ds.count = count;
  ds.channels = channels;
  ds.height = height;
  ds.width = width;
  ds.classes = classes;
  const std::int64_t size = ds.image_size();

  // Prototypes: per class, a coarse grid of 4x4-pixel blocks with uniform
  // grey levels. Blocky rather than per-pixel so that the class signal
  // survives the pooling of the CNN as well as being linearly separable.
  // Seeded by the shape only: train and test sets share them.
  constexpr int kBlock = 4;
  std::mt19937_64 proto_rng(
      mix_seed(0x5eed'0f'5ca1eULL,
               mix_seed(static_cast<std::uint64_t>(size), static_cast<std::uint64_t>(classes))));
  const int grid_h = (height + kBlock - 1) / kBlock, grid_w = (width + kBlock - 1) / kBlock;
  std::vector<double> protos(static_cast<std::size_t>(classes * size));
  std::vector<double> grid(static_cast<std::size_t>(grid_h * grid_w));
  for (int k = 0; k < classes; ++k)
    for (int c = 0; c < channels; ++c) {
      for (double& g : grid) g = uniform01(proto_rng);
      double* p = protos.data() + k * size + std::int64_t{c} * height * width;
      for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x) p[y * width + x] = grid[(y / kBlock) * grid_w + x / kBlock];
    }

  // Examples: a uniformly drawn class's prototype plus Gaussian noise of
  // std 0.35, clamped and quantised to bytes like real pixel data.
  constexpr double kNoiseStd = 0.35;
  std::mt19937_64 rng(mix_seed(seed, 0xda7aULL));
  ds.labels.resize(static_cast<std::size_t>(count));
  ds.images.resize(static_cast<std::size_t>(count * size));
  for (std::int64_t i = 0; i < count; ++i) {
    const auto k = static_cast<int>(uniform_below(rng, static_cast<std::uint64_t>(classes)));
    ds.labels[i] = k;
    const double* p = protos.data() + k * size;
    float* out = ds.images.data() + i * size;
    for (std::int64_t j = 0; j < size; ++j) {
      const double v = std::clamp(p[j] + kNoiseStd * approx_normal(rng), 0.0, 1.0);
      out[j] = static_cast<float>(std::floor(v * 255.0 + 0.5)) / 255.0f;
    }
  }
  return ds;
}

void Dataset::read(std::int64_t first, std::int64_t n, float* out) const {
  if (first < 0 || n < 0 || first > count - n)
    throw InternalError(name + ": images " + std::to_string(first) + ".." +
                        std::to_string(first + n) + " asked of a set of " + std::to_string(count));
  const std::int64_t size = image_size();
  if (in_memory()) {
    std::copy_n(images.data() + first * size, n * size, out);
    return;
  }
  source->read(first, n, out);
  if (mean.empty()) return;  // not standardised (yet)
  const std::int64_t plane = std::int64_t{height} * width;
  for (std::int64_t i = 0; i < n; ++i)
    for (int c = 0; c < channels; ++c) {
      float* p = out + i * size + c * plane;
      for (std::int64_t j = 0; j < plane; ++j) p[j] = (p[j] - mean[c]) * inv_std[c];
    }
}

namespace {

// Per channel c over all pixels of `ds`: the sums of x and x^2, in double,
// image by image (the same order in memory and on disk). An on-disk set is
// read in chunks of about 16 MB whose pages are released as it goes.
void channel_sums(const Dataset& ds, std::vector<double>& sum, std::vector<double>& sumsq) {
  const std::int64_t plane = std::int64_t{ds.height} * ds.width;
  const std::int64_t size = ds.image_size();
  auto add = [&](const float* img) {
    for (int c = 0; c < ds.channels; ++c) {
      double s = 0.0, q = 0.0;
      for (std::int64_t j = 0; j < plane; ++j) {
        const double v = img[c * plane + j];
        s += v;
        q += v * v;
      }
      sum[c] += s;
      sumsq[c] += q;
    }
  };
  if (ds.in_memory()) {
    for (std::int64_t i = 0; i < ds.count; ++i) add(ds.image(i));
    return;
  }
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{4} << 20) / size);
  std::vector<float> buf(static_cast<std::size_t>(std::min(chunk, ds.count) * size));
  for (std::int64_t first = 0; first < ds.count; first += chunk) {
    const std::int64_t n = std::min(chunk, ds.count - first);
    ds.source->read(first, n, buf.data());
    for (std::int64_t i = 0; i < n; ++i) add(buf.data() + i * size);
    ds.source->release(first, n);
  }
}

// Reads every image of an on-disk set once (ImageSource::read refuses a
// non-finite value), releasing the pages as it goes.
void check_values(const Dataset& ds) {
  const std::int64_t size = ds.image_size();
  const std::int64_t chunk = std::max<std::int64_t>(1, (std::int64_t{4} << 20) / size);
  std::vector<float> buf(static_cast<std::size_t>(std::min(chunk, ds.count) * size));
  for (std::int64_t first = 0; first < ds.count; first += chunk) {
    const std::int64_t n = std::min(chunk, ds.count - first);
    ds.source->read(first, n, buf.data());
    ds.source->release(first, n);
  }
}

}  // namespace

void standardize(Dataset& train, Dataset& test) {
  // Per channel c over all train pixels: mean_c, std_c (population), both
  // accumulated in double; then x <- (x - mean_c) / std_c in train and test.
  if (train.count < 1) throw DataError(train.name + ": cannot standardise: empty training set");
  if (test.count > 0 && (test.channels != train.channels))
    throw DataError(test.name + ": cannot standardise: test set has " +
                    std::to_string(test.channels) + " channels, training set " +
                    std::to_string(train.channels));
  const std::int64_t plane = std::int64_t{train.height} * train.width;
  std::vector<double> sum(train.channels, 0.0), sumsq(train.channels, 0.0);
  channel_sums(train, sum, sumsq);
  if (!test.in_memory() && test.count > 0) check_values(test);
  const double n = static_cast<double>(train.count) * static_cast<double>(plane);
  std::vector<float> mean(train.channels), inv_std(train.channels);
  for (int c = 0; c < train.channels; ++c) {
    const double m = sum[c] / n;
    const double var = std::max(0.0, sumsq[c] / n - m * m);
    const double sd = std::sqrt(var);
    mean[c] = static_cast<float>(m);
    // A constant channel carries no information; leave its scale alone.
    inv_std[c] = static_cast<float>(sd > 1e-12 ? 1.0 / sd : 1.0);
  }
  for (Dataset* ds : {&train, &test}) {
    // Kept for every set: an on-disk one applies them as it reads, and an
    // exported model needs them (train/weights.hpp).
    ds->mean = mean;
    ds->inv_std = inv_std;
    if (!ds->in_memory()) continue;
    const std::int64_t ds_plane = std::int64_t{ds->height} * ds->width;
    for (std::int64_t i = 0; i < ds->count; ++i) {
      float* img = ds->images.data() + i * ds->image_size();
      for (int c = 0; c < ds->channels; ++c)
        for (std::int64_t j = 0; j < ds_plane; ++j)
          img[c * ds_plane + j] = (img[c * ds_plane + j] - mean[c]) * inv_std[c];
    }
  }
}

namespace {

// The test set of a NumPy or HDF5 pair must have the training set's image
// shape; with data.classes = 0 both take the larger inferred class count.
void match_sets(TrainTest& tt, const LoadOptions& opt, const std::string& test_where) {
  const Dataset &a = tt.train, &b = tt.test;
  if (a.channels != b.channels || a.height != b.height || a.width != b.width)
    throw DataError(test_where + ": image shape mismatch: expected " + std::to_string(a.channels) +
                    "x" + std::to_string(a.height) + "x" + std::to_string(a.width) +
                    " (C x H x W) as in the training set, found " + std::to_string(b.channels) +
                    "x" + std::to_string(b.height) + "x" + std::to_string(b.width));
  if (opt.classes == 0) tt.train.classes = tt.test.classes = std::max(a.classes, b.classes);
  tt.train.name = tt.test.name = config::to_string(opt.name);
}

// <dir>/<stem>.npy, or <dir>/<stem> when the name already ends in .npy.
std::string npy_file(const std::string& dir, const std::string& stem) {
  const bool has_ext = stem.size() >= 4 && stem.compare(stem.size() - 4, 4, ".npy") == 0;
  return dir + "/" + stem + (has_ext ? "" : ".npy");
}

}  // namespace

TrainTest open_on_disk(const LoadOptions& opt) {
  TrainTest tt;
  if (opt.name == config::DataSet::kNpy) {
    const std::string test_images = npy_file(opt.path, opt.test_images);
    tt.train = read_npy(npy_file(opt.path, opt.train_images), npy_file(opt.path, opt.train_labels),
                        opt.limit_train, opt.classes);
    tt.test =
        read_npy(test_images, npy_file(opt.path, opt.test_labels), opt.limit_test, opt.classes);
    match_sets(tt, opt, test_images);
  } else if (opt.name == config::DataSet::kHdf5) {
    tt.train =
        read_hdf5(opt.path, opt.train_images, opt.train_labels, opt.limit_train, opt.classes);
    tt.test = read_hdf5(opt.path, opt.test_images, opt.test_labels, opt.limit_test, opt.classes);
    match_sets(tt, opt, opt.path + ": dataset " + opt.test_images);
  } else {
    throw InternalError("data::open_on_disk: data.name = \"" +
                        std::string(config::to_string(opt.name)) + "\" is read into memory");
  }
  return tt;
}

TrainTest load(const LoadOptions& opt) {
  TrainTest tt;
  switch (opt.name) {
    case config::DataSet::kFashionMnist:
    case config::DataSet::kIdx: {
      const bool fashion = opt.name == config::DataSet::kFashionMnist;
      const std::string dir = opt.path.empty() && fashion ? kFashionMnistDir : opt.path;
      const std::string train_images = pick_idx_file(dir, "train-images-idx3-ubyte", fashion);
      const std::string train_labels = pick_idx_file(dir, "train-labels-idx1-ubyte", fashion);
      const std::string test_images = pick_idx_file(dir, "t10k-images-idx3-ubyte", fashion);
      const std::string test_labels = pick_idx_file(dir, "t10k-labels-idx1-ubyte", fashion);
      tt.train = read_idx(train_images, train_labels, opt.limit_train);
      tt.test = read_idx(test_images, test_labels, opt.limit_test);
      if (tt.train.height != tt.test.height || tt.train.width != tt.test.width)
        throw DataError(test_images + ": image size mismatch: expected " +
                        std::to_string(tt.train.height) + "x" + std::to_string(tt.train.width) +
                        " as in the training set, found " + std::to_string(tt.test.height) + "x" +
                        std::to_string(tt.test.width));
      tt.train.name = tt.test.name = config::to_string(opt.name);
      break;
    }
    case config::DataSet::kCifar10: {
      std::vector<std::string> train_paths;
      for (int b = 1; b <= 5; ++b)
        train_paths.push_back(opt.path + "/data_batch_" + std::to_string(b) + ".bin");
      tt.train = read_cifar10(train_paths, opt.limit_train);
      tt.test = read_cifar10({opt.path + "/test_batch.bin"}, opt.limit_test);
      break;
    }
    case config::DataSet::kNpy:
    case config::DataSet::kHdf5:
      tt = open_on_disk(opt);
      break;
    case config::DataSet::kSynthetic:
      // Train and test differ in seed (their examples) but share prototypes.
      tt.train = make_synthetic(opt.synthetic_train, 1, 28, 28, 10, mix_seed(opt.seed, 1));
      tt.test = make_synthetic(opt.synthetic_test, 1, 28, 28, 10, mix_seed(opt.seed, 2));
      break;
  }
  standardize(tt.train, tt.test);
  return tt;
}

}  // namespace syncopt::data
