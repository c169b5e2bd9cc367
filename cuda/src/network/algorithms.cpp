// The convolution algorithms of a plan (see rt.hpp): timed (cudnnFind)
// results, fastest first, or cuDNN's heuristics in deterministic mode; the
// choice rule and the FP32-math filter are here once for the three
// directions.
#include <cstddef>
#include <string>

#include "common/error.hpp"
#include "rt.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda::net {

namespace {

// Largest cuDNN workspace an algorithm may ask for; faster algorithms that
// want more are skipped.
constexpr std::size_t kMaxWorkspaceNbytes = std::size_t{512} << 20;

// Succeeded and fits the workspace limit; with fp32_math, also reported in
// FMA or default math (a tensor-op entry was timed with TF32). The
// descriptors stay in CUDNN_FMA_MATH whatever an entry says, so the
// convolution runs in FP32 either way; the math filter only keeps the
// choice from resting on a TF32 timing.
template <class Perf>
bool usable(const Perf& p, bool fp32_math) {
  return p.status == CUDNN_STATUS_SUCCESS && p.memory <= kMaxWorkspaceNbytes &&
         (!fp32_math || p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH);
}

// Timed (cudnnFind) results, fastest first: the fastest usable algorithm,
// or a deterministic one when it is within 20% of that (so that repeated
// runs agree bit for bit where it is cheap). Heuristic (cudnnGet_v7)
// results in deterministic mode: the first usable deterministic one.
// Entries in FP32 math first; any math only when there are none.
// strict: the FP32 path without TF32, where a tensor-op timing is not the
// math that will run; bf16 and TF32 take any entry.
template <class Perf>
Perf choose(const Perf* perf, int returned, bool deterministic, bool strict, const char* what) {
  for (const bool fp32_math : {true, false}) {
    if (fp32_math && !strict) continue;
    const Perf* best = nullptr;
    for (int i = 0; i < returned && best == nullptr; ++i) {
      if (usable(perf[i], fp32_math) &&
          (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC)) {
        best = &perf[i];
      }
    }
    if (best == nullptr) continue;
    if (!deterministic && best->determinism != CUDNN_DETERMINISTIC) {
      for (int i = 0; i < returned; ++i) {
        if (usable(perf[i], fp32_math) && perf[i].determinism == CUDNN_DETERMINISTIC &&
            perf[i].time <= 1.2f * best->time) {
          return perf[i];
        }
      }
    }
    return *best;
  }
  throw InternalError(std::string("cuDNN found no usable ") +
                      (deterministic ? "deterministic " : "") + what +
                      " algorithm for this layer shape");
}

bool strict(const Planner& p) { return !p.numerics.bf16 && !p.numerics.tf32; }

void log_choice(Planner& p, const NodeRt& r, const char* what, int algo) {
  p.algorithms += " " + r.node->name + "." + what + "=" + std::to_string(algo);
}

}  // namespace

void choose_forward_algorithm(Planner& p, NodeRt& r, NodePlan& np) {
  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  const bool det = p.options->deterministic;
  if (det) {
    SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(
        p.cudnn, np.x.get(), r.filter.get(), r.conv.get(), np.y.get(),
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  } else {
    SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithm(
        p.cudnn, np.x.get(), r.filter.get(), r.conv.get(), np.y.get(),
        CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
  }
  np.fwd_algo = choose(perf, returned, det, strict(p), "forward convolution").algo;
  std::size_t ws = 0;
  SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(
      p.cudnn, np.x.get(), r.filter.get(), r.conv.get(), np.y.get(), np.fwd_algo, &ws));
  p.need_workspace(ws);
  log_choice(p, r, "fwd", static_cast<int>(np.fwd_algo));
}

void choose_backward_algorithms(Planner& p, NodeRt& r, NodePlan& np) {
  const bool det = p.options->deterministic;
  cudnnConvolutionBwdFilterAlgoPerf_t fperf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int returned = 0;
  if (det) {
    SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
        p.cudnn, np.x.get(), np.y.get(), r.conv.get(), r.filter.get(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, fperf));
  } else {
    SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(
        p.cudnn, np.x.get(), np.y.get(), r.conv.get(), r.filter.get(),
        CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, fperf));
  }
  np.bwd_filter_algo = choose(fperf, returned, det, strict(p), "backward-filter convolution").algo;
  std::size_t ws = 0;
  SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
      p.cudnn, np.x.get(), np.y.get(), r.conv.get(), r.filter.get(), np.bwd_filter_algo, &ws));
  p.need_workspace(ws);
  log_choice(p, r, "bwd_filter", static_cast<int>(np.bwd_filter_algo));
  // Backward-data of a conv on the images runs only for an input gradient
  // (the tests); its algorithm is chosen anyway, once.
  cudnnConvolutionBwdDataAlgoPerf_t dperf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  if (det) {
    SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        p.cudnn, r.filter.get(), np.y.get(), r.conv.get(), np.x.get(),
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, dperf));
  } else {
    SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(
        p.cudnn, r.filter.get(), np.y.get(), r.conv.get(), np.x.get(),
        CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, dperf));
  }
  np.bwd_data_algo = choose(dperf, returned, det, strict(p), "backward-data convolution").algo;
  SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
      p.cudnn, r.filter.get(), np.y.get(), r.conv.get(), np.x.get(), np.bwd_data_algo, &ws));
  p.need_workspace(ws);
  log_choice(p, r, "bwd_data", static_cast<int>(np.bwd_data_algo));
}

void check_output(const NodeRt& r, int oc, int oh, int ow) {
  if (oc != r.out.c || oh != r.out.h || ow != r.out.w) {
    throw InternalError("cuDNN's output of node '" + r.node->name + "' is " + std::to_string(oc) +
                        "x" + std::to_string(oh) + "x" + std::to_string(ow) + ", the graph's " +
                        nn::shape_string(r.node->out));
  }
}

Chw chw_of(const std::vector<std::int64_t>& shape) {
  Chw t;
  t.c = static_cast<int>(shape.at(0));
  if (shape.size() == 3) {
    t.h = static_cast<int>(shape[1]);
    t.w = static_cast<int>(shape[2]);
  }
  return t;
}

}  // namespace syncopt::cuda::net
