// Shapes, pixel conversion and label checks shared by the NumPy and HDF5
// readers (see arrays.hpp).
#include "data/arrays.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"

namespace syncopt::data::arrays {

std::string dims_text(const std::vector<std::int64_t>& dims) {
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}

ImageShape image_shape(const std::vector<std::int64_t>& dims, const std::string& where) {
  if (dims.size() != 3 && dims.size() != 4)
    throw DataError(where + ": wrong shape: expected images N x C x H x W (or N x H x W for one " +
                    "channel), found shape " + dims_text(dims) +
                    " (channels-last images N x H x W x C need .transpose(0, 3, 1, 2))");
  if (dims[0] < 1)
    throw DataError(where + ": empty: expected at least one image, found shape " + dims_text(dims));
  for (std::size_t d = 1; d < dims.size(); ++d)
    if (dims[d] < 1 || dims[d] > kMaxSide)
      throw DataError(where + ": wrong shape: expected every image dimension in 1.." +
                      std::to_string(kMaxSide) + ", found shape " + dims_text(dims));
  ImageShape s;
  s.count = dims[0];
  s.channels = dims.size() == 4 ? static_cast<int>(dims[1]) : 1;
  s.height = static_cast<int>(dims[dims.size() - 2]);
  s.width = static_cast<int>(dims[dims.size() - 1]);
  if (std::int64_t{s.channels} * s.height > kMaxImageSize / s.width)
    throw DataError(where + ": wrong shape: an image of shape " + dims_text(dims) +
                    " has more than " + std::to_string(kMaxImageSize) + " values");
  return s;
}

std::int64_t label_count(const std::vector<std::int64_t>& dims, const std::string& where) {
  if (dims.size() == 1 || (dims.size() == 2 && dims[1] == 1)) return dims[0];
  throw DataError(where + ": wrong shape: expected labels (N,) or (N, 1), found shape " +
                  dims_text(dims) + " (one-hot labels need .argmax(1))");
}

void u8_to_unit(const std::uint8_t* in, std::int64_t n, float* out) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i]) / 255.0f;
}

void check_finite(const float* p, std::int64_t n_images, std::int64_t size, std::int64_t first,
                  const std::string& where) {
  for (std::int64_t i = 0; i < n_images * size; ++i)
    if (!std::isfinite(p[i]))
      throw DataError(where + ": image " + std::to_string(first + i / size) + " holds " +
                      (std::isnan(p[i]) ? "NaN" : "an infinity") + " at element " +
                      std::to_string(i % size) + ": expected finite float32 pixels");
}

Dataset make_on_disk(const std::string& name, const ImageShape& shape,
                     std::shared_ptr<const ImageSource> source,
                     const std::vector<std::int64_t>& labels, const std::string& labels_where,
                     std::int64_t limit, int classes) {
  if (classes < 0 || classes > kMaxClasses)
    throw ConfigError(labels_where + ": classes must be in 0.." + std::to_string(kMaxClasses) +
                      " (0 = the largest label + 1), found " + std::to_string(classes));
  if (limit < 0)
    throw ConfigError(source->where() + ": limit must be >= 0 (0 = all), found " +
                      std::to_string(limit));
  if (static_cast<std::int64_t>(labels.size()) != shape.count)
    throw DataError(labels_where + ": image/label count mismatch: expected " +
                    std::to_string(shape.count) + " labels, one per image of " + source->where() +
                    ", found " + std::to_string(labels.size()));
  Dataset ds;
  ds.name = name;
  ds.count = limit == 0 ? shape.count : std::min(shape.count, limit);
  ds.channels = shape.channels;
  ds.height = shape.height;
  ds.width = shape.width;
  std::int64_t largest = 0;
  const std::int64_t bound = classes > 0 ? classes : kMaxClasses;
  ds.labels.resize(static_cast<std::size_t>(ds.count));
  for (std::int64_t i = 0; i < ds.count; ++i) {
    const std::int64_t l = labels[static_cast<std::size_t>(i)];
    if (l < 0 || l >= bound)
      throw DataError(labels_where + ": label out of range at index " + std::to_string(i) +
                      ": expected 0.." + std::to_string(bound - 1) +
                      (classes > 0 ? " (data.classes = " + std::to_string(classes) + ")" : "") +
                      ", found " + std::to_string(l));
    largest = std::max(largest, l);
    ds.labels[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(l);
  }
  ds.classes = classes > 0 ? classes : static_cast<int>(largest + 1);
  ds.source = std::move(source);
  return ds;
}

}  // namespace syncopt::data::arrays
