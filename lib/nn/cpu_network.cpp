// CpuNetwork: runs a layer list (cpu_network.hpp) with oneDNN 2.6 primitives.
//
// Per batch size a Plan holds every primitive, memory object and reorder, so
// a step allocates nothing. Activations stay in the layouts oneDNN picks
// (format_tag::any, e.g. nChw8c on AVX2) from the first conv to the fc
// layers; a reorder is inserted only where two neighbouring primitives
// disagree (on AVX2: the 1-channel input stays NCHW, conv/pool run on
// nChw8c, fc1 takes a plain NCHW copy so that its 800k weights are used in
// the user's layout, with no per-step weight reorder; conv1's
// backward-weights reads an NHWC copy of its output gradient, as oneDNN 2.6
// has no AVX2 kernel for NCHW input with blocked gradient). ReLU is fused
// into the conv / fc as a post-op, and its backward
// masks the incoming gradient with the stored (post-ReLU) output. Weights
// live in the user's flat buffer in plain OIHW / [out, in]; per call the
// effective weights are computed once (weight norm) and reordered once to
// each primitive's preferred layout. The backward half of a plan is built on
// the first train_step of that batch size, so evaluation-only batch sizes
// cost no gradient buffers. A CpuNetwork is not thread-safe (one caller at a
// time); OpenMP inside oneDNN and the loops uses `threads` threads.
#include "nn/cpu_network.hpp"

#include <omp.h>

#include <algorithm>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/error.hpp"
#include "nn/ops.hpp"

namespace syncopt::nn::cpu {

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

Tag plain_tag(std::size_t ndims) {
  switch (ndims) {
    case 1:
      return Tag::a;
    case 2:
      return Tag::ab;
    case 3:
      return Tag::abc;
    case 4:
      return Tag::abcd;
    default:
      throw InternalError("no plain layout for a tensor of rank " + std::to_string(ndims));
  }
}

memory::desc plain_desc(const memory::dims& dims) {
  return {dims, Dt::f32, plain_tag(dims.size())};
}
memory::desc any_desc(const memory::dims& dims) { return {dims, Dt::f32, Tag::any}; }
std::int64_t float_count(const memory& m) {
  return static_cast<std::int64_t>(m.get_desc().get_size() / sizeof(float));
}
float* data_of(const memory& m) { return static_cast<float*>(m.get_data_handle()); }

template <class Pd>
bool is_reference(const Pd& pd) {
  return std::string(pd.impl_info_str()).find("ref") != std::string::npos;
}

// One primitive with its arguments, ready to execute.
struct Exec {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
  std::string what;  // "conv1 fwd: jit:avx2", for implementations()
};

// Batch-independent description of one layer.
struct LayerInfo {
  LayerSpec spec;
  memory::dims in_shape, out_shape;  // without the batch dimension
  bool has_params = false;
  std::int64_t units = 0, fan_in = 0;
  memory::dims w_dims;                          // {O, C, 3, 3}, {O, C, H, W} or {O, I}
  std::size_t w_off = 0, g_off = 0, b_off = 0;  // "<name>.v" (or .w), ".g", ".b"
  std::vector<float> w_eff, dw, norm;           // weight-norm scratch
};

struct LayerPlan {
  // Forward.
  memory src;                       // the primitive's input: t[i], or a reordered copy
  std::optional<Exec> src_reorder;  // t[i] -> src
  memory w_plain, w_fwd, bias;      // user-layout weights / primitive layout / bias
  std::optional<Exec> w_fwd_reorder;
  std::optional<Exec> fwd;
  memory workspace;  // max-pool indices
  dnnl::convolution_forward::primitive_desc conv_pd;
  dnnl::inner_product_forward::primitive_desc ip_pd;
  dnnl::pooling_forward::primitive_desc pool_pd;
  // Backward.
  memory::desc bwd_w_src_md, bwd_w_diff_dst_md;  // conv: layouts of backward-weights
  memory w_bwd, dw, dw_plain, diff_bias, diff_src, src_w, diff_dst_w;
  std::optional<Exec> w_bwd_reorder, bwd_data, diff_src_reorder, src_w_reorder, diff_dst_w_reorder,
      bwd_weights, dw_reorder;
};

struct Plan {
  int batch = 0;
  std::vector<memory> t, d;  // t[i]: input of layer i (t[0] = images), d[i] = dL/dt[i]
  std::vector<LayerPlan> layers;
  memory logits, dlogits;  // plain [batch, classes]
  std::optional<Exec> logits_reorder, dlogits_reorder;
  memory scratch;
  std::size_t scratch_nbytes = 0;
  bool has_backward = false, has_input_grad = false;
};

}  // namespace

