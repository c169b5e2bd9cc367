// Dropout: y = x * keep / (1 - rate), keep drawn per element from the
// step's key, the node and the element's logical position (nn/dropout.hpp),
// wherever the layout puts it, so that every backend and layout drops the
// same elements; padding (a blocked layout's) stays dropped. At inference
// the identity: the output is the input's buffer.
#include "nn/dropout.hpp"

#include "common/bf16.hpp"
#include "common/error.hpp"
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::dropout {

namespace {

// Per dimension of a tensor's memory desc, the offset (in elements) that
// each logical index of that dimension contributes to an element's address:
// in oneDNN's blocked formats (plain, nhwc, nChw16c, ...) an address is
// offset0 plus one such term per dimension, the outer block's stride and
// the position inside the inner blocks of that dimension
// (memory_desc_wrapper::off_v, split by dimension).
std::vector<std::vector<std::int64_t>> dim_offsets(const memory::desc& md) {
  if (md.get_format_kind() != memory::format_kind::blocked) {
    throw InternalError("dropout on a tensor whose layout is not a blocked one");
  }
  const memory::dims dims = md.get_dims(), strides = md.get_strides();
  const memory::dims inner_blks = md.get_inner_blks(), inner_idxs = md.get_inner_idxs();
  const int nblks = md.get_inner_nblks();
  const std::int64_t offset0 = md.get_submemory_offset();
  std::vector<std::vector<std::int64_t>> out(dims.size());
  for (std::size_t dim = 0; dim < dims.size(); ++dim) {
    auto& table = out[dim];
    table.resize(static_cast<std::size_t>(dims[dim]));
    for (std::int64_t pos = 0; pos < dims[dim]; ++pos) {
      std::int64_t p = pos, off = 0, inner_stride = 1;
      for (int b = nblks - 1; b >= 0; --b) {
        const auto k = static_cast<std::size_t>(b);
        if (inner_idxs[k] == static_cast<memory::dim>(dim)) {
          off += (p % inner_blks[k]) * inner_stride;
          p /= inner_blks[k];
        }
        inner_stride *= inner_blks[k];
      }
      table[static_cast<std::size_t>(pos)] = off + p * strides[dim] + (dim == 0 ? offset0 : 0);
    }
  }
  return out;
}

// The mask of a tensor in a blocked layout: each element's keep drawn at
// its logical position, stored at its address.
void blocked_mask(const std::vector<std::vector<std::int64_t>>& off, std::uint64_t key,
                  std::uint64_t threshold, std::uint8_t* mask, std::int64_t n) {
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
          mask[at] = ::syncopt::nn::dropout::keep(key, logical, threshold) ? 1 : 0;
        }
      }
    }
  }
}

// y = mask ? x * scale : 0 over the elements of x and y (one type, f32 or
// bf16; in bf16 the product is rounded to nearest even, as oneDNN rounds).
void apply_mask(const std::uint8_t* mask, const memory& x, float scale, const memory& y) {
  const auto n = element_count(y);
  if (x.get_desc().get_data_type() == Dt::bf16) {
    const auto* xs = static_cast<const std::uint16_t*>(x.get_data_handle());
    auto* ys = static_cast<std::uint16_t*>(y.get_data_handle());
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      ys[i] = mask[i] != 0 ? bf16::from_float(bf16::to_float(xs[i]) * scale) : std::uint16_t{0};
    }
    return;
  }
  const float* xs = data_of(x);
  float* ys = data_of(y);
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) ys[i] = mask[i] != 0 ? xs[i] * scale : 0.0f;
}

float keep_scale(const Node& node) { return static_cast<float>(1.0 / (1.0 - node.attr.rate)); }

}  // namespace

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
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
  np.mask.assign(static_cast<std::size_t>(element_count(in)), 0);
  if (in.get_desc() != plain_desc(with_batch(plan.batch, node.in), in.get_desc().get_data_type())) {
    np.mask_offsets = dim_offsets(in.get_desc());
    while (np.mask_offsets.size() < 4) np.mask_offsets.push_back({0});
  }
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  if (!cx.wants_grad(plan, j, 0)) return;
  plan.nodes[j].deliveries.push_back(cx.plan_delivery(plan, j, 0, plan.t[j].get_desc()));
}

void forward(Context& cx, Plan& plan, std::size_t j, const float* /*params*/, bool /*backward*/) {
  if (!plan.training) return;
  cx.stream.wait();
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const auto n = static_cast<std::int64_t>(np.mask.size());
  const std::uint64_t threshold = ::syncopt::nn::dropout::threshold(node.attr.rate);
  const std::uint64_t key = ::syncopt::nn::dropout::node_key(cx.step_key, j);
  std::uint8_t* mask = np.mask.data();
  if (np.mask_offsets.empty()) {  // plain: the address is the logical position
#pragma omp parallel for simd if (n > (1 << 18)) schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      mask[i] = ::syncopt::nn::dropout::keep(key, static_cast<std::uint64_t>(i), threshold) ? 1 : 0;
    }
  } else {
    blocked_mask(np.mask_offsets, key, threshold, mask, n);
  }
  apply_mask(mask, cx.tensor(plan, node.inputs[0]), keep_scale(node), plan.t[j]);
}

void backward(Context& cx, Plan& plan, std::size_t j, const float* /*params*/, float* /*grad*/) {
  NodePlan& np = plan.nodes[j];
  if (np.deliveries.empty()) return;
  cx.stream.wait();
  apply_mask(np.mask.data(), plan.d[j], keep_scale(cx.node(j)), np.deliveries[0].target);
}

}  // namespace syncopt::nn::cpu::dropout
