// CpuNetwork: runs a layer graph (cpu_network.hpp) with oneDNN 3
// primitives. This file is the walk; how each layer kind plans and runs its
// primitives is one function per kind and stage (lib/nn/cpu/kinds.hpp),
// and what both backends decide alike (the order, who writes a gradient and
// who adds, buffer reuse) is nn/walk.hpp's.
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
// oneDNN 3 has no fast kernel for its blocked one). A ReLU the graph fused
// into a conv / fc / add is a post-op (into a batch norm, its fuse_norm_relu
// flag), and its backward masks the incoming gradient with the stored
// (post-ReLU) output.
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
#include <map>
#include <utility>

#include "common/error.hpp"
#include "nn/cpu/kinds.hpp"
#include "nn/cpu/plan.hpp"
#include "nn/dropout.hpp"
#include "nn/ops.hpp"
#include "nn/walk.hpp"

namespace syncopt::nn::cpu {

struct CpuNetwork::Impl {
  Context cx;
  int max_batch = 0;
  int threads = 0;
  std::map<std::pair<int, bool>, std::unique_ptr<Plan>> plans;  // (batch, training)
  bool stats_set = false;
  std::optional<std::uint64_t> dropout_key;

  const Graph& graph() const { return cx.graph; }

  void set_threads() const {
    if (threads > 0) omp_set_num_threads(threads);
  }

  template <class Fn>
  static void for_each_exec(Plan& plan, Fn&& fn) {
    for (NodePlan& np : plan.nodes) {
      for (auto* e : {&np.src_reorder, &np.src1_reorder, &np.w_fwd_reorder, &np.fwd,
                      &np.w_bwd_reorder, &np.src_w_reorder, &np.diff_dst_w_reorder, &np.bwd_weights,
                      &np.dw_reorder, &np.bwd, &np.relu_bwd}) {
        if (*e) fn(**e);
      }
      for (GradTransfer& dl : np.deliveries) {
        if (dl.exec) fn(*dl.exec);
      }
    }
    for (auto* e : {&plan.input_reorder, &plan.logits_reorder, &plan.dlogits_reorder}) {
      if (*e) fn(**e);
    }
  }

  void attach_scratch(Plan& plan) {
    const memory::desc md({static_cast<memory::dim>(std::max<std::size_t>(plan.scratch_nbytes, 1))},
                          Dt::u8, Tag::a);
    if (!plan.scratch || plan.scratch.get_desc().get_size() < plan.scratch_nbytes) {
      plan.scratch = memory(md, cx.engine);
    }
    for_each_exec(plan, [&](Exec& e) { e.args[DNNL_ARG_SCRATCHPAD] = plan.scratch; });
  }

  // ---- plan construction -------------------------------------------------

  std::unique_ptr<Plan> build_forward(int batch, bool training) {
    auto plan = std::make_unique<Plan>();
    plan->batch = batch;
    plan->training = training;
    const std::size_t count = graph().nodes.size();
    plan->nodes.resize(count);
    plan->t.resize(count);
    plan->input = cx.user_memory(plain_desc(with_batch(batch, graph().input)));
    if (cx.act != Dt::f32) {  // every layer computes in the compute's type, from the images on
      plan->input_act = memory(plain_desc(with_batch(batch, graph().input), cx.act), cx.engine);
      plan->input_reorder = cx.make_reorder(*plan, plan->input, plan->input_act, "input convert");
    }
    const std::vector<std::size_t> last = last_uses(graph());
    Arena arena(cx, *plan);
    std::vector<bool> alias(count, false);
    for (std::size_t j = 0; j < count; ++j) {
      alias[j] = kind_ops(graph().nodes[j].type).plan_forward(cx, *plan, j, arena);
      // Tensors whose last reader was this node give their buffers back
      // (an alias's buffer is given back through the tensor it aliases).
      for (std::size_t k = 0; k <= j; ++k) {
        if (last[k] == j && !alias[k]) arena.release(k);
      }
    }
    // Softmax cross-entropy wants plain [batch, outputs].
    memory& last_t = plan->t[count - 1];
    const memory::desc last_plain = plain_desc(last_t.get_desc().get_dims());
    if (last_t.get_desc() == last_plain) {
      plan->logits = last_t;
    } else {
      plan->logits = memory(last_plain, cx.engine);
      plan->logits_reorder = cx.make_reorder(*plan, last_t, plan->logits, "logits reorder");
    }
    attach_scratch(*plan);
    return plan;
  }