struct CpuNetwork::Impl {
  NetSpec net;
  ParamLayout layout;
  int max_batch = 0;
  int threads = 0;
  std::int64_t classes = 0;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<LayerInfo> infos;
  std::map<int, std::unique_ptr<Plan>> plans;

  void set_threads() const {
    if (threads > 0) omp_set_num_threads(threads);
  }

  static dnnl::primitive_attr make_attr(bool relu) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (relu) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    return attr;
  }

  template <class Pd>
  static void note_scratch(Plan& plan, const Pd& pd) {
    plan.scratch_nbytes = std::max(plan.scratch_nbytes, pd.scratchpad_desc().get_size());
  }

  Exec make_reorder(Plan& plan, const memory& from, const memory& to, const std::string& what) {
    const dnnl::reorder::primitive_desc pd(engine, from.get_desc(), engine, to.get_desc(),
                                           make_attr(false));
    note_scratch(plan, pd);
    return Exec{dnnl::reorder(pd),
                {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}},
                what + ": " + pd.impl_info_str()};
  }

  // A user-layout memory whose data handle is set per call (params / grad /
  // images); no allocation.
  memory user_memory(const memory::desc& md) { return memory(md, engine, nullptr); }

  template <class Fn>
  void for_each_exec(Plan& plan, Fn&& fn) {
    for (LayerPlan& lp : plan.layers) {
      for (auto* e : {&lp.src_reorder, &lp.w_fwd_reorder, &lp.fwd, &lp.w_bwd_reorder, &lp.bwd_data,
                      &lp.diff_src_reorder, &lp.src_w_reorder, &lp.diff_dst_w_reorder,
                      &lp.bwd_weights, &lp.dw_reorder}) {
        if (*e) fn(**e);
      }
    }
    for (auto* e : {&plan.logits_reorder, &plan.dlogits_reorder}) {
      if (*e) fn(**e);
    }
  }

  void attach_scratch(Plan& plan) {
    const memory::desc md({static_cast<memory::dim>(std::max<std::size_t>(plan.scratch_nbytes, 1))},
                          Dt::u8, Tag::a);
    if (!plan.scratch || plan.scratch.get_desc().get_size() < plan.scratch_nbytes) {
      plan.scratch = memory(md, engine);
    }
    for_each_exec(plan, [&](Exec& e) { e.args[DNNL_ARG_SCRATCHPAD] = plan.scratch; });
  }

  // ---- plan construction -------------------------------------------------

  std::unique_ptr<Plan> build_forward(int batch) {
    auto plan = std::make_unique<Plan>();
    plan->batch = batch;
    const memory::dim n = batch;
    const std::size_t count = infos.size();
    plan->layers.resize(count);
    plan->t.resize(count + 1);
    plan->t[0] = user_memory(plain_desc({n, net.channels, net.height, net.width}));
    for (std::size_t i = 0; i < count; ++i) {
      LayerInfo& info = infos[i];
      LayerPlan& lp = plan->layers[i];
      const memory& in = plan->t[i];
      memory::dims out_dims = {n};
      out_dims.insert(out_dims.end(), info.out_shape.begin(), info.out_shape.end());
      memory::dims in_dims = {n};
      in_dims.insert(in_dims.end(), info.in_shape.begin(), info.in_shape.end());
      const dnnl::primitive_attr attr = make_attr(info.spec.relu);
      const std::string& name = info.spec.name;
      switch (info.spec.kind) {
        case LayerKind::kConv3x3: {
          std::tie(lp.conv_pd, lp.bwd_w_src_md, lp.bwd_w_diff_dst_md) =
              choose_conv(info, in.get_desc(), in_dims, out_dims, attr, i > 0);
          note_scratch(*plan, lp.conv_pd);
          plan->t[i + 1] = memory(lp.conv_pd.dst_desc(), engine);
          set_forward_weights(*plan, i, info, lp.conv_pd.src_desc(), lp.conv_pd.weights_desc());
          lp.fwd = Exec{dnnl::convolution_forward(lp.conv_pd),
                        {{DNNL_ARG_SRC, lp.src},
                         {DNNL_ARG_WEIGHTS, lp.w_fwd},
                         {DNNL_ARG_BIAS, lp.bias},
                         {DNNL_ARG_DST, plan->t[i + 1]}},
                        name + " fwd: " + lp.conv_pd.impl_info_str()};
          break;
        }
        case LayerKind::kFc: {
          lp.ip_pd = choose_fc(info, in.get_desc(), in_dims, out_dims, attr, i > 0);
          note_scratch(*plan, lp.ip_pd);
          plan->t[i + 1] = memory(lp.ip_pd.dst_desc(), engine);
          set_forward_weights(*plan, i, info, lp.ip_pd.src_desc(), lp.ip_pd.weights_desc());
          lp.fwd = Exec{dnnl::inner_product_forward(lp.ip_pd),
                        {{DNNL_ARG_SRC, lp.src},
                         {DNNL_ARG_WEIGHTS, lp.w_fwd},
                         {DNNL_ARG_BIAS, lp.bias},
                         {DNNL_ARG_DST, plan->t[i + 1]}},
                        name + " fwd: " + lp.ip_pd.impl_info_str()};
          break;
        }
        case LayerKind::kMaxPool2x2: {
          const dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_training,
                                              dnnl::algorithm::pooling_max, in.get_desc(),
                                              any_desc(out_dims), {2, 2}, {2, 2}, {0, 0}, {0, 0});
          lp.pool_pd = dnnl::pooling_forward::primitive_desc(d, attr, engine);
          note_scratch(*plan, lp.pool_pd);
          lp.src = in;
          plan->t[i + 1] = memory(lp.pool_pd.dst_desc(), engine);
          lp.workspace = memory(lp.pool_pd.workspace_desc(), engine);
          lp.fwd = Exec{dnnl::pooling_forward(lp.pool_pd),
                        {{DNNL_ARG_SRC, in},
                         {DNNL_ARG_DST, plan->t[i + 1]},
                         {DNNL_ARG_WORKSPACE, lp.workspace}},
                        "maxpool fwd: " + std::string(lp.pool_pd.impl_info_str())};
          break;
        }
        case LayerKind::kRelu:
          lp.src = in;
          plan->t[i + 1] = memory(in.get_desc(), engine);
          break;
      }
    }
    // Softmax cross-entropy wants plain [batch, classes].
    memory& last = plan->t[count];
    const memory::desc last_plain = plain_desc(last.get_desc().dims());
    if (last.get_desc() == last_plain) {
      plan->logits = last;
    } else {
      plan->logits = memory(last_plain, engine);
      plan->logits_reorder = make_reorder(*plan, last, plan->logits, "logits reorder");
    }
    attach_scratch(*plan);
    return plan;
  }

  // Picks the conv layouts (forward primitive desc and the diff_dst layout
  // and src of backward-weights): the input as it comes and oneDNN's choice
  // (format_tag::any) for the output, or for both, unless that, or
  // the backward it implies, has only a reference implementation. That is
  // the case of the first conv of a 1- or 3-channel NCHW input on AVX2:
  // there the blocked forward exists but its blocked-diff_dst
  // backward-weights does not; the NHWC one does, so backward-weights gets
  // its own reorders of src and diff_dst (cheaper than running the following
  // max-pool on NHWC, which is 1.5x slower than on nChw8c).
  std::tuple<dnnl::convolution_forward::primitive_desc, memory::desc, memory::desc> choose_conv(
      const LayerInfo& info, const memory::desc& in_md, const memory::dims& in_dims,
      const memory::dims& out_dims, const dnnl::primitive_attr& attr, bool need_data) {
    const memory::dims one = {1, 1};
    const memory::desc w_any = any_desc(info.w_dims);
    const memory::desc b_md = plain_desc({info.units});
    const memory::desc nhwc_in(in_dims, Dt::f32, Tag::nhwc), nhwc_out(out_dims, Dt::f32, Tag::nhwc);
    auto make = [&](const memory::desc& src_md, const memory::desc& dst_md) {
      const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                              dnnl::algorithm::convolution_direct, src_md, w_any,
                                              b_md, dst_md, one, one, one);
      return dnnl::convolution_forward::primitive_desc(d, attr, engine);
    };
    auto fast_weights = [&](const dnnl::convolution_forward::primitive_desc& fpd,
                            const memory::desc& src_md, const memory::desc& diff_dst_md) {
      const dnnl::convolution_backward_weights::desc wd(dnnl::algorithm::convolution_direct, src_md,
                                                        w_any, b_md, diff_dst_md, one, one, one);
      return !is_reference(dnnl::convolution_backward_weights::primitive_desc(wd, engine, fpd));
    };
    auto fast_data = [&](const dnnl::convolution_forward::primitive_desc& fpd) {
      if (!need_data) return true;
      const dnnl::convolution_backward_data::desc dd(dnnl::algorithm::convolution_direct,
                                                     fpd.src_desc(), w_any, fpd.dst_desc(), one,
                                                     one, one);
      return !is_reference(dnnl::convolution_backward_data::primitive_desc(dd, engine, fpd));
    };
    const std::pair<memory::desc, memory::desc> candidates[] = {
        {in_md, any_desc(out_dims)}, {any_desc(in_dims), any_desc(out_dims)}, {in_md, nhwc_out},
        {nhwc_in, nhwc_out},         {in_md, plain_desc(out_dims)},
    };
    for (const auto& [src_md, dst_md] : candidates) {
      try {
        auto pd = make(src_md, dst_md);
        if (is_reference(pd) || !fast_data(pd)) continue;
        if (fast_weights(pd, pd.src_desc(), pd.dst_desc())) {
          return {pd, pd.src_desc(), pd.dst_desc()};
        }
        if (fast_weights(pd, pd.src_desc(), nhwc_out)) return {pd, pd.src_desc(), nhwc_out};
        if (fast_weights(pd, nhwc_in, nhwc_out)) return {pd, nhwc_in, nhwc_out};
      } catch (const dnnl::error&) {
        // this combination is not implemented at all: try the next
      }
    }
    auto pd = make(any_desc(in_dims), any_desc(out_dims));
    return {pd, pd.src_desc(), pd.dst_desc()};
  }

  // Picks the fc layouts. First choice: plain input and the user's plain
  // [out, in] weights, so that no per-step weight / weight-gradient reorder
  // exists (oneDNN's own blocked choice for the 800k-float fc1 weights costs
  // two slow reorders per step; the plain input costs one small activation
  // reorder instead). Then the input as it comes, then oneDNN's choice.
  dnnl::inner_product_forward::primitive_desc choose_fc(
      const LayerInfo& info, const memory::desc& in_md, const memory::dims& in_dims,
      const memory::dims& out_dims, const dnnl::primitive_attr& attr, bool need_data) {
    const memory::desc b_md = plain_desc({info.units});
    const memory::desc w_plain = plain_desc(info.w_dims);
    auto make = [&](const memory::desc& src_md, const memory::desc& w_md) {
      const dnnl::inner_product_forward::desc d(dnnl::prop_kind::forward_training, src_md, w_md,
                                                b_md, any_desc(out_dims));
      return dnnl::inner_product_forward::primitive_desc(d, attr, engine);
    };
    auto all_fast = [&](const dnnl::inner_product_forward::primitive_desc& fpd) {
      if (is_reference(fpd)) return false;
      const dnnl::inner_product_backward_weights::desc wd(fpd.src_desc(), fpd.weights_desc(), b_md,
                                                          fpd.dst_desc());
      if (is_reference(dnnl::inner_product_backward_weights::primitive_desc(wd, engine, fpd))) {
        return false;
      }
      if (!need_data) return true;
      const dnnl::inner_product_backward_data::desc dd(fpd.src_desc(), fpd.weights_desc(),
                                                       fpd.dst_desc());
      return !is_reference(dnnl::inner_product_backward_data::primitive_desc(dd, engine, fpd));
    };
    const std::pair<memory::desc, memory::desc> candidates[] = {
        {plain_desc(in_dims), w_plain},
        {in_md, any_desc(info.w_dims)},
        {any_desc(in_dims), any_desc(info.w_dims)},
    };
    for (const auto& [src_md, w_md] : candidates) {
      try {
        auto pd = make(src_md, w_md);
        if (all_fast(pd)) return pd;
      } catch (const dnnl::error&) {
        // this combination is not implemented at all: try the next
      }
    }
    return make(any_desc(in_dims), any_desc(info.w_dims));
  }

  // Weights and input of a conv / fc forward: plain user weights (set per
  // call), reordered once per call into the primitive's layout if it differs;
  // the input reordered if the primitive wants another layout than t[i].
  void set_forward_weights(Plan& plan, std::size_t i, LayerInfo& info, const memory::desc& src_md,
                           const memory::desc& w_md) {
    LayerPlan& lp = plan.layers[i];
    const memory& in = plan.t[i];
    if (src_md == in.get_desc()) {
      lp.src = in;
    } else {
      lp.src = memory(src_md, engine);
      lp.src_reorder = make_reorder(plan, in, lp.src, info.spec.name + " input reorder");
    }
    lp.w_plain = user_memory(plain_desc(info.w_dims));
    lp.bias = user_memory(plain_desc({info.units}));
    if (w_md == lp.w_plain.get_desc()) {
      lp.w_fwd = lp.w_plain;
    } else {
      lp.w_fwd = memory(w_md, engine);
      lp.w_fwd_reorder =
          make_reorder(plan, lp.w_plain, lp.w_fwd, info.spec.name + " weights reorder");
    }
  }

  void build_backward(Plan& plan, bool input_grad) {
    const std::size_t count = infos.size();
    plan.d.assign(count + 1, memory());
    plan.d[0] = user_memory(plan.t[0].get_desc());
    for (std::size_t i = 1; i <= count; ++i) plan.d[i] = memory(plan.t[i].get_desc(), engine);
    for (std::size_t i = 0; i < count; ++i) {
      LayerInfo& info = infos[i];
      LayerPlan& lp = plan.layers[i];
      lp.w_bwd_reorder.reset();
      lp.bwd_data.reset();
      lp.diff_src_reorder.reset();
      lp.bwd_weights.reset();
      lp.dw_reorder.reset();
      const bool need_data = i > 0 || input_grad;
      switch (info.spec.kind) {
        case LayerKind::kConv3x3:
          build_conv_backward(plan, lp, info, i, need_data);
          break;
        case LayerKind::kFc:
          build_fc_backward(plan, lp, info, i, need_data);
          break;
        case LayerKind::kMaxPool2x2:
          build_pool_backward(plan, lp, i, need_data);
          break;
        case LayerKind::kRelu:
          break;
      }
    }
    if (plan.logits == plan.t[count]) {
      plan.dlogits = plan.d[count];
      plan.dlogits_reorder.reset();
    } else {
      plan.dlogits = memory(plan.logits.get_desc(), engine);
      plan.dlogits_reorder = make_reorder(plan, plan.dlogits, plan.d[count], "dlogits reorder");
    }
    attach_scratch(plan);
    plan.has_backward = true;
    plan.has_input_grad = input_grad;
  }

  // Backward of layer i: weights (and bias) gradients, and the gradient of
  // its input when need_data.
  void build_conv_backward(Plan& plan, LayerPlan& lp, LayerInfo& info, std::size_t i,
                           bool need_data) {
    const dnnl::primitive_attr attr = make_attr(false);
    const std::string& name = info.spec.name;
    const memory::dims one = {1, 1};
    const auto& fpd = lp.conv_pd;
    const dnnl::convolution_backward_weights::desc wd(
        dnnl::algorithm::convolution_direct, lp.bwd_w_src_md, any_desc(info.w_dims),
        plain_desc({info.units}), lp.bwd_w_diff_dst_md, one, one, one);
    const dnnl::convolution_backward_weights::primitive_desc wpd(wd, attr, engine, fpd);
    note_scratch(plan, wpd);
    set_weight_grads(plan, lp, info, wpd.diff_weights_desc());
    lp.src_w = lp.src;
    lp.src_w_reorder.reset();
    if (wpd.src_desc() != lp.src.get_desc()) {
      lp.src_w = memory(wpd.src_desc(), engine);
      lp.src_w_reorder = make_reorder(plan, lp.src, lp.src_w, name + " input reorder (bwd)");
    }
    lp.diff_dst_w = plan.d[i + 1];
    lp.diff_dst_w_reorder.reset();
    if (wpd.diff_dst_desc() != plan.d[i + 1].get_desc()) {
      lp.diff_dst_w = memory(wpd.diff_dst_desc(), engine);
      lp.diff_dst_w_reorder =
          make_reorder(plan, plan.d[i + 1], lp.diff_dst_w, name + " doutput reorder");
    }
    lp.bwd_weights = Exec{dnnl::convolution_backward_weights(wpd),
                          {{DNNL_ARG_SRC, lp.src_w},
                           {DNNL_ARG_DIFF_DST, lp.diff_dst_w},
                           {DNNL_ARG_DIFF_WEIGHTS, lp.dw},
                           {DNNL_ARG_DIFF_BIAS, lp.diff_bias}},
                          name + " bwd weights: " + wpd.impl_info_str()};
    if (need_data) {
      const dnnl::convolution_backward_data::desc dd(dnnl::algorithm::convolution_direct,
                                                     fpd.src_desc(), any_desc(info.w_dims),
                                                     fpd.dst_desc(), one, one, one);
      const dnnl::convolution_backward_data::primitive_desc dpd(dd, attr, engine, fpd);
      note_scratch(plan, dpd);
      set_backward_data(plan, lp, info, dpd.weights_desc(), i);
      lp.bwd_data = Exec{dnnl::convolution_backward_data(dpd),
                         {{DNNL_ARG_DIFF_DST, plan.d[i + 1]},
                          {DNNL_ARG_WEIGHTS, lp.w_bwd},
                          {DNNL_ARG_DIFF_SRC, lp.diff_src}},
                         name + " bwd data: " + dpd.impl_info_str()};
    }
  }

  void build_fc_backward(Plan& plan, LayerPlan& lp, LayerInfo& info, std::size_t i,
                         bool need_data) {
    const dnnl::primitive_attr attr = make_attr(false);
    const std::string& name = info.spec.name;
    const auto& fpd = lp.ip_pd;
    // Same weights layout as the forward (plain when choose_fc could).
    const dnnl::inner_product_backward_weights::desc wd(fpd.src_desc(), fpd.weights_desc(),
                                                        plain_desc({info.units}), fpd.dst_desc());
    const dnnl::inner_product_backward_weights::primitive_desc wpd(wd, attr, engine, fpd);
    note_scratch(plan, wpd);
    set_weight_grads(plan, lp, info, wpd.diff_weights_desc());
    lp.bwd_weights = Exec{dnnl::inner_product_backward_weights(wpd),
                          {{DNNL_ARG_SRC, lp.src},
                           {DNNL_ARG_DIFF_DST, plan.d[i + 1]},
                           {DNNL_ARG_DIFF_WEIGHTS, lp.dw},
                           {DNNL_ARG_DIFF_BIAS, lp.diff_bias}},
                          name + " bwd weights: " + wpd.impl_info_str()};
    if (need_data) {
      const dnnl::inner_product_backward_data::desc dd(fpd.src_desc(), fpd.weights_desc(),
                                                       fpd.dst_desc());
      const dnnl::inner_product_backward_data::primitive_desc dpd(dd, attr, engine, fpd);
      note_scratch(plan, dpd);
      set_backward_data(plan, lp, info, dpd.weights_desc(), i);
      lp.bwd_data = Exec{dnnl::inner_product_backward_data(dpd),
                         {{DNNL_ARG_DIFF_DST, plan.d[i + 1]},
                          {DNNL_ARG_WEIGHTS, lp.w_bwd},
                          {DNNL_ARG_DIFF_SRC, lp.diff_src}},
                         name + " bwd data: " + dpd.impl_info_str()};
    }
  }

  void build_pool_backward(Plan& plan, LayerPlan& lp, std::size_t i, bool need_data) {
    const dnnl::primitive_attr attr = make_attr(false);
    if (!need_data) return;
    const dnnl::pooling_backward::desc bd(dnnl::algorithm::pooling_max, plan.t[i].get_desc(),
                                          lp.pool_pd.dst_desc(), {2, 2}, {2, 2}, {0, 0}, {0, 0});
    const dnnl::pooling_backward::primitive_desc bpd(bd, attr, engine, lp.pool_pd);
    note_scratch(plan, bpd);
    lp.bwd_data = Exec{dnnl::pooling_backward(bpd),
                       {{DNNL_ARG_DIFF_DST, plan.d[i + 1]},
                        {DNNL_ARG_DIFF_SRC, plan.d[i]},
                        {DNNL_ARG_WORKSPACE, lp.workspace}},
                       "maxpool bwd: " + std::string(bpd.impl_info_str())};
  }

  void set_weight_grads(Plan& plan, LayerPlan& lp, LayerInfo& info, const memory::desc& dw_md) {
    lp.dw_plain = user_memory(plain_desc(info.w_dims));
    lp.diff_bias = user_memory(plain_desc({info.units}));
    if (dw_md == lp.dw_plain.get_desc()) {
      lp.dw = lp.dw_plain;
    } else {
      lp.dw = memory(dw_md, engine);
      lp.dw_reorder = make_reorder(plan, lp.dw, lp.dw_plain, info.spec.name + " dweights reorder");
    }
  }

  void set_backward_data(Plan& plan, LayerPlan& lp, LayerInfo& info, const memory::desc& w_md,
                         std::size_t i) {
    if (w_md == lp.w_fwd.get_desc()) {
      lp.w_bwd = lp.w_fwd;
    } else if (w_md == lp.w_plain.get_desc()) {
      lp.w_bwd = lp.w_plain;
    } else {
      lp.w_bwd = memory(w_md, engine);
      lp.w_bwd_reorder =
          make_reorder(plan, lp.w_plain, lp.w_bwd, info.spec.name + " bwd weights reorder");
    }
    if (lp.src == plan.t[i]) {
      lp.diff_src = plan.d[i];
    } else {
      lp.diff_src = memory(lp.src.get_desc(), engine);
      lp.diff_src_reorder =
          make_reorder(plan, lp.diff_src, plan.d[i], info.spec.name + " dinput reorder");
    }
  }

  Plan& plan_for(int batch, bool backward, bool input_grad) {
    if (batch < 1 || batch > max_batch) {
      throw InternalError("batch " + std::to_string(batch) + " is outside [1, max_batch = " +
                          std::to_string(max_batch) + "] of this network");
    }
    auto it = plans.find(batch);
    try {
      if (it == plans.end()) it = plans.emplace(batch, build_forward(batch)).first;
      Plan& plan = *it->second;
      if (backward && (!plan.has_backward || (input_grad && !plan.has_input_grad))) {
        build_backward(plan, input_grad);
      }
      return plan;
    } catch (const dnnl::error& e) {
      throw InternalError(std::string("oneDNN could not build the network for batch ") +
                          std::to_string(batch) + ": " + e.what());
    }
  }

  // ---- execution ----------------------------------------------------------

  void run(Exec& e) { e.prim.execute(stream, e.args); }
  void run(std::optional<Exec>& e) {
    if (e) run(*e);
  }

  void forward(Plan& plan, const float* params, const float* images, bool backward) {
    plan.t[0].set_data_handle(const_cast<float*>(images));
    for (std::size_t i = 0; i < infos.size(); ++i) {
      LayerInfo& info = infos[i];
      LayerPlan& lp = plan.layers[i];
      if (info.has_params) {
        if (net.weight_norm) {
          ops::weight_norm_forward(params + info.w_off, params + info.g_off, info.units,
                                   info.fan_in, info.w_eff.data(), info.norm.data());
          lp.w_plain.set_data_handle(info.w_eff.data());
        } else {
          lp.w_plain.set_data_handle(const_cast<float*>(params + info.w_off));
        }
        lp.bias.set_data_handle(const_cast<float*>(params + info.b_off));
        run(lp.w_fwd_reorder);
        if (backward) run(lp.w_bwd_reorder);
      }
      run(lp.src_reorder);
      run(lp.fwd);
      if (info.spec.kind == LayerKind::kRelu) {
        ops::relu_forward(data_of(plan.t[i]), float_count(plan.t[i]), data_of(plan.t[i + 1]));
      }
    }
    run(plan.logits_reorder);
    stream.wait();
  }

  void backward(Plan& plan, const float* params, float* grad, float* input_grad) {
    run(plan.dlogits_reorder);
    if (input_grad != nullptr) plan.d[0].set_data_handle(input_grad);
    for (std::size_t k = infos.size(); k-- > 0;) {
      LayerInfo& info = infos[k];
      LayerPlan& lp = plan.layers[k];
      const bool need_data = k > 0 || input_grad != nullptr;
      switch (info.spec.kind) {
        case LayerKind::kConv3x3:
        case LayerKind::kFc: {
          if (info.spec.relu) {
            float* dy = data_of(plan.d[k + 1]);
            ops::relu_backward(data_of(plan.t[k + 1]), dy, float_count(plan.d[k + 1]), dy);
          }
          lp.dw_plain.set_data_handle(net.weight_norm ? info.dw.data() : grad + info.w_off);
          lp.diff_bias.set_data_handle(grad + info.b_off);
          run(lp.src_w_reorder);
          run(lp.diff_dst_w_reorder);
          run(lp.bwd_weights);
          run(lp.dw_reorder);
          if (net.weight_norm) {
            ops::weight_norm_backward(info.dw.data(), params + info.w_off, params + info.g_off,
                                      info.norm.data(), info.units, info.fan_in, grad + info.w_off,
                                      grad + info.g_off);
          }
          if (need_data) {
            run(lp.bwd_data);
            run(lp.diff_src_reorder);
          }
          break;
        }
        case LayerKind::kMaxPool2x2:
          if (need_data) run(lp.bwd_data);
          break;
        case LayerKind::kRelu:
          if (need_data) {
            ops::relu_backward(data_of(plan.t[k + 1]), data_of(plan.d[k + 1]),
                               float_count(plan.d[k + 1]), data_of(plan.d[k]));
          }
          break;
      }
    }
    stream.wait();
  }

  float step(const float* params, const float* images, const std::int32_t* labels, int batch,
             float* grad, float* input_grad) {
    if (images == nullptr || labels == nullptr ||
        ((params == nullptr || grad == nullptr) && layout.count > 0)) {
      throw InternalError("CpuNetwork::train_step: null buffer");
    }
    set_threads();
    Plan& plan = plan_for(batch, true, input_grad != nullptr);
    forward(plan, params, images, true);
    const double loss = ops::softmax_cross_entropy(data_of(plan.logits), labels, batch, classes,
                                                   data_of(plan.dlogits));
    backward(plan, params, grad, input_grad);
    return static_cast<float>(loss);
  }
};

