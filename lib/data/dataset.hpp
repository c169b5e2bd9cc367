// Image classification data sets and their loaders. Images are float32,
// NCHW, scaled to [0, 1] (uint8 pixels) then standardised with the training
// set's per-channel mean/std; labels are int32 in [0, classes). IDX, CIFAR-10
// and synthetic sets live in memory; NumPy and HDF5 sets stay on disk (an
// ImageSource) and are read a batch at a time, so a set larger than memory
// trains (docs/data.md).
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/state.hpp"
#include "config/enums.hpp"

namespace syncopt::data {

// Where the Debian package dataset-fashion-mnist installs the data set.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Images that stay in a file: a memory-mapped .npy array or an HDF5
// dataset. Thread-safe (workers and the evaluator may read at once).
class ImageSource {
 public:
  virtual ~ImageSource() = default;
  // Images [first, first + n) into out [n, C, H, W]: uint8 pixels divided
  // by 255, float32 as stored (a non-finite value is a DataError naming the
  // file and the image).
  virtual void read(std::int64_t first, std::int64_t n, float* out) const = 0;
  // Done with images [first, first + n) for now: a memory map gives their
  // pages back (they stay in the page cache), so one pass over a set larger
  // than memory does not grow the process.
  virtual void release(std::int64_t /*first*/, std::int64_t /*n*/) const {}
  // The file (and dataset) for messages.
  virtual std::string where() const = 0;
};

struct Dataset {
  std::string name;
  std::int64_t count = 0;
  int channels = 0, height = 0, width = 0;
  int classes = 0;
  // In memory: count * channels * height * width, standardised in place.
  // Empty when `source` is set.
  std::vector<float> images;
  std::vector<std::int32_t> labels;  // count
  // On disk: the raw images, standardised as they are read with the
  // training set's per-channel `mean` and `inv_std` (set by standardize for
  // every set; a set in memory holds its images standardised already).
  std::shared_ptr<const ImageSource> source;
  std::vector<float> mean, inv_std;

