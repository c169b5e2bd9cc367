// The CUDA network's one table of layer kinds (see kinds.hpp), and the pass
// helper every kind that passes a gradient on shares.
#include "kinds.hpp"

#include <array>

#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net {

namespace {

using T = LayerType;

// In LayerType order: a kind added to the enum without its row here fails
// the static_assert.
constexpr std::array<KindOps, nn::kLayerTypeCount> kKinds = {{
    {T::kConv, conv::setup, conv::plan_forward, conv::plan_backward, conv::forward, conv::backward},
    {T::kBatchNorm, batch_norm::setup, nullptr, nullptr, batch_norm::forward, batch_norm::backward},
    {T::kRelu, nullptr, nullptr, nullptr, relu::forward, relu::backward},
    {T::kAdd, nullptr, nullptr, nullptr, add::forward, add::backward},
    {T::kMaxPool, pool::setup, pool::plan_forward, nullptr, pool::forward, pool::backward},
    {T::kAvgPool, pool::setup, pool::plan_forward, nullptr, pool::forward, pool::backward},
    {T::kGlobalAvgPool, pool::setup, pool::plan_forward, nullptr, pool::forward, pool::backward},
    {T::kFc, weighted::setup, nullptr, nullptr, fc::forward, fc::backward},
    {T::kDropout, dropout::setup, nullptr, nullptr, dropout::forward, dropout::backward},
    {T::kFlatten, nullptr, nullptr, nullptr, flatten::forward, flatten::backward},
    {T::kGelu, nullptr, nullptr, nullptr, gelu::forward, gelu::backward},
}};
static_assert(nn::in_layer_type_order(kKinds), "kKinds must list every LayerType in order");

}  // namespace

const KindOps& kind_ops(LayerType type) { return kKinds[static_cast<std::size_t>(type)]; }

void Pass::pass_on(Delivery d, void* dst, const void* src, std::size_t n) const {
  if (d == Delivery::kWrite) {
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(dst, src, nbytes(n), cudaMemcpyDeviceToDevice, stream));
  } else if (d == Delivery::kAccumulate) {
    with_type(numerics, [&]<class T>() {
      accumulate(static_cast<T*>(dst), static_cast<const T*>(src), n, stream);
    });
  }
}

}  // namespace syncopt::cuda::net
