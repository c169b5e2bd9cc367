// Data augmentation: small random rotations and zooms about the image
// centre (the paper's appendix), by inverse mapping and bilinear sampling.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "data/dataset.hpp"

namespace syncopt::data {

void augment_image(float* image, int channels, int height, int width, const AugmentOptions& opt,
                   std::mt19937_64& rng, std::vector<float>& scratch) {
  // image: [channels][height][width], float, transformed in place.
  // Output pixel p takes the input at centre + R(-theta) (p - centre) / scale,
  // the inverse of rotating by theta and zooming by scale; one (theta, scale)
  // for all channels. Both are drawn even when their range is zero, so the
  // rng stream does not depend on the options.
  const double theta = (2.0 * uniform01(rng) - 1.0) * opt.max_rotate_deg * std::numbers::pi / 180.0;
  const double scale = 1.0 + (2.0 * uniform01(rng) - 1.0) * opt.max_zoom;
  const std::size_t plane = static_cast<std::size_t>(height) * width;
  scratch.resize(plane * channels);
  const double cy = 0.5 * (height - 1), cx = 0.5 * (width - 1);
  const double inv_scale = scale > 1e-6 ? 1.0 / scale : 1e6;
  const double cos_t = std::cos(theta) * inv_scale, sin_t = std::sin(theta) * inv_scale;

  for (int c = 0; c < channels; ++c) {
    const float* src = image + c * plane;
    float* dst = scratch.data() + c * plane;
    // The background of a standardised image is its minimum, not 0.
    const float fill = *std::min_element(src, src + plane);
    auto at = [&](int y, int x) {
      return (y < 0 || y >= height || x < 0 || x >= width) ? fill : src[y * width + x];
    };
    for (int y = 0; y < height; ++y) {
      const double dy = y - cy;
      for (int x = 0; x < width; ++x) {
        const double dx = x - cx;
        // R(-theta) = [[cos, sin], [-sin, cos]] applied to (dx, dy).
        const double sx = cx + cos_t * dx + sin_t * dy;
        const double sy = cy - sin_t * dx + cos_t * dy;
        const double fx = std::floor(sx), fy = std::floor(sy);
        const int x0 = static_cast<int>(fx), y0 = static_cast<int>(fy);
        const float wx = static_cast<float>(sx - fx), wy = static_cast<float>(sy - fy);
        if (x0 < -1 || x0 >= width || y0 < -1 || y0 >= height) {
          dst[y * width + x] = fill;
          continue;
        }
        const float top = at(y0, x0) * (1.0f - wx) + at(y0, x0 + 1) * wx;
        const float bottom = at(y0 + 1, x0) * (1.0f - wx) + at(y0 + 1, x0 + 1) * wx;
        dst[y * width + x] = top * (1.0f - wy) + bottom * wy;
      }
    }
  }
  std::copy(scratch.begin(), scratch.end(), image);
}

}  // namespace syncopt::data