  std::int64_t image_size() const { return std::int64_t{channels} * height * width; }
  bool in_memory() const { return source == nullptr; }
  // In-memory sets only (tests, synthetic data); read() works for both.
  const float* image(std::int64_t i) const { return images.data() + i * image_size(); }
  // Standardised images [first, first + n) into out [n, C, H, W].
  void read(std::int64_t first, std::int64_t n, float* out) const;
};

struct TrainTest {
  Dataset train;
  Dataset test;
};

// Readers. Each throws MissingInputError (exit 66) when a file is missing or
// unreadable and DataError (exit 65) when it is malformed, with a one-line
// message: the path, what was expected and what was found. Header sizes are
// bounded before anything is allocated.

// One pair of MNIST-format IDX files (images idx3 ubyte, labels idx1 ubyte),
// gzip-compressed or plain (detected from the content, not the name).
// `limit` > 0 keeps the first `limit` examples (the whole files are still
// checked); labels must lie in [0, classes).
Dataset read_idx(const std::string& images_path, const std::string& labels_path,
                 std::int64_t limit = 0, int classes = 10);

// CIFAR-10 binary batches (each record: 1 label byte + 3072 image bytes).
Dataset read_cifar10(const std::vector<std::string>& batch_paths, std::int64_t limit = 0);

// NumPy .npy files (format 1.0 to 3.0): images N x C x H x W (or N x H x W,
// one channel) of uint8 or little-endian float32, C-ordered, memory-mapped;
// labels (N) or (N, 1) of any integer type, read into memory. `classes` > 0:
// labels must lie in [0, classes); 0: any label >= 0, classes = the largest
// + 1. `limit` > 0 keeps the first `limit` examples.
Dataset read_npy(const std::string& images_path, const std::string& labels_path,
                 std::int64_t limit = 0, int classes = 0);

// Two datasets of one HDF5 file, by name (a path inside the file, e.g.
// "train/images"), with the shapes and element types read_npy takes
// (integer labels of any width and byte order); images are read with
// hyperslabs, a batch at a time, through HDF5's chunk cache.
Dataset read_hdf5(const std::string& file, const std::string& images_name,
                  const std::string& labels_name, std::int64_t limit = 0, int classes = 0);

// Deterministic synthetic classification data: `classes` random prototype
// images of shape c x h x w plus seeded noise; learnable by every model.
// The prototypes depend only on the shape and `classes`, not on `seed`, so
// sets made with different seeds (train, test) are draws of the same task.
// Pixels are multiples of 1/255 in [0, 1] (not standardised); the same seed
// gives the same bytes on every machine and standard library.
Dataset make_synthetic(std::int64_t count, int channels, int height, int width, int classes,
                       std::uint64_t seed);

// Data set by name as in the config: "fashion-mnist" and "idx" read
// {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] under `path`; "cifar10"
// reads data_batch_{1..5}.bin and test_batch.bin under `path`; "npy" reads
// <path>/<array>.npy for the four array names; "hdf5" the four datasets of
// the file `path`; "synthetic" makes train/test sets from `seed`. Normalises
// both with the train statistics.
struct LoadOptions {
  config::DataSet name = config::DataSet::kFashionMnist;
  std::string path;
  // npy, hdf5: the arrays' names (file stems, dataset paths); classes as
  // read_npy takes it, the same for both sets.
  std::string train_images = "train_images", train_labels = "train_labels";
  std::string test_images = "test_images", test_labels = "test_labels";
  int classes = 0;
  std::int64_t limit_train = 0;
  std::int64_t limit_test = 0;
  std::int64_t synthetic_train = 2048;
  std::int64_t synthetic_test = 512;
  std::uint64_t seed = 1;
};
TrainTest load(const LoadOptions& opt);

// npy, hdf5: both sets opened (headers and shapes checked, labels read and
// checked, no image read), not standardised: what --dry-run and the shape
// check before training need to know of the files.
TrainTest open_on_disk(const LoadOptions& opt);

// Subtract the per-channel mean and divide by the std of `train` in both
// sets: in place for a set in memory, as it is read for one on disk (one
// pass over the training file, its pages released as it goes; a float32
// test file is read once too, for its non-finite values).
void standardize(Dataset& train, Dataset& test);

// Random small rotations and zooms (the paper's appendix), applied to one
// image in place (bilinear sampling about the image centre; pixels that fall
// outside are filled with the minimum of that image channel, the background
// of a standardised image). Draws the angle then the scale from `rng`, also
// when both ranges are zero. `scratch` is resized.
struct AugmentOptions {
  double max_rotate_deg = 10.0;
  double max_zoom = 0.1;
};
void augment_image(float* image, int channels, int height, int width, const AugmentOptions& opt,
                   std::mt19937_64& rng, std::vector<float>& scratch);

// A seeded per-epoch permutation of [0, count), sharded across `shards`
// readers: reader `shard` sees positions shard, shard + shards, ... of the
// epoch's permutation. Epoch e of seed s is the same on every rank.
// Needs count >= shards >= 1 and 0 <= shard < shards (else ConfigError).
class EpochSampler {
 public:
  EpochSampler(std::int64_t count, std::uint64_t seed, int shard = 0, int shards = 1);
  // Fill `indices` with the next `batch` example indices, starting the next
  // epoch (new permutation) when the current one is exhausted.
  void next_batch(std::int64_t batch, std::vector<std::int64_t>& indices);
  // Moves on by `examples` without listing them (as next_batch would).
  void skip(std::uint64_t examples);
  std::int64_t epoch() const { return m_epoch; }

  // The epoch and the position in it; the permutation is recomputed from
  // the seed and the epoch on restore. restore() needs the same count, seed,
  // shard and shards (else ConfigError: the position would mean other
  // examples), and a position inside the epoch (else DataError). A sampler
  // continued on another number of readers (continue_on) also holds a carry:
  // the examples of the epochs begun before, taken first (field "carry",
  // present only when not empty).
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);

 private:
  void reshuffle();
  std::int64_t m_count;
  std::uint64_t m_seed;
  int m_shard, m_shards;
  std::int64_t m_epoch = 0;
  std::vector<std::int64_t> m_perm;  // this reader's part of the epoch's permutation
  std::size_t m_pos = 0;
  std::vector<std::int64_t> m_carry;  // examples left of earlier epochs, taken first
  std::size_t m_carry_pos = 0;
};

// A run's samplers continued on `shards` readers instead of the ones that
// saved `old` (their states, one per old reader, in reader order: docs/
// design.md §10, "Resuming on another shape"). Every example of an epoch
// some old reader had begun and that no old reader had taken is taken once,
// by exactly one new reader, before any new epoch: the rest of each such
// epoch, in the permutation's order, dealt round-robin (reader r takes the
// r-th, (r + shards)-th, ... of them) as each new reader's carry; after it
// every new reader starts the epoch after the last one begun, sharded as a
// fresh sampler of `shards` readers would. Returns the new readers' states.
std::vector<checkpoint::State> continue_on(const std::vector<checkpoint::State>& old, int shards);

// Portable random draws: same values on every machine and standard library
// (the std:: distributions are implementation-defined).
double uniform01(std::mt19937_64& rng);                              // [0, 1), 53 bits
std::uint64_t uniform_below(std::mt19937_64& rng, std::uint64_t n);  // [0, n), unbiased; n >= 1

}  // namespace syncopt::data
