// CpuNetwork: runs a layer graph (cpu_network.hpp) with oneDNN 2.6
// primitives.
//
// Per batch size a Plan holds every primitive, memory object and reorder, so
// a step allocates nothing. Activations stay in the layouts oneDNN picks
// (format_tag::any, e.g. nChw16c on AVX-512) from the first conv to the fc
// layers; batch norm, ReLU, the residual add and pooling run on whatever
// layout their input has, and a reorder is inserted only where two
// neighbouring primitives disagree (a 1- or 3-channel input stays NCHW; fc1
// of the reference CNN takes a plain NCHW copy so that its 800k weights are
// used in the user's layout, with no per-step weight reorder; the first
// conv's backward-weights may read an NHWC copy of its output gradient where
// oneDNN 2.6 has no fast kernel for its blocked one). A ReLU the graph fused
// into a conv / fc / add is a post-op (into a batch norm, its fuse_norm_relu
// flag), and its backward masks the incoming gradient with the stored
// (post-ReLU) output. Weights live in the user's flat buffer in plain OIHW /
// [out, in]; per call the effective weights are computed once (weight norm)
// and reordered once to each primitive's preferred layout.
//
// Backward: nodes in reverse; a tensor read by several nodes (a residual
// block's input) gets the sum of their input gradients: the first (in
// backward order) writes it, the others add theirs with a reorder that sums
// (which also converts layouts). An add passes its output gradient to both
// inputs, sharing the buffer with the input that nothing else reads.
//
// The training plan of a batch size (used by predict too for a graph
// without batch norm or dropout) keeps every activation for the backward;
// its backward half is built on the first train_step of that batch size.
// The inference plan of a graph with batch norm or dropout runs batch norm
// with the set statistics and dropout as the identity, and reuses an
// activation's buffer once its last reader ran. A CpuNetwork is not
// thread-safe (one caller at a time); OpenMP inside oneDNN and the loops uses
// `threads` threads.
#include "nn/cpu_network.hpp"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "common/error.hpp"
#include "nn/dropout.hpp"
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

// Per dimension of a tensor's memory desc, the offset (in elements) that
// each logical index of that dimension contributes to an element's address:
// in oneDNN's blocked formats (plain, nhwc, nChw16c, ...) an address is
// offset0 plus one such term per dimension, the outer block's stride and
// the position inside the inner blocks of that dimension
// (memory_desc_wrapper::off_v, split by dimension).
std::vector<std::vector<std::int64_t>> dim_offsets(const memory::desc& md) {
  const dnnl_memory_desc_t& d = md.data;
  if (d.format_kind != dnnl_blocked) {
    throw InternalError("dropout on a tensor whose layout is not a blocked one");
  }
  const dnnl_blocking_desc_t& blk = d.format_desc.blocking;
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(d.ndims));
  for (int dim = 0; dim < d.ndims; ++dim) {
    auto& table = out[static_cast<std::size_t>(dim)];
    table.resize(static_cast<std::size_t>(d.dims[dim]));
    for (std::int64_t pos = 0; pos < d.dims[dim]; ++pos) {
      std::int64_t p = pos, off = 0, inner_stride = 1;
      for (int b = blk.inner_nblks - 1; b >= 0; --b) {
        if (blk.inner_idxs[b] == dim) {
          off += (p % blk.inner_blks[b]) * inner_stride;
          p /= blk.inner_blks[b];
        }
        inner_stride *= blk.inner_blks[b];
      }
      table[static_cast<std::size_t>(pos)] =
          off + p * blk.strides[dim] + (dim == 0 ? d.offset0 : 0);
    }
  }
  return out;
}

// One primitive with its arguments, ready to execute.
struct Exec {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
  std::string what;  // "conv1 fwd: jit:avx2", for implementations()
};

// Batch-independent facts of one node.
struct NodeInfo {
  const Node* node = nullptr;
  memory::dims in_dims, out_dims;  // with the batch dimension set per plan
  // conv / fc
  memory::dims w_dims;  // {O, C, k, k}, {O, C, H, W} or {O, I}
  memory::dims strides, pad_l, pad_r, kernel;
  std::size_t w_off = 0, g_off = 0, b_off = 0, scale_off = 0, shift_off = 0;
  std::vector<float> w_eff, dw, norm;  // weight-norm scratch
  // batch norm: the statistics predict uses
  std::vector<float> mean, var;
};

// Where a node's backward puts dL/d(one of its inputs): `target`, then it
// is moved into the tensor's gradient `to`: nothing to do when target is
// that gradient; when the two have the same layout a memcpy, or `exec`, an
// in-place binary add (oneDNN's reorder of equal layouts is its slow
// generic one); else `exec`, a reorder (summing when the tensor already has
// a gradient).
struct Delivery {
  enum class Move { kNone, kCopy, kAdd, kReorder };
  memory target, to;
  Move move = Move::kNone;
  std::optional<Exec> exec;
};

struct NodePlan {
  // Forward.
  memory src;                       // conv / fc: input 0 in the primitive's layout
  std::optional<Exec> src_reorder;  // t[input 0] -> src
  memory src1;                      // add: input 1 in input 0's layout
  std::optional<Exec> src1_reorder;
  memory w_plain, w_fwd, bias;  // user-layout weights / primitive layout / bias
  std::optional<Exec> w_fwd_reorder;
  std::optional<Exec> fwd;
  memory workspace;                // max-pool indices, batch norm + ReLU mask
  memory mean, var;                // batch norm: the batch's / the set statistics
  memory scale, shift;             // batch norm: views of the parameters
  memory view4;                    // flatten: the output as a plain 4D tensor
  std::vector<std::uint8_t> mask;  // dropout: kept (1) or dropped (0), per element
  // dropout on a non-plain layout: per dimension, the address term of each
  // logical index (dim_offsets), padded to 4 dimensions
  std::vector<std::vector<std::int64_t>> mask_offsets;
  dnnl::convolution_forward::primitive_desc conv_pd;
  dnnl::inner_product_forward::primitive_desc ip_pd;
  dnnl::pooling_forward::primitive_desc pool_pd;
  dnnl::batch_normalization_forward::primitive_desc bn_pd;
  dnnl::eltwise_forward::primitive_desc eltwise_pd;
  // Backward.
  memory::desc bwd_w_src_md, bwd_w_diff_dst_md;  // conv: layouts of backward-weights
  memory w_bwd, dw, dw_plain, diff_bias, src_w, diff_dst_w, diff_scale, diff_shift;
  std::optional<Exec> w_bwd_reorder, src_w_reorder, diff_dst_w_reorder, bwd_weights, dw_reorder,
      bwd;
  std::optional<Exec> relu_bwd;      // conv / fc / add: the fused ReLU's mask, in place
  std::vector<Delivery> deliveries;  // per input slot that needs a gradient
  std::vector<int> delivery_slot;    // the input slot of each delivery
  bool alias_input0 = false;         // add: input 0's gradient is this node's
};

struct Plan {
  int batch = 0;
  bool training = true;
  memory input;                 // the images (user memory)
  memory input_grad;            // dL/dimages (user memory), when asked for
  std::vector<memory> t, d;     // per node: output and dL/doutput
  std::vector<bool> d_started;  // backward build: the tensor has its first contribution
  bool input_started = false;
  std::vector<NodePlan> nodes;
  memory logits, dlogits;  // plain [batch, outputs]
  std::optional<Exec> logits_reorder, dlogits_reorder;
  memory scratch;
  std::size_t scratch_nbytes = 0;
  std::vector<memory> buffers;  // inference: activation buffers shared by tensors
  bool has_backward = false, has_input_grad = false;
};

}  // namespace