CpuNetwork::CpuNetwork(NetSpec net, int max_batch, int threads) : m_impl(std::make_unique<Impl>()) {
  if (max_batch < 1) {
    throw ConfigError("network max batch must be >= 1, got " + std::to_string(max_batch));
  }
  Impl& im = *m_impl;
  im.layout = param_layout(net);
  im.classes = output_count(net);
  im.net = std::move(net);
  im.max_batch = max_batch;
  im.threads = threads;
  const auto shapes = layer_output_shapes(im.net);
  memory::dims in = {im.net.channels, im.net.height, im.net.width};
  for (std::size_t i = 0; i < im.net.layers.size(); ++i) {
    LayerInfo info;
    info.spec = im.net.layers[i];
    info.in_shape = in;
    info.out_shape = memory::dims(shapes[i].begin(), shapes[i].end());
    if (info.spec.kind == LayerKind::kConv3x3 || info.spec.kind == LayerKind::kFc) {
      if (info.spec.kind == LayerKind::kConv3x3 && in.size() != 3) {
        throw ConfigError("conv layer '" + info.spec.name + "' needs an image input");
      }
      const std::string& n = info.spec.name;
      info.has_params = true;
      info.units = info.spec.out;
      info.w_dims = {info.units};
      if (info.spec.kind == LayerKind::kConv3x3) {
        info.w_dims.insert(info.w_dims.end(), {in[0], 3, 3});
      } else {
        info.w_dims.insert(info.w_dims.end(), in.begin(), in.end());
      }
      info.fan_in = 1;
      for (std::size_t j = 1; j < info.w_dims.size(); ++j) info.fan_in *= info.w_dims[j];
      if (im.net.weight_norm) {
        info.w_off = im.layout.find(n + ".v").offset;
        info.g_off = im.layout.find(n + ".g").offset;
        const std::size_t wn = static_cast<std::size_t>(info.units * info.fan_in);
        info.w_eff.resize(wn);
        info.dw.resize(wn);
        info.norm.resize(static_cast<std::size_t>(info.units));
      } else {
        info.w_off = im.layout.find(n + ".w").offset;
      }
      info.b_off = im.layout.find(n + ".b").offset;
    }
    im.infos.push_back(std::move(info));
    in = memory::dims(shapes[i].begin(), shapes[i].end());
  }
}

