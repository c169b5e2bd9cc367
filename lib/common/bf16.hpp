// bfloat16: the top 16 bits of an IEEE float (8 exponent bits, 7 stored
// mantissa bits; unit roundoff 2^-8), as a uint16_t. Conversions round to
// nearest, ties to even, as oneDNN, cuDNN and PyTorch do; NaN stays NaN.
// Used where syncopt moves bf16 itself: dropout on bf16 activations, and
// gradients and parameters on the wire (exchange.wire = "bf16").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace syncopt::bf16 {

// The relative rounding error of one conversion is at most this.
inline constexpr double kUnitRoundoff = 1.0 / 256.0;

inline float to_float(std::uint16_t h) {
  const std::uint32_t u = static_cast<std::uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline std::uint16_t from_float(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

// n floats to bf16 and back (the wire's encoding of a bucket).
inline void encode(const float* in, std::size_t n, std::uint16_t* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = from_float(in[i]);
}
inline void decode(const std::uint16_t* in, std::size_t n, float* out) {
  for (std::size_t i = 0; i < n; ++i) out[i] = to_float(in[i]);
}

}  // namespace syncopt::bf16
