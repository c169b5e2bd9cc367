// oneDNN's training primitives, one at a time, in FP32 and bf16, against the
// oneDNN this file is compiled with (2.x or 3.x API): the 64 -> 64 3x3
// convolution at batch 32 on 28x28 (forward, backward-data,
// backward-weights) and a 1024 x 1024 x 1024 inner product, on one thread.
// Prints, per primitive and type, the median of 20 runs after 3 warm-ups,
// GFLOP/s, and the implementation oneDNN chose (avx512_core_amx,
// avx512_core_bf16, avx512_core, ...). Two oneDNN versions are compared by
// building this file against each (-I and -L of its prefix, e.g. Debian's
// /usr and .deps/onednn-3.2.0 from scripts/fetch-onednn.py) and running both:
//
//   g++ -O2 -std=c++17 bench/dnnl_primitives.cpp -I$P/include -L$P/lib -Wl,-rpath,$P/lib
//     -ldnnl -fopenmp -o /tmp/p && OMP_NUM_THREADS=1 ONEDNN_VERBOSE=1 /tmp/p
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <unordered_map>
#include <vector>

using namespace dnnl;
using Tag = memory::format_tag;
using Dt = memory::data_type;

namespace {

engine eng(engine::kind::cpu, 0);
stream strm(eng);

double median_ms(const std::function<void()>& run) {
  for (int i = 0; i < 3; ++i) run();
  std::vector<double> t;
  for (int i = 0; i < 20; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    run();
    strm.wait();
    t.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

memory filled(const memory::desc& md) {
  memory m(md, eng);
  const std::size_t n = md.get_size();
  auto* p = static_cast<unsigned char*>(m.get_data_handle());
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<unsigned char>(0x3c + (i % 3));
  return m;
}

void report(const char* what, Dt dt, double ms, double flops, const std::string& impl) {
  std::printf("%-22s %-5s %9.3f ms %9.1f GFLOP/s  %s\n", what, dt == Dt::f32 ? "fp32" : "bf16", ms,
              flops / ms * 1e-6, impl.c_str());
}

void conv(Dt dt) {
  const memory::dim N = 32, C = 64, H = 28, W = 28, K = 3;
  const memory::dims src{N, C, H, W}, wei{C, C, K, K}, dst{N, C, H, W}, bias{C};
  const memory::dims strides{1, 1}, pad{1, 1};
  const memory::desc s(src, dt, Tag::any), w(wei, dt, Tag::any), d(dst, dt, Tag::any),
      b(bias, Dt::f32, Tag::a);
  const memory::desc wd(wei, dt == Dt::bf16 ? Dt::f32 : dt, Tag::any);  // FP32 weight gradient
  const double flops = 2.0 * N * C * H * W * C * K * K;
#if DNNL_VERSION_MAJOR >= 3
  convolution_forward::primitive_desc fpd(eng, prop_kind::forward_training,
                                          algorithm::convolution_direct, s, w, b, d, strides, pad,
                                          pad);
  convolution_backward_data::primitive_desc dpd(eng, algorithm::convolution_direct, s, w, d,
                                                strides, pad, pad, fpd);
  convolution_backward_weights::primitive_desc wpd(eng, algorithm::convolution_direct, s, wd, b, d,
                                                   strides, pad, pad, fpd);
#else
  convolution_forward::primitive_desc fpd(
      {prop_kind::forward_training, algorithm::convolution_direct, s, w, b, d, strides, pad, pad},
      eng);
  convolution_backward_data::primitive_desc dpd(
      {algorithm::convolution_direct, s, w, d, strides, pad, pad}, eng, fpd);
  convolution_backward_weights::primitive_desc wpd(
      {algorithm::convolution_direct, s, wd, b, d, strides, pad, pad}, eng, fpd);
#endif
  memory ms = filled(fpd.src_desc()), mw = filled(fpd.weights_desc()), md = filled(fpd.dst_desc()),
         mb = filled(b);
  convolution_forward f(fpd);
  report(
      "conv3x3 64 fwd", dt, median_ms([&] {
        f.execute(
            strm,
            {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_BIAS, mb}, {DNNL_ARG_DST, md}});
      }),
      flops, fpd.impl_info_str());
  memory mdd = filled(dpd.diff_dst_desc()), mds = filled(dpd.diff_src_desc()),
         mw2 = filled(dpd.weights_desc());
  convolution_backward_data bd(dpd);
  report("conv3x3 64 bwd data", dt, median_ms([&] {
           bd.execute(
               strm, {{DNNL_ARG_DIFF_DST, mdd}, {DNNL_ARG_WEIGHTS, mw2}, {DNNL_ARG_DIFF_SRC, mds}});
         }),
         flops, dpd.impl_info_str());
  memory ms3 = filled(wpd.src_desc()), mdd3 = filled(wpd.diff_dst_desc()),
         mdw = filled(wpd.diff_weights_desc()), mdb = filled(b);
  convolution_backward_weights bw(wpd);
  report("conv3x3 64 bwd weights", dt, median_ms([&] {
           bw.execute(strm, {{DNNL_ARG_SRC, ms3},
                             {DNNL_ARG_DIFF_DST, mdd3},
                             {DNNL_ARG_DIFF_WEIGHTS, mdw},
                             {DNNL_ARG_DIFF_BIAS, mdb}});
         }),
         flops, wpd.impl_info_str());
}

void fc(Dt dt) {
  const memory::dim M = 1024, K = 1024, N = 1024;
  const memory::desc s({M, K}, dt, Tag::any), w({N, K}, dt, Tag::any), d({M, N}, dt, Tag::any);
#if DNNL_VERSION_MAJOR >= 3
  inner_product_forward::primitive_desc pd(eng, prop_kind::forward_training, s, w, d);
#else
  inner_product_forward::primitive_desc pd({prop_kind::forward_training, s, w, d}, eng);
#endif
  memory ms = filled(pd.src_desc()), mw = filled(pd.weights_desc()), md = filled(pd.dst_desc());
  inner_product_forward f(pd);
  report("fc 1024^3 fwd", dt, median_ms([&] {
           f.execute(strm, {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}});
         }),
         2.0 * M * N * K, pd.impl_info_str());
}

}  // namespace

int main() {
  const dnnl_version_t* v = dnnl_version();
  std::printf("oneDNN %d.%d.%d, cpu isa %s\n", v->major, v->minor, v->patch, [] {
    switch (get_effective_cpu_isa()) {
      case cpu_isa::avx512_core_amx:
        return "avx512_core_amx";
      case cpu_isa::avx512_core_bf16:
        return "avx512_core_bf16";
      case cpu_isa::avx512_core_vnni:
        return "avx512_core_vnni";
      case cpu_isa::avx512_core:
        return "avx512_core";
      case cpu_isa::avx2:
        return "avx2";
      default:
        return "other";
    }
  }());
  for (const Dt dt : {Dt::f32, Dt::bf16}) {
    try {
      conv(dt);
      fc(dt);
    } catch (const dnnl::error& e) {
      std::printf("%s: %s\n", dt == Dt::f32 ? "fp32" : "bf16", e.what());
    }
  }
}