CpuNetwork::~CpuNetwork() = default;

float CpuNetwork::train_step(const float* params, const float* images, const std::int32_t* labels,
                             int batch, float* grad) {
  return m_impl->step(params, images, labels, batch, grad, nullptr);
}

float CpuNetwork::train_step_with_input_grad(const float* params, const float* images,
                                             const std::int32_t* labels, int batch, float* grad,
                                             float* input_grad) {
  if (input_grad == nullptr) throw InternalError("train_step_with_input_grad: null input_grad");
  return m_impl->step(params, images, labels, batch, grad, input_grad);
}

void CpuNetwork::predict(const float* params, const float* images, int batch, float* logits) {
  if (images == nullptr || logits == nullptr || (params == nullptr && m_impl->layout.count > 0)) {
    throw InternalError("CpuNetwork::predict: null buffer");
  }
  Impl& im = *m_impl;
  im.set_threads();
  Plan& plan = im.plan_for(batch, false, false);
  im.forward(plan, params, images, false);
  const float* src = data_of(plan.logits);
  std::copy(src, src + static_cast<std::int64_t>(batch) * im.classes, logits);
}

int CpuNetwork::max_batch() const { return m_impl->max_batch; }

const ParamLayout& CpuNetwork::layout() const { return m_impl->layout; }

std::vector<std::string> CpuNetwork::implementations(int batch) {
  m_impl->set_threads();
  Plan& plan = m_impl->plan_for(batch, true, false);
  std::vector<std::string> out;
  m_impl->for_each_exec(plan, [&](Exec& e) { out.push_back(e.what); });
  return out;
}

}  // namespace syncopt::nn::cpu
