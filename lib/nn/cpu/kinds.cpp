// The CPU backend's one table of layer kinds (see kinds.hpp).
#include "nn/cpu/kinds.hpp"

#include <array>

namespace syncopt::nn::cpu {

namespace {

using T = LayerType;

// In LayerType order: a kind added to the enum without its row here fails
// the static_assert.
constexpr std::array<KindOps, kLayerTypeCount> kKinds = {{
    {T::kConv, weighted::setup, conv::plan_forward, conv::plan_backward, weighted::forward,
     weighted::backward},
    {T::kBatchNorm, batch_norm::setup, batch_norm::plan_forward, batch_norm::plan_backward,
     batch_norm::forward, batch_norm::backward, true},
    {T::kRelu, nullptr, relu::plan_forward, relu::plan_backward, nullptr, nullptr},
    {T::kAdd, nullptr, add::plan_forward, add::plan_backward, add::forward, nullptr},
    {T::kMaxPool, pool::setup, pool::plan_forward, pool::plan_backward, nullptr, nullptr},
    {T::kAvgPool, pool::setup, pool::plan_forward, pool::plan_backward, nullptr, nullptr},
    {T::kGlobalAvgPool, pool::setup, pool::plan_forward, pool::plan_backward, nullptr, nullptr},
    {T::kFc, weighted::setup, fc::plan_forward, fc::plan_backward, weighted::forward,
     weighted::backward},
    {T::kDropout, nullptr, dropout::plan_forward, dropout::plan_backward, dropout::forward,
     dropout::backward},
    {T::kFlatten, nullptr, flatten::plan_forward, flatten::plan_backward, nullptr, nullptr},
    {T::kGelu, nullptr, gelu::plan_forward, gelu::plan_backward, nullptr, nullptr},
}};
static_assert(in_layer_type_order(kKinds), "kKinds must list every LayerType in order");

}  // namespace

const KindOps& kind_ops(LayerType type) { return kKinds[static_cast<std::size_t>(type)]; }

}  // namespace syncopt::nn::cpu