  // dL/d(every node's output): one buffer per node that owns one (the
  // gradient plan's), in its output's layout; the logits' plain gradient,
  // reordered into the last node's layout where they differ.
  void make_gradient_buffers(Plan& plan) {
    const std::size_t count = graph().nodes.size();
    plan.d.assign(count, memory());
    // A shared buffer is a later node's: made first, in reverse order.
    for (std::size_t j = count; j-- > 0;) {
      const auto owner = static_cast<std::size_t>(plan.grads.buffer[j]);
      plan.d[j] = owner == j ? memory(plan.t[j].get_desc(), cx.engine) : plan.d[owner];
    }
    const std::size_t last = count - 1;
    if (plan.logits == plan.t[last]) {
      plan.dlogits = plan.d[last];
      plan.dlogits_reorder.reset();
    } else {
      plan.dlogits = memory(plan.logits.get_desc(), cx.engine);
      plan.dlogits_reorder = cx.make_reorder(plan, plan.dlogits, plan.d[last], "dlogits reorder");
    }
  }

  void build_backward(Plan& plan, bool input_grad) {
    plan.grads = plan_gradients(graph(), input_grad);
    plan.input_grad = cx.user_memory(plan.input.get_desc());
    make_gradient_buffers(plan);
    for (std::size_t j = graph().nodes.size(); j-- > 0;) {
      NodePlan& np = plan.nodes[j];
      const Node& node = graph().nodes[j];
      for (auto* e : {&np.w_bwd_reorder, &np.src_w_reorder, &np.diff_dst_w_reorder, &np.bwd_weights,
                      &np.dw_reorder, &np.bwd, &np.relu_bwd}) {
        e->reset();
      }
      np.deliveries.clear();
      const KindOps& ops = kind_ops(node.type);
      if (node.relu && !ops.masks_own_relu) relu::plan_fused_mask(cx, plan, j);
      ops.plan_backward(cx, plan, j);
    }
    attach_scratch(plan);
    plan.has_backward = true;
    plan.has_input_grad = input_grad;
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

  // The dropout key of a step: fixed, or a hash of the batch.
  std::uint64_t batch_key(const float* images, const std::int32_t* labels, int batch) const {
    if (dropout_key) return *dropout_key;
    const std::size_t floats =
        static_cast<std::size_t>(batch) *
        static_cast<std::size_t>(graph().input[0] * graph().input[1] * graph().input[2]);
    return ::syncopt::nn::dropout::batch_key(images, floats, labels, batch);
  }

  void forward(Plan& plan, const float* params, const float* images, bool backward) {
    plan.input.set_data_handle(const_cast<float*>(images));
    cx.run(plan.input_reorder);
    walk_forward(graph(), cx.hooks, [&](std::size_t j) {
      const KindOps& ops = kind_ops(graph().nodes[j].type);
      if (ops.forward != nullptr) {
        ops.forward(cx, plan, j, params, backward);
      } else {
        cx.run(plan.nodes[j].fwd);
      }
    });
    cx.run(plan.logits_reorder);
    cx.stream.wait();
  }

  void backward(Plan& plan, const float* params, float* grad, float* input_grad) {
    cx.run(plan.dlogits_reorder);
    if (input_grad != nullptr) plan.input_grad.set_data_handle(input_grad);
    walk_backward(
        graph(),
        [&](std::size_t j) {
          NodePlan& np = plan.nodes[j];
          cx.run(np.relu_bwd);
          const KindOps& ops = kind_ops(graph().nodes[j].type);
          if (ops.backward != nullptr) {
            ops.backward(cx, plan, j, params, grad);
          } else {
            cx.run(np.bwd);
          }
          for (GradTransfer& dl : np.deliveries) cx.deliver(dl);
        },
        [&](std::size_t j) {
          if (cx.hooks == nullptr) return;
          // This node's gradient, and every later node's, is final.
          cx.stream.wait();
          cx.hooks->grads_ready(graph().nodes[j].param_offset, cx.step_loss);
        });
    cx.stream.wait();
  }

  double step(const float* params, const float* images, const std::int32_t* labels, int batch,
              float* grad, float* input_grad, bool with_backward, StepHooks* step_hooks = nullptr) {
    if (images == nullptr || labels == nullptr ||
        ((params == nullptr || (grad == nullptr && with_backward)) && graph().layout.count > 0)) {
      throw InternalError("CpuNetwork::train_step: null buffer");
    }
    set_threads();
    Plan& plan = plan_for(batch, true, with_backward, input_grad != nullptr);
    if (graph().has_dropout) cx.step_key = batch_key(images, labels, batch);
    // The hooks are this call's alone, also when it throws.
    struct Reset {
      StepHooks*& h;
      ~Reset() { h = nullptr; }
    } reset{cx.hooks};
    cx.hooks = step_hooks;
    forward(plan, params, images, with_backward);
    const double loss =
        ops::softmax_cross_entropy(data_of(plan.logits), labels, batch, graph().outputs,
                                   with_backward ? data_of(plan.dlogits) : nullptr);
    cx.step_loss = static_cast<float>(loss);
    if (with_backward) backward(plan, params, grad, input_grad);
    return loss;
  }

  // The statistics of every batch norm over `batches` batches at `images`
  // (see set_batch_norm_statistics), into the nodes' infos.
  void batch_norm_statistics(const float* params, const float* images, int batch, int batches) {
    Plan& plan = plan_for(batch, true, false, false);
    const std::size_t per_example =
        static_cast<std::size_t>(graph().input[0] * graph().input[1] * graph().input[2]);
    const std::size_t count = cx.infos.size();
    std::vector<std::vector<double>> sum(count), sum_sq(count);
    for (int b = 0; b < batches; ++b) {
      const float* x =
          images + static_cast<std::size_t>(b) * static_cast<std::size_t>(batch) * per_example;
      if (graph().has_dropout) cx.step_key = batch_key(x, nullptr, batch);
      forward(plan, params, x, false);
      for (std::size_t j = 0; j < count; ++j) {
        if (graph().nodes[j].type != LayerType::kBatchNorm) continue;
        const auto c = static_cast<std::size_t>(graph().nodes[j].out[0]);
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
    for (std::size_t j = 0; j < count; ++j) {
      NodeInfo& info = cx.infos[j];
      if (graph().nodes[j].type != LayerType::kBatchNorm) continue;
      for (std::size_t k = 0; k < info.mean.size(); ++k) {
        const double mean = sum[j][k] / batches;
        const double var = sum_sq[j][k] / batches - mean * mean;
        info.mean[k] = static_cast<float>(mean);
        info.var[k] = static_cast<float>(std::max(var, 0.0));
      }
    }
  }
};

CpuNetwork::CpuNetwork(Graph graph, int max_batch, int threads, Precision precision)
    : m_impl(std::make_unique<Impl>()) {
  if (max_batch < 1) {
    throw ConfigError("network max batch must be >= 1, got " + std::to_string(max_batch));
  }
  Impl& im = *m_impl;
  im.cx.graph = std::move(graph);
  im.max_batch = max_batch;
  im.threads = threads;
  im.cx.act = precision == Precision::kBf16 ? Dt::bf16 : Dt::f32;
  const Graph& g = im.cx.graph;
  im.cx.infos.resize(g.nodes.size());
  for (std::size_t j = 0; j < g.nodes.size(); ++j) {
    NodeInfo& info = im.cx.infos[j];
    info.node = &g.nodes[j];
    const KindOps& ops = kind_ops(g.nodes[j].type);
    if (ops.setup != nullptr) ops.setup(info, g.layout);
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
  if (images == nullptr || logits == nullptr ||
      (params == nullptr && im.graph().layout.count > 0)) {
    throw InternalError("CpuNetwork::predict: null buffer");
  }
  if (im.graph().has_batch_norm && !im.stats_set) {
    throw InternalError(
        "CpuNetwork::predict: a model with batch norm needs set_batch_norm_statistics() for the "
        "parameters it evaluates first");
  }
  im.set_threads();
  // Without batch norm or dropout, inference is the training forward.
  const bool training = !im.graph().has_batch_norm && !im.graph().has_dropout;
  Plan& plan = im.plan_for(batch, training, false, false);
  im.forward(plan, params, images, false);
  const float* src = data_of(plan.logits);
  std::copy(src, src + static_cast<std::int64_t>(batch) * im.graph().outputs, logits);
}

bool CpuNetwork::has_batch_norm() const { return m_impl->graph().has_batch_norm; }

void CpuNetwork::set_batch_norm_statistics(const float* params, const float* images, int batch,
                                           int batches) {
  Impl& im = *m_impl;
  if (!im.graph().has_batch_norm) return;
  if (batches < 1 || images == nullptr || (params == nullptr && im.graph().layout.count > 0)) {
    throw InternalError("set_batch_norm_statistics: no batches or a null buffer");
  }
  im.set_threads();
  im.batch_norm_statistics(params, images, batch, batches);
  im.stats_set = true;
}

int CpuNetwork::max_batch() const { return m_impl->max_batch; }

void CpuNetwork::batch_norm_statistics(int node, std::vector<float>& mean,
                                       std::vector<float>& var) const {
  const Impl& im = *m_impl;
  if (!im.stats_set || node < 0 || static_cast<std::size_t>(node) >= im.cx.infos.size() ||
      im.graph().nodes[static_cast<std::size_t>(node)].type != LayerType::kBatchNorm) {
    throw InternalError("CpuNetwork::batch_norm_statistics: node " + std::to_string(node) +
                        " is no batch norm, or no statistics were set");
  }
  const NodeInfo& info = im.cx.infos[static_cast<std::size_t>(node)];
  mean = info.mean;
  var = info.var;
}

void CpuNetwork::set_dropout_key(std::optional<std::uint64_t> key) { m_impl->dropout_key = key; }

const ParamLayout& CpuNetwork::layout() const { return m_impl->graph().layout; }

const Graph& CpuNetwork::graph() const { return m_impl->graph(); }

std::vector<std::string> CpuNetwork::implementations(int batch) {
  m_impl->set_threads();
  Plan& plan = m_impl->plan_for(batch, true, true, false);
  std::vector<std::string> out;
  Impl::for_each_exec(plan, [&](Exec& e) { out.push_back(e.what); });
  return out;
}

}  // namespace syncopt::nn::cpu
