// The staged training step of the CUDA network (nn::Network::
// train_step_staged, docs/design.md §4's pipelined exchange) as the host
// drives it, free of CUDA so that the order is tested without a GPU
// (tests/cuda/test_cuda_logic.cpp) and the network only supplies the
// device operations:
//
// - forward, in graph order (nn::walk_forward): the hooks are asked for a
//   node's parameters (the host blocks until they are in), then the node's
//   parameter group is staged and copied up on the copy stream, and the
//   node's forward is enqueued on the compute stream behind an event of that
//   copy: a layer starts only when its parameters are uploaded, and the
//   host asks for the next layer's while the GPU computes this one;
// - the loss and dL/dlogits, the per-example losses copied down at once;
// - backward, in reverse (nn::walk_backward): each node's backward is
//   enqueued, and once a node with parameters is done its gradient group is
//   copied down on the copy stream behind an event (it overlaps the
//   backward of the nodes below);
// - then, top node first, the host waits for each group's copy, unstages it
//   into the caller's gradient and tells the hooks (grads_ready): a bucket
//   is sent only when its gradient is on the host. The loss they are told
//   is the step's, read back (with the bad-label flag) before the first.
//
// Device, for node j: upload(j), forward(j), loss(), backward(j),
// download(j), wait_loss() -> float, wait_download(j), finish().
#pragma once

#include <cstddef>

#include "nn/backend.hpp"
#include "nn/graph.hpp"
#include "nn/walk.hpp"

namespace syncopt::cuda {

template <class Device>
float staged_step(const nn::Graph& graph, nn::StepHooks& hooks, Device& device) {
  nn::walk_forward(graph, &hooks, [&](std::size_t j) {
    if (graph.nodes[j].param_count > 0) device.upload(j);
    device.forward(j);
  });
  device.loss();
  nn::walk_backward(
      graph, [&](std::size_t j) { device.backward(j); },
      [&](std::size_t j) { device.download(j); });
  const float loss = device.wait_loss();
  for (std::size_t j = graph.nodes.size(); j-- > 0;) {
    const nn::Node& node = graph.nodes[j];
    if (node.param_count == 0) continue;
    device.wait_download(j);
    hooks.grads_ready(node.param_offset, loss);
  }
  device.finish();
  return loss;
}

}  // namespace syncopt::cuda