struct CpuNetwork::Impl {
  Graph graph;
  int max_batch = 0;
  int threads = 0;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::vector<NodeInfo> infos;
  std::map<std::pair<int, bool>, std::unique_ptr<Plan>> plans;  // (batch, training)
  bool stats_set = false;
  std::optional<std::uint64_t> dropout_key;
  std::uint64_t step_key = 0;
  // train_step_staged: told before each layer's forward and after each
  // layer's backward (null otherwise: predict, statistics, train_step).
  StepHooks* hooks = nullptr;
  float step_loss = 0.0f;

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

  // A reorder from -> to; with `sum`, to += from (accumulating a gradient).
  Exec make_reorder(Plan& plan, const memory& from, const memory& to, const std::string& what,
                    bool sum = false) {
    dnnl::primitive_attr attr = make_attr(false);
    if (sum) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    const dnnl::reorder::primitive_desc pd(engine, from.get_desc(), engine, to.get_desc(), attr);
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
    for (NodePlan& np : plan.nodes) {
      for (auto* e : {&np.src_reorder, &np.src1_reorder, &np.w_fwd_reorder, &np.fwd,
                      &np.w_bwd_reorder, &np.src_w_reorder, &np.diff_dst_w_reorder, &np.bwd_weights,
                      &np.dw_reorder, &np.bwd, &np.relu_bwd}) {
        if (*e) fn(**e);
      }
      for (Delivery& dl : np.deliveries) {
        if (dl.exec) fn(*dl.exec);
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

  static memory::dims with_batch(memory::dim n, const std::vector<std::int64_t>& shape) {
    memory::dims dims = {n};
    dims.insert(dims.end(), shape.begin(), shape.end());
    return dims;
  }

  const memory& tensor(const Plan& plan, int id) const {
    return id == kGraphInput ? plan.input : plan.t[static_cast<std::size_t>(id)];
  }

  // ---- plan construction -------------------------------------------------

  // Inference: a tensor's buffer is free for another once its last reader
  // ran (a dropout's output is its input's buffer).
  std::vector<std::size_t> last_uses() const {
    const std::size_t count = graph.nodes.size();
    std::vector<std::size_t> last(count);
    for (std::size_t j = 0; j < count; ++j) last[j] = j;
    last[count - 1] = count;  // the logits live to the end
    for (std::size_t j = 0; j < count; ++j) {
      for (const int in : graph.nodes[j].inputs) {
        if (in != kGraphInput) last[static_cast<std::size_t>(in)] = j;
      }
    }
    for (std::size_t j = count; j-- > 0;) {
      const Node& n = graph.nodes[j];
      if (n.type == LayerType::kDropout && n.inputs[0] != kGraphInput) {
        auto& in_last = last[static_cast<std::size_t>(n.inputs[0])];
        in_last = std::max(in_last, last[j]);
      }
    }
    return last;
  }

  class Arena {
   public:
    Arena(Impl& im, Plan& plan) : m_im(im), m_plan(plan) {}
    memory take(const memory::desc& md) {
      if (!m_plan.training) {
        const std::size_t nbytes = md.get_size();
        std::size_t best = m_free.size();
        for (std::size_t k = 0; k < m_free.size(); ++k) {
          const std::size_t have = m_plan.buffers[m_free[k]].get_desc().get_size();
          if (have >= nbytes && (best == m_free.size() ||
                                 have < m_plan.buffers[m_free[best]].get_desc().get_size())) {
            best = k;
          }
        }
        std::size_t id = 0;
        if (best < m_free.size()) {
          id = m_free[best];
          m_free.erase(m_free.begin() + static_cast<std::ptrdiff_t>(best));
        } else {
          id = m_plan.buffers.size();
          m_plan.buffers.emplace_back(
              memory::desc({static_cast<memory::dim>(nbytes)}, Dt::u8, Tag::a), m_im.engine);
        }
        m_owner.push_back(id);
        return memory(md, m_im.engine, m_plan.buffers[id].get_data_handle());
      }
      m_owner.push_back(0);
      return memory(md, m_im.engine);
    }
    // The next node's output is tensor `of`'s buffer.
    void alias(std::size_t of) { m_owner.push_back(m_owner[of]); }
    void release(std::size_t tensor) {
      if (!m_plan.training) m_free.push_back(m_owner[tensor]);
    }

   private:
    Impl& m_im;
    Plan& m_plan;
    std::vector<std::size_t> m_free;
    std::vector<std::size_t> m_owner;  // per node: its buffer
  };

  std::unique_ptr<Plan> build_forward(int batch, bool training) {
    auto plan = std::make_unique<Plan>();
    plan->batch = batch;
    plan->training = training;
    const memory::dim n = batch;
    const std::size_t count = graph.nodes.size();
    plan->nodes.resize(count);
    plan->t.resize(count);
    plan->input = user_memory(plain_desc(with_batch(n, graph.input)));
    const std::vector<std::size_t> last = last_uses();
    Arena arena(*this, *plan);
    std::vector<bool> alias(count, false);
    for (std::size_t j = 0; j < count; ++j) {
      alias[j] = build_node_forward(*plan, j, arena);
      // Tensors whose last reader was this node give their buffers back
      // (an alias's buffer is given back through the tensor it aliases).
      for (std::size_t k = 0; k <= j; ++k) {
        if (last[k] == j && !alias[k]) arena.release(k);
      }
    }
    // Softmax cross-entropy wants plain [batch, outputs].
    memory& last_t = plan->t[count - 1];
    const memory::desc last_plain = plain_desc(last_t.get_desc().dims());
    if (last_t.get_desc() == last_plain) {
      plan->logits = last_t;
    } else {
      plan->logits = memory(last_plain, engine);
      plan->logits_reorder = make_reorder(*plan, last_t, plan->logits, "logits reorder");
    }
    attach_scratch(*plan);
    return plan;
  }

  // Builds node j's forward; returns true when its output is its input's
  // buffer (inference dropout).
  bool build_node_forward(Plan& plan, std::size_t j, Arena& arena) {
    NodeInfo& info = infos[j];
    const Node& node = *info.node;
    NodePlan& np = plan.nodes[j];
    const memory& in = tensor(plan, node.inputs[0]);
    const memory::dim n = plan.batch;
    const memory::dims in_dims = with_batch(n, node.in);
    const memory::dims out_dims = with_batch(n, node.out);
    const dnnl::primitive_attr attr = make_attr(node.relu && node.type != LayerType::kBatchNorm);
    const std::string& name = node.name;
    const bool need_data = node.inputs[0] != kGraphInput;
    const auto fwd_kind =
        plan.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
    switch (node.type) {
      case LayerType::kConv: {
        std::tie(np.conv_pd, np.bwd_w_src_md, np.bwd_w_diff_dst_md) =
            choose_conv(info, in.get_desc(), in_dims, out_dims, attr, need_data);
        note_scratch(plan, np.conv_pd);
        plan.t[j] = arena.take(np.conv_pd.dst_desc());
        set_forward_weights(plan, j, info, np.conv_pd.src_desc(), np.conv_pd.weights_desc());
        np.fwd =
            Exec{dnnl::convolution_forward(np.conv_pd),
                 {{DNNL_ARG_SRC, np.src}, {DNNL_ARG_WEIGHTS, np.w_fwd}, {DNNL_ARG_DST, plan.t[j]}},
                 name + " fwd: " + np.conv_pd.impl_info_str()};
        if (node.bias >= 0) np.fwd->args[DNNL_ARG_BIAS] = np.bias;
        return false;
      }
      case LayerType::kFc: {
        np.ip_pd = choose_fc(info, in.get_desc(), in_dims, out_dims, attr, need_data);
        note_scratch(plan, np.ip_pd);
        plan.t[j] = arena.take(np.ip_pd.dst_desc());
        set_forward_weights(plan, j, info, np.ip_pd.src_desc(), np.ip_pd.weights_desc());
        np.fwd =
            Exec{dnnl::inner_product_forward(np.ip_pd),
                 {{DNNL_ARG_SRC, np.src}, {DNNL_ARG_WEIGHTS, np.w_fwd}, {DNNL_ARG_DST, plan.t[j]}},
                 name + " fwd: " + np.ip_pd.impl_info_str()};
        if (node.bias >= 0) np.fwd->args[DNNL_ARG_BIAS] = np.bias;
        return false;
      }
      case LayerType::kMaxPool:
      case LayerType::kAvgPool:
      case LayerType::kGlobalAvgPool: {
        const dnnl::pooling_forward::desc d(fwd_kind, pool_algorithm(node), in.get_desc(),
                                            any_desc(out_dims), info.strides, info.kernel,
                                            info.pad_l, info.pad_r);
        np.pool_pd = dnnl::pooling_forward::primitive_desc(d, attr, engine);
        note_scratch(plan, np.pool_pd);
        plan.t[j] = arena.take(np.pool_pd.dst_desc());
        np.fwd = Exec{dnnl::pooling_forward(np.pool_pd),
                      {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, plan.t[j]}},
                      name + " fwd: " + np.pool_pd.impl_info_str()};
        if (node.type == LayerType::kMaxPool && plan.training) {
          np.workspace = memory(np.pool_pd.workspace_desc(), engine);
          np.fwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
        }
        return false;
      }
      case LayerType::kBatchNorm: {
        auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
        if (node.relu) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
        if (!plan.training) flags = flags | dnnl::normalization_flags::use_global_stats;
        const dnnl::batch_normalization_forward::desc d(fwd_kind, in.get_desc(),
                                                        static_cast<float>(node.attr.eps), flags);
        np.bn_pd = dnnl::batch_normalization_forward::primitive_desc(d, attr, engine);
        note_scratch(plan, np.bn_pd);
        plan.t[j] = arena.take(np.bn_pd.dst_desc());
        np.scale = user_memory(plain_desc({node.out[0]}));
        np.shift = user_memory(plain_desc({node.out[0]}));
        if (plan.training) {
          np.mean = memory(np.bn_pd.mean_desc(), engine);
          np.var = memory(np.bn_pd.variance_desc(), engine);
        } else {
          np.mean = memory(plain_desc({node.out[0]}), engine, info.mean.data());
          np.var = memory(plain_desc({node.out[0]}), engine, info.var.data());
        }
        np.fwd = Exec{dnnl::batch_normalization_forward(np.bn_pd),
                      {{DNNL_ARG_SRC, in},
                       {DNNL_ARG_DST, plan.t[j]},
                       {DNNL_ARG_SCALE, np.scale},
                       {DNNL_ARG_SHIFT, np.shift},
                       {DNNL_ARG_MEAN, np.mean},
                       {DNNL_ARG_VARIANCE, np.var}},
                      name + " fwd: " + np.bn_pd.impl_info_str()};
        if (node.relu && plan.training) {
          np.workspace = memory(np.bn_pd.workspace_desc(), engine);
          np.fwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
        }
        return false;
      }
      case LayerType::kRelu: {
        const dnnl::eltwise_forward::desc d(fwd_kind, dnnl::algorithm::eltwise_relu_use_dst_for_bwd,
                                            in.get_desc(), 0.0f, 0.0f);
        np.eltwise_pd = dnnl::eltwise_forward::primitive_desc(d, attr, engine);
        note_scratch(plan, np.eltwise_pd);
        plan.t[j] = arena.take(np.eltwise_pd.dst_desc());
        np.fwd = Exec{dnnl::eltwise_forward(np.eltwise_pd),
                      {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, plan.t[j]}},
                      name + " fwd: " + np.eltwise_pd.impl_info_str()};
        return false;
      }
      case LayerType::kAdd: {
        const memory& other = tensor(plan, node.inputs[1]);
        np.src1 = other;
        if (other.get_desc() != in.get_desc()) {
          np.src1 = memory(in.get_desc(), engine);
          np.src1_reorder = make_reorder(plan, other, np.src1, name + " shortcut reorder");
        }
        const dnnl::binary::desc d(dnnl::algorithm::binary_add, in.get_desc(), in.get_desc(),
                                   in.get_desc());
        const dnnl::binary::primitive_desc pd(d, attr, engine);
        note_scratch(plan, pd);
        plan.t[j] = arena.take(pd.dst_desc());
        np.fwd = Exec{dnnl::binary(pd),
                      {{DNNL_ARG_SRC_0, in}, {DNNL_ARG_SRC_1, np.src1}, {DNNL_ARG_DST, plan.t[j]}},
                      name + " fwd: " + pd.impl_info_str()};
        return false;
      }
      case LayerType::kDropout:
        if (!plan.training) {
          plan.t[j] = in;
          if (node.inputs[0] == kGraphInput) {
            arena.take(in.get_desc());  // a buffer of its own, never used
          } else {
            arena.alias(static_cast<std::size_t>(node.inputs[0]));
          }
          return true;
        }
        plan.t[j] = arena.take(in.get_desc());
        np.mask.assign(static_cast<std::size_t>(float_count(in)), 0);
        if (in.get_desc() != plain_desc(in_dims)) {
          np.mask_offsets = dim_offsets(in.get_desc());
          while (np.mask_offsets.size() < 4) np.mask_offsets.push_back({0});
        }
        return false;
      case LayerType::kFlatten: {
        plan.t[j] = arena.take(plain_desc(out_dims));
        np.view4 = memory(plain_desc(in_dims), engine, plan.t[j].get_data_handle());
        np.fwd = make_reorder(plan, in, np.view4, name + " fwd");
        return false;
      }
    }
    return false;
  }

  static dnnl::algorithm pool_algorithm(const Node& n) {
    return n.type == LayerType::kMaxPool ? dnnl::algorithm::pooling_max
                                         : dnnl::algorithm::pooling_avg_include_padding;
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
      const NodeInfo& info, const memory::desc& in_md, const memory::dims& in_dims,
      const memory::dims& out_dims, const dnnl::primitive_attr& attr, bool need_data) {
    const bool has_bias = info.node->bias >= 0;
    const memory::desc w_any = any_desc(info.w_dims);
    const memory::desc b_md = has_bias ? plain_desc({info.node->units}) : memory::desc();
    const memory::desc nhwc_in(in_dims, Dt::f32, Tag::nhwc), nhwc_out(out_dims, Dt::f32, Tag::nhwc);
    auto make = [&](const memory::desc& src_md, const memory::desc& dst_md) {
      const dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_training,
                                              dnnl::algorithm::convolution_direct, src_md, w_any,
                                              b_md, dst_md, info.strides, info.pad_l, info.pad_r);
      return dnnl::convolution_forward::primitive_desc(d, attr, engine);
    };
    auto fast_weights = [&](const dnnl::convolution_forward::primitive_desc& fpd,
                            const memory::desc& src_md, const memory::desc& diff_dst_md) {
      const dnnl::convolution_backward_weights::desc wd(dnnl::algorithm::convolution_direct, src_md,
                                                        w_any, b_md, diff_dst_md, info.strides,
                                                        info.pad_l, info.pad_r);
      return !is_reference(dnnl::convolution_backward_weights::primitive_desc(wd, engine, fpd));
    };
    auto fast_data = [&](const dnnl::convolution_forward::primitive_desc& fpd) {
      if (!need_data) return true;
      const dnnl::convolution_backward_data::desc dd(dnnl::algorithm::convolution_direct,
                                                     fpd.src_desc(), w_any, fpd.dst_desc(),
                                                     info.strides, info.pad_l, info.pad_r);
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
      const NodeInfo& info, const memory::desc& in_md, const memory::dims& in_dims,
      const memory::dims& out_dims, const dnnl::primitive_attr& attr, bool need_data) {
    const bool has_bias = info.node->bias >= 0;
    const memory::desc b_md = has_bias ? plain_desc({info.node->units}) : memory::desc();
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
  // the input reordered if the primitive wants another layout than it has.
  void set_forward_weights(Plan& plan, std::size_t j, NodeInfo& info, const memory::desc& src_md,
                           const memory::desc& w_md) {
    NodePlan& np = plan.nodes[j];
    const memory& in = tensor(plan, info.node->inputs[0]);
    const std::string& name = info.node->name;
    if (src_md == in.get_desc()) {
      np.src = in;
    } else {
      np.src = memory(src_md, engine);
      np.src_reorder = make_reorder(plan, in, np.src, name + " input reorder");
    }
    np.w_plain = user_memory(plain_desc(info.w_dims));
    np.bias = user_memory(plain_desc({info.node->units}));
    if (w_md == np.w_plain.get_desc()) {
      np.w_fwd = np.w_plain;
    } else {
      np.w_fwd = memory(w_md, engine);
      np.w_fwd_reorder = make_reorder(plan, np.w_plain, np.w_fwd, name + " weights reorder");
    }
  }

  // ---- backward construction ----------------------------------------------

  bool wants_grad(const Plan& plan, int id, bool input_grad) const {
    (void)plan;
    return id != kGraphInput || input_grad;
  }

  memory& grad_of(Plan& plan, int id) {
    return id == kGraphInput ? plan.input_grad : plan.d[static_cast<std::size_t>(id)];
  }

  // The tensor `id` gets its first gradient contribution (in backward
  // order) from now on; its gradient buffer is made.
  bool start_grad(Plan& plan, int id) {
    if (id == kGraphInput) {
      const bool first = !plan.input_started;
      plan.input_started = true;
      return first;
    }
    const auto k = static_cast<std::size_t>(id);
    if (plan.d_started[k]) return false;
    plan.d_started[k] = true;
    if (!plan.d[k]) plan.d[k] = memory(plan.t[k].get_desc(), engine);
    return true;
  }

  // How `dl.target` reaches the gradient `g` (first: g has none yet).
  void plan_move(Plan& plan, Delivery& dl, const memory& g, bool first, const std::string& what) {
    dl.to = g;
    if (dl.target.get_desc() == g.get_desc() && first) {
      dl.move = Delivery::Move::kCopy;
      return;
    }
    if (dl.target.get_desc() == g.get_desc()) {  // g += target, in place
      dl.move = Delivery::Move::kAdd;
      const dnnl::binary::desc d(dnnl::algorithm::binary_add, g.get_desc(), g.get_desc(),
                                 g.get_desc());
      const dnnl::binary::primitive_desc pd(d, make_attr(false), engine);
      note_scratch(plan, pd);
      dl.exec = Exec{dnnl::binary(pd),
                     {{DNNL_ARG_SRC_0, g}, {DNNL_ARG_SRC_1, dl.target}, {DNNL_ARG_DST, g}},
                     what + " dinput sum: " + pd.impl_info_str()};
      return;
    }
    dl.move = Delivery::Move::kReorder;
    dl.exec = make_reorder(plan, dl.target, g, what + (first ? " dinput reorder" : " dinput sum"),
                           !first);
  }

  // A node's backward writes dL/d(input `id`) in layout `natural`.
  Delivery plan_delivery(Plan& plan, int id, const memory::desc& natural, const std::string& what) {
    const bool first = start_grad(plan, id);
    memory& g = grad_of(plan, id);
    Delivery dl;
    if (first && natural == g.get_desc()) {
      dl.target = g;
      return dl;
    }
    dl.target = memory(natural, engine);
    plan_move(plan, dl, g, first, what);
    return dl;
  }

  // dL/d(input `id`) is `source` itself (an add, a flatten): copied, or
  // summed into an existing gradient.
  Delivery plan_pass_on(Plan& plan, int id, const memory& source, const std::string& what) {
    const bool first = start_grad(plan, id);
    Delivery dl;
    dl.target = source;
    plan_move(plan, dl, grad_of(plan, id), first, what);
    return dl;
  }

  void deliver(Delivery& dl) {
    switch (dl.move) {
      case Delivery::Move::kNone:
        return;
      case Delivery::Move::kReorder:
      case Delivery::Move::kAdd:
        run(dl.exec);
        return;
      case Delivery::Move::kCopy:
        stream.wait();
        std::memcpy(data_of(dl.to), data_of(dl.target),
                    static_cast<std::size_t>(float_count(dl.to)) * sizeof(float));
        return;
    }
  }

  void build_backward(Plan& plan, bool input_grad) {
    const std::size_t count = graph.nodes.size();
    plan.d.assign(count, memory());
    plan.d_started.assign(count, false);
    plan.input_started = false;
    plan.input_grad = user_memory(plan.input.get_desc());
    // The logits' gradient.
    const std::size_t last = count - 1;
    if (plan.logits == plan.t[last]) {
      plan.d[last] = memory(plan.logits.get_desc(), engine);
      plan.dlogits = plan.d[last];
      plan.dlogits_reorder.reset();
    } else {
      plan.d[last] = memory(plan.t[last].get_desc(), engine);
      plan.dlogits = memory(plan.logits.get_desc(), engine);
      plan.dlogits_reorder = make_reorder(plan, plan.dlogits, plan.d[last], "dlogits reorder");
    }
    plan.d_started[last] = true;
    for (std::size_t j = count; j-- > 0;) {
      NodePlan& np = plan.nodes[j];
      NodeInfo& info = infos[j];
      const Node& node = *info.node;
      np.w_bwd_reorder.reset();
      np.src_w_reorder.reset();
      np.diff_dst_w_reorder.reset();
      np.bwd_weights.reset();
      np.dw_reorder.reset();
      np.bwd.reset();
      np.relu_bwd.reset();
      if (node.relu && node.type != LayerType::kBatchNorm) build_relu_mask(plan, np, j);
      np.deliveries.clear();
      np.delivery_slot.clear();
      np.alias_input0 = false;
      const int in0 = node.inputs[0];
      const bool need_data = wants_grad(plan, in0, input_grad);
      switch (node.type) {
        case LayerType::kConv:
          build_conv_backward(plan, np, info, j, need_data);
          break;
        case LayerType::kFc:
          build_fc_backward(plan, np, info, j, need_data);
          break;
        case LayerType::kMaxPool:
        case LayerType::kAvgPool:
        case LayerType::kGlobalAvgPool:
          if (need_data) build_pool_backward(plan, np, info, j);
          break;
        case LayerType::kBatchNorm:
          build_bn_backward(plan, np, info, j, need_data);
          break;
        case LayerType::kRelu:
          if (need_data) build_relu_backward(plan, np, info, j);
          break;
        case LayerType::kAdd:
          build_add_backward(plan, np, info, j, input_grad);
          break;
        case LayerType::kDropout:
          if (need_data) {
            np.deliveries.push_back(plan_delivery(plan, in0, plan.t[j].get_desc(), node.name));
            np.delivery_slot.push_back(0);
          }
          break;
        case LayerType::kFlatten:
          if (need_data) {
            const memory dview(plain_desc(with_batch(plan.batch, node.in)), engine,
                               plan.d[j].get_data_handle());
            np.deliveries.push_back(plan_pass_on(plan, in0, dview, node.name));
            np.delivery_slot.push_back(0);
          }
          break;
      }
    }
    attach_scratch(plan);
    plan.has_backward = true;
    plan.has_input_grad = input_grad;
  }

  // The backward of a ReLU fused into node j (a post-op of its forward):
  // dL/d(pre-ReLU) = dL/doutput where the output is > 0, in place, by
  // oneDNN's eltwise on the stored output.
  void build_relu_mask(Plan& plan, NodePlan& np, std::size_t j) {
    const dnnl::eltwise_forward::desc fd(dnnl::prop_kind::forward_training,
                                         dnnl::algorithm::eltwise_relu_use_dst_for_bwd,
                                         plan.t[j].get_desc(), 0.0f, 0.0f);
    const dnnl::eltwise_forward::primitive_desc fpd(fd, make_attr(false), engine);
    const dnnl::eltwise_backward::desc bd(dnnl::algorithm::eltwise_relu_use_dst_for_bwd,
                                          plan.d[j].get_desc(), plan.t[j].get_desc(), 0.0f, 0.0f);
    const dnnl::eltwise_backward::primitive_desc bpd(bd, make_attr(false), engine, fpd);
    note_scratch(plan, bpd);
    np.relu_bwd = Exec{
        dnnl::eltwise_backward(bpd),
        {{DNNL_ARG_DST, plan.t[j]}, {DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_SRC, plan.d[j]}},
        graph.nodes[j].name + " relu bwd: " + bpd.impl_info_str()};
  }

  void build_conv_backward(Plan& plan, NodePlan& np, NodeInfo& info, std::size_t j,
                           bool need_data) {
    const dnnl::primitive_attr attr = make_attr(false);
    const Node& node = *info.node;
    const std::string& name = node.name;
    const bool has_bias = node.bias >= 0;
    const memory::desc b_md = has_bias ? plain_desc({node.units}) : memory::desc();
    const auto& fpd = np.conv_pd;
    const dnnl::convolution_backward_weights::desc wd(
        dnnl::algorithm::convolution_direct, np.bwd_w_src_md, any_desc(info.w_dims), b_md,
        np.bwd_w_diff_dst_md, info.strides, info.pad_l, info.pad_r);
    const dnnl::convolution_backward_weights::primitive_desc wpd(wd, attr, engine, fpd);
    note_scratch(plan, wpd);
    set_weight_grads(plan, np, info, wpd.diff_weights_desc());
    np.src_w = np.src;
    if (wpd.src_desc() != np.src.get_desc()) {
      np.src_w = memory(wpd.src_desc(), engine);
      np.src_w_reorder = make_reorder(plan, np.src, np.src_w, name + " input reorder (bwd)");
    }
    np.diff_dst_w = plan.d[j];
    if (wpd.diff_dst_desc() != plan.d[j].get_desc()) {
      np.diff_dst_w = memory(wpd.diff_dst_desc(), engine);
      np.diff_dst_w_reorder =
          make_reorder(plan, plan.d[j], np.diff_dst_w, name + " doutput reorder");
    }
    np.bwd_weights = Exec{dnnl::convolution_backward_weights(wpd),
                          {{DNNL_ARG_SRC, np.src_w},
                           {DNNL_ARG_DIFF_DST, np.diff_dst_w},
                           {DNNL_ARG_DIFF_WEIGHTS, np.dw}},
                          name + " bwd weights: " + wpd.impl_info_str()};
    if (has_bias) np.bwd_weights->args[DNNL_ARG_DIFF_BIAS] = np.diff_bias;
    if (need_data) {
      const dnnl::convolution_backward_data::desc dd(
          dnnl::algorithm::convolution_direct, fpd.src_desc(), any_desc(info.w_dims),
          fpd.dst_desc(), info.strides, info.pad_l, info.pad_r);
      const dnnl::convolution_backward_data::primitive_desc dpd(dd, attr, engine, fpd);
      note_scratch(plan, dpd);
      set_backward_weights(plan, np, info, dpd.weights_desc());
      Delivery dl = plan_delivery(plan, node.inputs[0], np.src.get_desc(), name);
      np.bwd = Exec{dnnl::convolution_backward_data(dpd),
                    {{DNNL_ARG_DIFF_DST, plan.d[j]},
                     {DNNL_ARG_WEIGHTS, np.w_bwd},
                     {DNNL_ARG_DIFF_SRC, dl.target}},
                    name + " bwd data: " + dpd.impl_info_str()};
      np.deliveries.push_back(std::move(dl));
      np.delivery_slot.push_back(0);
    }
  }

  void build_fc_backward(Plan& plan, NodePlan& np, NodeInfo& info, std::size_t j, bool need_data) {
    const dnnl::primitive_attr attr = make_attr(false);
    const Node& node = *info.node;
    const std::string& name = node.name;
    const bool has_bias = node.bias >= 0;
    const memory::desc b_md = has_bias ? plain_desc({node.units}) : memory::desc();
    const auto& fpd = np.ip_pd;
    // Same weights layout as the forward (plain when choose_fc could).
    const dnnl::inner_product_backward_weights::desc wd(fpd.src_desc(), fpd.weights_desc(), b_md,
                                                        fpd.dst_desc());
    const dnnl::inner_product_backward_weights::primitive_desc wpd(wd, attr, engine, fpd);
    note_scratch(plan, wpd);
    set_weight_grads(plan, np, info, wpd.diff_weights_desc());
    np.bwd_weights = Exec{
        dnnl::inner_product_backward_weights(wpd),
        {{DNNL_ARG_SRC, np.src}, {DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_WEIGHTS, np.dw}},
        name + " bwd weights: " + wpd.impl_info_str()};
    if (has_bias) np.bwd_weights->args[DNNL_ARG_DIFF_BIAS] = np.diff_bias;
    if (need_data) {
      const dnnl::inner_product_backward_data::desc dd(fpd.src_desc(), fpd.weights_desc(),
                                                       fpd.dst_desc());
      const dnnl::inner_product_backward_data::primitive_desc dpd(dd, attr, engine, fpd);
      note_scratch(plan, dpd);
      set_backward_weights(plan, np, info, dpd.weights_desc());
      Delivery dl = plan_delivery(plan, node.inputs[0], np.src.get_desc(), name);
      np.bwd = Exec{dnnl::inner_product_backward_data(dpd),
                    {{DNNL_ARG_DIFF_DST, plan.d[j]},
                     {DNNL_ARG_WEIGHTS, np.w_bwd},
                     {DNNL_ARG_DIFF_SRC, dl.target}},
                    name + " bwd data: " + dpd.impl_info_str()};
      np.deliveries.push_back(std::move(dl));
      np.delivery_slot.push_back(0);
    }
  }

  void build_pool_backward(Plan& plan, NodePlan& np, NodeInfo& info, std::size_t j) {
    const dnnl::primitive_attr attr = make_attr(false);
    const Node& node = *info.node;
    const memory& in = tensor(plan, node.inputs[0]);
    const dnnl::pooling_backward::desc bd(pool_algorithm(node), in.get_desc(),
                                          np.pool_pd.dst_desc(), info.strides, info.kernel,
                                          info.pad_l, info.pad_r);
    const dnnl::pooling_backward::primitive_desc bpd(bd, attr, engine, np.pool_pd);
    note_scratch(plan, bpd);
    Delivery dl = plan_delivery(plan, node.inputs[0], bpd.diff_src_desc(), node.name);
    np.bwd = Exec{dnnl::pooling_backward(bpd),
                  {{DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_SRC, dl.target}},
                  node.name + " bwd: " + bpd.impl_info_str()};
    if (node.type == LayerType::kMaxPool) np.bwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
    np.deliveries.push_back(std::move(dl));
    np.delivery_slot.push_back(0);
  }

  void build_bn_backward(Plan& plan, NodePlan& np, NodeInfo& info, std::size_t j, bool need_data) {
    const dnnl::primitive_attr attr = make_attr(false);
    const Node& node = *info.node;
    const memory& in = tensor(plan, node.inputs[0]);
    auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    if (node.relu) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
    const dnnl::batch_normalization_backward::desc bd(dnnl::prop_kind::backward,
                                                      plan.d[j].get_desc(), in.get_desc(),
                                                      static_cast<float>(node.attr.eps), flags);
    const dnnl::batch_normalization_backward::primitive_desc bpd(bd, attr, engine, np.bn_pd);
    note_scratch(plan, bpd);
    np.diff_scale = user_memory(plain_desc({node.out[0]}));
    np.diff_shift = user_memory(plain_desc({node.out[0]}));
    Delivery dl;
    if (need_data) {
      dl = plan_delivery(plan, node.inputs[0], bpd.diff_src_desc(), node.name);
    } else {
      dl.target = memory(bpd.diff_src_desc(), engine);  // computed anyway, unused
    }
    np.bwd = Exec{dnnl::batch_normalization_backward(bpd),
                  {{DNNL_ARG_SRC, in},
                   {DNNL_ARG_MEAN, np.mean},
                   {DNNL_ARG_VARIANCE, np.var},
                   {DNNL_ARG_DIFF_DST, plan.d[j]},
                   {DNNL_ARG_SCALE, np.scale},
                   // oneDNN 2.6 will not execute without the shift (it does not read it).
                   {DNNL_ARG_SHIFT, np.shift},
                   {DNNL_ARG_DIFF_SRC, dl.target},
                   {DNNL_ARG_DIFF_SCALE, np.diff_scale},
                   {DNNL_ARG_DIFF_SHIFT, np.diff_shift}},
                  node.name + " bwd: " + bpd.impl_info_str()};
    if (node.relu) np.bwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
    if (need_data) {
      np.deliveries.push_back(std::move(dl));
      np.delivery_slot.push_back(0);
    }
  }

  void build_relu_backward(Plan& plan, NodePlan& np, NodeInfo& info, std::size_t j) {
    const dnnl::primitive_attr attr = make_attr(false);
    const Node& node = *info.node;
    const dnnl::eltwise_backward::desc bd(dnnl::algorithm::eltwise_relu_use_dst_for_bwd,
                                          plan.d[j].get_desc(), plan.t[j].get_desc(), 0.0f, 0.0f);
    const dnnl::eltwise_backward::primitive_desc bpd(bd, attr, engine, np.eltwise_pd);
    note_scratch(plan, bpd);
    Delivery dl = plan_delivery(plan, node.inputs[0], bpd.diff_src_desc(), node.name);
    np.bwd = Exec{
        dnnl::eltwise_backward(bpd),
        {{DNNL_ARG_DST, plan.t[j]}, {DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_SRC, dl.target}},
        node.name + " bwd: " + bpd.impl_info_str()};
    np.deliveries.push_back(std::move(dl));
    np.delivery_slot.push_back(0);
  }

  // dL/d(each input) = dL/doutput (after the fused ReLU's mask). Input 0
  // shares the output's gradient buffer when nothing else reads it (the
  // residual branch's last batch norm); the shortcut gets a copy, or a sum.
  void build_add_backward(Plan& plan, NodePlan& np, NodeInfo& info, std::size_t j,
                          bool input_grad) {
    const Node& node = *info.node;
    const int in0 = node.inputs[0], in1 = node.inputs[1];
    if (in0 != kGraphInput && in0 != in1 &&
        graph.consumers_count[static_cast<std::size_t>(in0)] == 1 &&
        !plan.d_started[static_cast<std::size_t>(in0)] &&
        plan.t[static_cast<std::size_t>(in0)].get_desc() == plan.d[j].get_desc()) {
      plan.d_started[static_cast<std::size_t>(in0)] = true;
      plan.d[static_cast<std::size_t>(in0)] = plan.d[j];
      np.alias_input0 = true;
    }
    for (int slot = 0; slot < 2; ++slot) {
      const int id = node.inputs[static_cast<std::size_t>(slot)];
      if ((slot == 0 && np.alias_input0) || !wants_grad(plan, id, input_grad)) continue;
      np.deliveries.push_back(plan_pass_on(plan, id, plan.d[j], node.name));
      np.delivery_slot.push_back(slot);
    }
  }

  void set_weight_grads(Plan& plan, NodePlan& np, NodeInfo& info, const memory::desc& dw_md) {
    np.dw_plain = user_memory(plain_desc(info.w_dims));
    np.diff_bias = user_memory(plain_desc({info.node->units}));
    if (dw_md == np.dw_plain.get_desc()) {
      np.dw = np.dw_plain;
    } else {
      np.dw = memory(dw_md, engine);
      np.dw_reorder = make_reorder(plan, np.dw, np.dw_plain, info.node->name + " dweights reorder");
    }
  }

  void set_backward_weights(Plan& plan, NodePlan& np, NodeInfo& info, const memory::desc& w_md) {
    if (w_md == np.w_fwd.get_desc()) {
      np.w_bwd = np.w_fwd;
    } else if (w_md == np.w_plain.get_desc()) {
      np.w_bwd = np.w_plain;
    } else {
      np.w_bwd = memory(w_md, engine);
      np.w_bwd_reorder =
          make_reorder(plan, np.w_plain, np.w_bwd, info.node->name + " bwd weights reorder");
    }
  }

  Plan& plan_for(int batch, bool training, bool backward, bool input_grad) {
    if (batch < 1 || batch > max_batch) {
      throw InternalError("batch " + std::to_string(batch) + " is outside [1, max_batch = " +
                          std::to_string(max_batch) + "] of this network");
    }
    const auto key = std::make_pair(batch, training);
    auto it = plans.find(key);
    try {
      if (it == plans.end()) it = plans.emplace(key, build_forward(batch, training)).first;
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

  // The dropout key of a step: fixed, or a hash of the batch.
  std::uint64_t batch_key(const float* images, const std::int32_t* labels, int batch) const {
    if (dropout_key) return *dropout_key;
    const std::size_t floats =
        static_cast<std::size_t>(batch) *
        static_cast<std::size_t>(graph.input[0] * graph.input[1] * graph.input[2]);
    return dropout::batch_key(images, floats, labels, batch);
  }

  void forward(Plan& plan, const float* params, const float* images, bool backward) {
    plan.input.set_data_handle(const_cast<float*>(images));
    for (std::size_t j = 0; j < infos.size(); ++j) {
      NodeInfo& info = infos[j];
      const Node& node = *info.node;
      NodePlan& np = plan.nodes[j];
      if (hooks != nullptr && node.param_count > 0) {
        hooks->need_params(node.param_offset, node.param_count);
      }
      switch (node.type) {
        case LayerType::kConv:
        case LayerType::kFc:
          if (node.attr.weight_norm) {
            ops::weight_norm_forward(params + info.w_off, params + info.g_off, node.units,
                                     node.fan_in, info.w_eff.data(), info.norm.data());
            np.w_plain.set_data_handle(info.w_eff.data());
          } else {
            np.w_plain.set_data_handle(const_cast<float*>(params + info.w_off));
          }
          if (node.bias >= 0) np.bias.set_data_handle(const_cast<float*>(params + info.b_off));
          run(np.w_fwd_reorder);
          if (backward) run(np.w_bwd_reorder);
          run(np.src_reorder);
          run(np.fwd);
          break;
        case LayerType::kBatchNorm:
          np.scale.set_data_handle(const_cast<float*>(params + info.scale_off));
          np.shift.set_data_handle(const_cast<float*>(params + info.shift_off));
          run(np.fwd);
          break;
        case LayerType::kAdd:
          run(np.src1_reorder);
          run(np.fwd);
          break;
        case LayerType::kDropout:
          if (plan.training) dropout_forward(plan, j);
          break;
        default:
          run(np.fwd);
          break;
      }
    }
    run(plan.logits_reorder);
    stream.wait();
  }

  // y = x * keep / (1 - rate), keep drawn per element from the step key, the
  // node and the element's logical position (nn/dropout.hpp), wherever the
  // layout puts it; padding (a blocked layout's) stays dropped.
  void dropout_forward(Plan& plan, std::size_t j) {
    stream.wait();
    const Node& node = *infos[j].node;
    NodePlan& np = plan.nodes[j];
    const float* x = data_of(tensor(plan, node.inputs[0]));
    float* y = data_of(plan.t[j]);
    const auto n = static_cast<std::int64_t>(np.mask.size());
    const double rate = node.attr.rate;
    const std::uint64_t threshold = dropout::threshold(rate);
    const auto keep_scale = static_cast<float>(1.0 / (1.0 - rate));
    const std::uint64_t key = dropout::node_key(step_key, j);
    std::uint8_t* mask = np.mask.data();
    if (np.mask_offsets.empty()) {  // plain: the address is the logical position
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
      for (std::int64_t i = 0; i < n; ++i) {
        mask[i] = dropout::keep(key, static_cast<std::uint64_t>(i), threshold) ? 1 : 0;
      }
    } else {
      const auto& off = np.mask_offsets;  // 4 tables: N, C, H, W (1 entry for a missing one)
      const auto d0 = static_cast<std::int64_t>(off[0].size()),
                 d1 = static_cast<std::int64_t>(off[1].size()),
                 d2 = static_cast<std::int64_t>(off[2].size()),
                 d3 = static_cast<std::int64_t>(off[3].size());
#pragma omp parallel for collapse(2) if (n > (1 << 18)) schedule(static)
      for (std::int64_t a = 0; a < d0; ++a) {
        for (std::int64_t b = 0; b < d1; ++b) {
          const std::int64_t base =
              off[0][static_cast<std::size_t>(a)] + off[1][static_cast<std::size_t>(b)];
          std::uint64_t logical = static_cast<std::uint64_t>((a * d1 + b) * d2 * d3);
          for (std::int64_t c = 0; c < d2; ++c) {
            for (std::int64_t d = 0; d < d3; ++d, ++logical) {
              const std::int64_t at =
                  base + off[2][static_cast<std::size_t>(c)] + off[3][static_cast<std::size_t>(d)];
              mask[at] = dropout::keep(key, logical, threshold) ? 1 : 0;
            }
          }
        }
      }
    }
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) y[i] = mask[i] != 0 ? x[i] * keep_scale : 0.0f;
  }

  void backward(Plan& plan, const float* params, float* grad, float* input_grad) {
    run(plan.dlogits_reorder);
    if (input_grad != nullptr) plan.input_grad.set_data_handle(input_grad);
    for (std::size_t j = infos.size(); j-- > 0;) {
      NodeInfo& info = infos[j];
      const Node& node = *info.node;
      NodePlan& np = plan.nodes[j];
      run(np.relu_bwd);
      switch (node.type) {
        case LayerType::kConv:
        case LayerType::kFc:
          np.dw_plain.set_data_handle(node.attr.weight_norm ? info.dw.data() : grad + info.w_off);
          if (node.bias >= 0) np.diff_bias.set_data_handle(grad + info.b_off);
          run(np.src_w_reorder);
          run(np.diff_dst_w_reorder);
          run(np.bwd_weights);
          run(np.dw_reorder);
          if (node.attr.weight_norm) {
            stream.wait();
            ops::weight_norm_backward(info.dw.data(), params + info.w_off, params + info.g_off,
                                      info.norm.data(), node.units, node.fan_in, grad + info.w_off,
                                      grad + info.g_off);
          }
          run(np.bwd);
          break;
        case LayerType::kBatchNorm:
          np.scale.set_data_handle(const_cast<float*>(params + info.scale_off));
          np.shift.set_data_handle(const_cast<float*>(params + info.shift_off));
          np.diff_scale.set_data_handle(grad + info.scale_off);
          np.diff_shift.set_data_handle(grad + info.shift_off);
          run(np.bwd);
          break;
        case LayerType::kDropout:
          if (!np.deliveries.empty()) {
            stream.wait();
            const float* dy = data_of(plan.d[j]);
            float* dx = data_of(np.deliveries[0].target);
            const auto keep_scale = static_cast<float>(1.0 / (1.0 - node.attr.rate));
            const std::uint8_t* mask = np.mask.data();
            const auto n = static_cast<std::int64_t>(np.mask.size());
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
            for (std::int64_t i = 0; i < n; ++i) dx[i] = mask[i] != 0 ? dy[i] * keep_scale : 0.0f;
          }
          break;
        default:
          run(np.bwd);
          break;
      }
      for (Delivery& dl : np.deliveries) deliver(dl);
      if (hooks != nullptr && node.param_count > 0) {
        // This node's gradient, and every later node's, is final.
        stream.wait();
        hooks->grads_ready(node.param_offset, step_loss);
      }
    }
    stream.wait();
  }

  double step(const float* params, const float* images, const std::int32_t* labels, int batch,
              float* grad, float* input_grad, bool with_backward, StepHooks* step_hooks = nullptr) {
    if (images == nullptr || labels == nullptr ||
        ((params == nullptr || (grad == nullptr && with_backward)) && graph.layout.count > 0)) {
      throw InternalError("CpuNetwork::train_step: null buffer");
    }
    set_threads();
    Plan& plan = plan_for(batch, true, with_backward, input_grad != nullptr);
    if (graph.has_dropout) step_key = batch_key(images, labels, batch);
    // The hooks are this call's alone, also when it throws.
    struct Reset {
      StepHooks*& h;
      ~Reset() { h = nullptr; }
    } reset{hooks};
    hooks = step_hooks;
    forward(plan, params, images, with_backward);
    const double loss =
        ops::softmax_cross_entropy(data_of(plan.logits), labels, batch, graph.outputs,
                                   with_backward ? data_of(plan.dlogits) : nullptr);
    step_loss = static_cast<float>(loss);
    if (with_backward) backward(plan, params, grad, input_grad);
    return loss;
  }
};

CpuNetwork::CpuNetwork(Graph graph, int max_batch, int threads) : m_impl(std::make_unique<Impl>()) {
  if (max_batch < 1) {
    throw ConfigError("network max batch must be >= 1, got " + std::to_string(max_batch));
  }
  Impl& im = *m_impl;
  im.graph = std::move(graph);
  im.max_batch = max_batch;
  im.threads = threads;
  const ParamLayout& layout = im.graph.layout;
  im.infos.resize(im.graph.nodes.size());
  for (std::size_t j = 0; j < im.graph.nodes.size(); ++j) {
    NodeInfo& info = im.infos[j];
    const Node& node = im.graph.nodes[j];
    info.node = &node;
    const LayerDesc& a = node.attr;
    switch (node.type) {
      case LayerType::kConv:
      case LayerType::kFc: {
        info.w_dims = {node.units};
        if (node.type == LayerType::kConv) {
          info.w_dims.insert(info.w_dims.end(), {node.in[0], a.kernel, a.kernel});
          info.strides = {a.stride, a.stride};
          // Symmetric padding, output sizes rounded down (as PyTorch):
          // oneDNN rounds (in + pad_l + pad_r - kernel) / stride down too.
          info.pad_l = {a.pad, a.pad};
          info.pad_r = {a.pad, a.pad};
        } else {
          info.w_dims.insert(info.w_dims.end(), node.in.begin(), node.in.end());
        }
        info.w_off = layout.views[static_cast<std::size_t>(node.weight)].offset;
        if (a.weight_norm) {
          info.g_off = layout.views[static_cast<std::size_t>(node.gain)].offset;
          const auto wn = static_cast<std::size_t>(node.units * node.fan_in);
          info.w_eff.resize(wn);
          info.dw.resize(wn);
          info.norm.resize(static_cast<std::size_t>(node.units));
        }
        if (node.bias >= 0) info.b_off = layout.views[static_cast<std::size_t>(node.bias)].offset;
        break;
      }
      case LayerType::kMaxPool:
      case LayerType::kAvgPool:
        info.kernel = {a.kernel, a.kernel};
        info.strides = {a.stride, a.stride};
        info.pad_l = {a.pad, a.pad};
        info.pad_r = {a.pad, a.pad};
        break;
      case LayerType::kGlobalAvgPool:
        info.kernel = {node.in[1], node.in[2]};
        info.strides = {node.in[1], node.in[2]};
        info.pad_l = {0, 0};
        info.pad_r = {0, 0};
        break;
      case LayerType::kBatchNorm:
        info.scale_off = layout.views[static_cast<std::size_t>(node.scale)].offset;
        info.shift_off = layout.views[static_cast<std::size_t>(node.shift)].offset;
        info.mean.assign(static_cast<std::size_t>(node.out[0]), 0.0f);
        info.var.assign(static_cast<std::size_t>(node.out[0]), 1.0f);
        break;
      default:
        break;
    }
  }
}

CpuNetwork::~CpuNetwork() = default;

float CpuNetwork::train_step(const float* params, const float* images, const std::int32_t* labels,
                             int batch, float* grad) {
  return static_cast<float>(m_impl->step(params, images, labels, batch, grad, nullptr, true));
}

float CpuNetwork::train_step_staged(const float* params, const float* images,
                                    const std::int32_t* labels, int batch, float* grad,
                                    StepHooks& hooks) {
  return static_cast<float>(
      m_impl->step(params, images, labels, batch, grad, nullptr, true, &hooks));
}

float CpuNetwork::train_step_with_input_grad(const float* params, const float* images,
                                             const std::int32_t* labels, int batch, float* grad,
                                             float* input_grad) {
  if (input_grad == nullptr) throw InternalError("train_step_with_input_grad: null input_grad");
  return static_cast<float>(m_impl->step(params, images, labels, batch, grad, input_grad, true));
}

double CpuNetwork::train_loss(const float* params, const float* images, const std::int32_t* labels,
                              int batch) {
  return m_impl->step(params, images, labels, batch, nullptr, nullptr, false);
}

void CpuNetwork::predict(const float* params, const float* images, int batch, float* logits) {
  Impl& im = *m_impl;
  if (images == nullptr || logits == nullptr || (params == nullptr && im.graph.layout.count > 0)) {
    throw InternalError("CpuNetwork::predict: null buffer");
  }
  if (im.graph.has_batch_norm && !im.stats_set) {
    throw InternalError(
        "CpuNetwork::predict: a model with batch norm needs set_batch_norm_statistics() for the "
        "parameters it evaluates first");
  }
  im.set_threads();
  // Without batch norm or dropout, inference is the training forward.
  const bool training = !im.graph.has_batch_norm && !im.graph.has_dropout;
  Plan& plan = im.plan_for(batch, training, false, false);
  im.forward(plan, params, images, false);
  const float* src = data_of(plan.logits);
  std::copy(src, src + static_cast<std::int64_t>(batch) * im.graph.outputs, logits);
}

bool CpuNetwork::has_batch_norm() const { return m_impl->graph.has_batch_norm; }

void CpuNetwork::set_batch_norm_statistics(const float* params, const float* images, int batch,
                                           int batches) {
  Impl& im = *m_impl;
  if (!im.graph.has_batch_norm) return;
  if (batches < 1 || images == nullptr || (params == nullptr && im.graph.layout.count > 0)) {
    throw InternalError("set_batch_norm_statistics: no batches or a null buffer");
  }
  im.set_threads();
  Plan& plan = im.plan_for(batch, true, false, false);
  const std::size_t per_example =
      static_cast<std::size_t>(im.graph.input[0] * im.graph.input[1] * im.graph.input[2]);
  std::vector<std::vector<double>> sum(im.infos.size()), sum_sq(im.infos.size());
  for (int b = 0; b < batches; ++b) {
    const float* x =
        images + static_cast<std::size_t>(b) * static_cast<std::size_t>(batch) * per_example;
    if (im.graph.has_dropout) im.step_key = im.batch_key(x, nullptr, batch);
    im.forward(plan, params, x, false);
    for (std::size_t j = 0; j < im.infos.size(); ++j) {
      if (im.infos[j].node->type != LayerType::kBatchNorm) continue;
      const auto c = static_cast<std::size_t>(im.infos[j].node->out[0]);
      sum[j].resize(c, 0.0);
      sum_sq[j].resize(c, 0.0);
      const float* m = data_of(plan.nodes[j].mean);
      const float* v = data_of(plan.nodes[j].var);
      for (std::size_t k = 0; k < c; ++k) {
        sum[j][k] += m[k];
        sum_sq[j][k] += static_cast<double>(v[k]) + static_cast<double>(m[k]) * m[k];
      }
    }
  }
  // Equal batches: the mean of all examples is the mean of the batch means,
  // and E[x^2] the mean of (var_b + mean_b^2).
  for (std::size_t j = 0; j < im.infos.size(); ++j) {
    NodeInfo& info = im.infos[j];
    if (info.node->type != LayerType::kBatchNorm) continue;
    for (std::size_t k = 0; k < info.mean.size(); ++k) {
      const double mean = sum[j][k] / batches;
      const double var = sum_sq[j][k] / batches - mean * mean;
      info.mean[k] = static_cast<float>(mean);
      info.var[k] = static_cast<float>(std::max(var, 0.0));
    }
  }
  im.stats_set = true;
}

int CpuNetwork::max_batch() const { return m_impl->max_batch; }

void CpuNetwork::set_dropout_key(std::optional<std::uint64_t> key) { m_impl->dropout_key = key; }

const ParamLayout& CpuNetwork::layout() const { return m_impl->graph.layout; }

const Graph& CpuNetwork::graph() const { return m_impl->graph; }

std::vector<std::string> CpuNetwork::implementations(int batch) {
  m_impl->set_threads();
  Plan& plan = m_impl->plan_for(batch, true, true, false);
  std::vector<std::string> out;
  m_impl->for_each_exec(plan, [&](Exec& e) { out.push_back(e.what); });
  return out;
}

}  // namespace syncopt::nn::cpu
