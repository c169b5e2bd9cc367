// What the NumPy and HDF5 readers share: the array shapes and element types
// they take, the conversion of pixels to float, the label checks, and the
// Dataset they make around an ImageSource. Internal to lib/data.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace syncopt::data::arrays {

// The element types an image array may have.
enum class Pixel { kU8, kF32 };

// Bounds checked before anything is sized from a header.
inline constexpr std::int64_t kMaxSide = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxImageSize = (std::int64_t{1} << 31) - 1;  // floats per image
inline constexpr int kMaxClasses = 100'000;

struct ImageShape {
  std::int64_t count = 0;
  int channels = 0, height = 0, width = 0;
  std::int64_t image_size() const { return std::int64_t{channels} * height * width; }
};

// dims N x C x H x W (or N x H x W: one channel), each >= 1 and within
// bounds; a DataError naming `where` otherwise.
ImageShape image_shape(const std::vector<std::int64_t>& dims, const std::string& where);
// dims (N) or (N, 1); a DataError naming `where` otherwise.
std::int64_t label_count(const std::vector<std::int64_t>& dims, const std::string& where);
std::string dims_text(const std::vector<std::int64_t>& dims);

// n values: uint8 -> x / 255 (exact, as the IDX reader); float32 checked
// finite (image `first` + i / size is named when not).
void u8_to_unit(const std::uint8_t* in, std::int64_t n, float* out);
void check_finite(const float* p, std::int64_t n_images, std::int64_t size, std::int64_t first,
                  const std::string& where);

// The Dataset of `count` images from `source` (already checked against the
// file) and their labels (read in full, one per image): the label count
// must equal the image count, `limit` > 0 keeps the first `limit`, and the
// kept labels lie in [0, classes) (classes > 0) or are >= 0 (classes = 0:
// the largest + 1, at most kMaxClasses).
Dataset make_on_disk(const std::string& name, const ImageShape& shape,
                     std::shared_ptr<const ImageSource> source,
                     const std::vector<std::int64_t>& labels, const std::string& labels_where,
                     std::int64_t limit, int classes);

}  // namespace syncopt::data::arrays
