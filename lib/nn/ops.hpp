// The hand-written (memory-bound, elementwise or per-unit) operators of the
// CPU backend: weight normalisation, ReLU and softmax cross-entropy, forward
// and backward. Templates so that the tests can run the very same code in
// double precision as a gradient-check oracle; the network uses float.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"

namespace syncopt::nn::ops {

// Weight normalisation (Salimans & Kingma 2016), one unit = one output
// channel / neuron: w[o, :] = g[o] * v[o, :] / ||v[o, :]||.
// v, w [units, fan_in]; g, norm [units] (norm is kept for the backward).
template <class T>
void weight_norm_forward(const T* v, const T* g, std::int64_t units, std::int64_t fan_in, T* w,
                         T* norm) {
#pragma omp parallel for if (units * fan_in > (1 << 16)) schedule(static)
  for (std::int64_t o = 0; o < units; ++o) {
    const T* vo = v + o * fan_in;
    T* wo = w + o * fan_in;
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (std::int64_t i = 0; i < fan_in; ++i) ss += static_cast<double>(vo[i]) * vo[i];
    // A unit whose v is exactly zero has no direction; keep it finite.
    const double n = std::max(std::sqrt(ss), 1e-30);
    norm[o] = static_cast<T>(n);
    const T scale = static_cast<T>(static_cast<double>(g[o]) / n);
#pragma omp simd
    for (std::int64_t i = 0; i < fan_in; ++i) wo[i] = scale * vo[i];
  }
}

// Backward of weight_norm_forward. dw [units, fan_in] is dL/dw; writes
// dL/dv (dv, [units, fan_in]) and dL/dg (dg, [units]). With n = ||v_o||:
//   dg_o = <dw_o, v_o> / n
//   dv_o = (g_o / n) * (dw_o - (dg_o / n) * v_o)
template <class T>
void weight_norm_backward(const T* dw, const T* v, const T* g, const T* norm, std::int64_t units,
                          std::int64_t fan_in, T* dv, T* dg) {
#pragma omp parallel for if (units * fan_in > (1 << 16)) schedule(static)
  for (std::int64_t o = 0; o < units; ++o) {
    const T* dwo = dw + o * fan_in;
    const T* vo = v + o * fan_in;
    T* dvo = dv + o * fan_in;
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t i = 0; i < fan_in; ++i) dot += static_cast<double>(dwo[i]) * vo[i];
    const double n = static_cast<double>(norm[o]);
    const double dgo = dot / n;
    dg[o] = static_cast<T>(dgo);
    const T a = static_cast<T>(static_cast<double>(g[o]) / n);
    const T b = static_cast<T>(dgo / n);
#pragma omp simd
    for (std::int64_t i = 0; i < fan_in; ++i) dvo[i] = a * (dwo[i] - b * vo[i]);
  }
}

// y = max(x, 0) over n elements (any layout; in place allowed).
template <class T>
void relu_forward(const T* x, std::int64_t n, T* y) {
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    y[i] = xi > T(0) ? xi : T(0);
  }
}

// dx = dy * [y > 0], using the ReLU's OUTPUT y (x > 0 iff y > 0), so a ReLU
// fused into the preceding conv / fc needs no copy of its input. In place ok.
template <class T>
void relu_backward(const T* y, const T* dy, std::int64_t n, T* dx) {
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) {
    // Unconditional loads: the select vectorises (a branch on the random
    // sign pattern mispredicts half the time).
    const T yi = y[i], dyi = dy[i];
    dx[i] = yi > T(0) ? dyi : T(0);
  }
}

// Mean softmax cross-entropy over the batch, with a numerically stable
// log-sum-exp. logits, dlogits [batch, classes]; labels [batch] in
// [0, classes). Returns the loss (accumulated in double); writes
// dL/dlogits = (softmax - onehot) / batch when dlogits is not null.
template <class T>
double softmax_cross_entropy(const T* logits, const std::int32_t* labels, std::int64_t batch,
                             std::int64_t classes, T* dlogits) {
  double total = 0.0;
  const double inv_batch = 1.0 / static_cast<double>(batch);
  for (std::int64_t r = 0; r < batch; ++r) {
    const T* z = logits + r * classes;
    const std::int32_t label = labels[r];
    if (label < 0 || label >= classes) {
      throw DataError("label " + std::to_string(label) + " of example " + std::to_string(r) +
                      " is outside [0, " + std::to_string(classes) +
                      "); the dataset's class count does not match the model");
    }
    const double zmax = static_cast<double>(*std::max_element(z, z + classes));
    double sum = 0.0;
    for (std::int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(z[k]) - zmax);
    const double lse = zmax + std::log(sum);
    total += lse - static_cast<double>(z[label]);
    if (dlogits != nullptr) {
      T* dz = dlogits + r * classes;
      for (std::int64_t k = 0; k < classes; ++k) {
        const double p = std::exp(static_cast<double>(z[k]) - lse);
        dz[k] = static_cast<T>((p - (k == label ? 1.0 : 0.0)) * inv_batch);
      }
    }
  }
  return total * inv_batch;
}

}  // namespace syncopt::nn::ops
