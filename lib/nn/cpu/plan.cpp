// The CPU backend's shared plan helpers (see plan.hpp).
#include "nn/cpu/plan.hpp"

#include <cstring>

#include "common/error.hpp"

namespace syncopt::nn::cpu {

namespace {

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

}  // namespace

memory::desc plain_desc(const memory::dims& dims, Dt dt) {
  return {dims, dt, plain_tag(dims.size())};
}

memory::desc any_desc(const memory::dims& dims, Dt dt) { return {dims, dt, Tag::any}; }

std::int64_t element_count(const memory& m) {
  const memory::desc md = m.get_desc();
  return static_cast<std::int64_t>(md.get_size() / memory::data_type_size(md.get_data_type()));
}

float* data_of(const memory& m) { return static_cast<float*>(m.get_data_handle()); }

memory::dims with_batch(memory::dim n, const std::vector<std::int64_t>& shape) {
  memory::dims dims = {n};
  dims.insert(dims.end(), shape.begin(), shape.end());
  return dims;
}

dnnl::primitive_attr make_attr(bool relu) {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (relu) {
    dnnl::post_ops po;
    po.append_eltwise(dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(po);
  }
  return attr;
}

Exec Context::make_reorder(Plan& plan, const memory& from, const memory& to,
                           const std::string& what, bool sum) {
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

const memory& Context::tensor(const Plan& plan, int id) const {
  if (id == kGraphInput) return plan.input_act ? plan.input_act : plan.input;
  return plan.t[static_cast<std::size_t>(id)];
}

memory& Context::grad_of(Plan& plan, int id) {
  return id == kGraphInput ? plan.input_grad : plan.d[static_cast<std::size_t>(id)];
}

// How `dl.target` reaches the gradient `g` (first: g has none yet).
void Context::plan_move(Plan& plan, GradTransfer& dl, const memory& g, bool first,
                        const std::string& what) {
  dl.to = g;
  if (dl.target.get_desc() == g.get_desc() && first) {
    dl.move = GradTransfer::Move::kCopy;
    return;
  }
  if (dl.target.get_desc() == g.get_desc()) {  // g += target, in place
    dl.move = GradTransfer::Move::kAdd;
    const dnnl::binary::primitive_desc pd(engine, dnnl::algorithm::binary_add, g.get_desc(),
                                          g.get_desc(), g.get_desc(), make_attr(false));
    note_scratch(plan, pd);
    dl.exec = Exec{dnnl::binary(pd),
                   {{DNNL_ARG_SRC_0, g}, {DNNL_ARG_SRC_1, dl.target}, {DNNL_ARG_DST, g}},
                   what + " dinput sum: " + pd.impl_info_str()};
    return;
  }
  dl.move = GradTransfer::Move::kReorder;
  dl.exec =
      make_reorder(plan, dl.target, g, what + (first ? " dinput reorder" : " dinput sum"), !first);
}

GradTransfer Context::plan_delivery(Plan& plan, std::size_t j, std::size_t slot,
                                    const memory::desc& natural) {
  const Delivery how = plan.grads.into[j][slot];
  const bool first = how == Delivery::kWrite;
  memory& g = grad_of(plan, graph.nodes[j].inputs[slot]);
  GradTransfer dl;
  if (first && natural == g.get_desc()) {
    dl.target = g;
    return dl;
  }
  dl.target = memory(natural, engine);
  plan_move(plan, dl, g, first, graph.nodes[j].name);
  return dl;
}

GradTransfer Context::plan_pass_on(Plan& plan, std::size_t j, std::size_t slot,
                                   const memory& source) {
  const bool first = plan.grads.into[j][slot] == Delivery::kWrite;
  GradTransfer dl;
  dl.target = source;
  plan_move(plan, dl, grad_of(plan, graph.nodes[j].inputs[slot]), first, graph.nodes[j].name);
  return dl;
}

void Context::deliver(GradTransfer& dl) {
  switch (dl.move) {
    case GradTransfer::Move::kNone:
      return;
    case GradTransfer::Move::kReorder:
    case GradTransfer::Move::kAdd:
      run(dl.exec);
      return;
    case GradTransfer::Move::kCopy:
      stream.wait();
      std::memcpy(dl.to.get_data_handle(), dl.target.get_data_handle(),
                  dl.to.get_desc().get_size());
      return;
  }
}

memory Arena::take(const memory::desc& md) {
  if (m_plan.training) {
    m_owner.push_back(0);
    return memory(md, m_cx.engine);
  }
  const std::size_t nbytes = md.get_size();
  std::size_t best = m_free.size();
  for (std::size_t k = 0; k < m_free.size(); ++k) {
    const std::size_t have = m_plan.buffers[m_free[k]].get_desc().get_size();
    if (have >= nbytes &&
        (best == m_free.size() || have < m_plan.buffers[m_free[best]].get_desc().get_size())) {
      best = k;
    }
  }
  std::size_t id = 0;
  if (best < m_free.size()) {
    id = m_free[best];
    m_free.erase(m_free.begin() + static_cast<std::ptrdiff_t>(best));
  } else {
    id = m_plan.buffers.size();
    m_plan.buffers.emplace_back(memory::desc({static_cast<memory::dim>(nbytes)}, Dt::u8, Tag::a),
                                m_cx.engine);
  }
  m_owner.push_back(id);
  return memory(md, m_cx.engine, m_plan.buffers[id].get_data_handle());
}

}  // namespace syncopt::nn::cpu
