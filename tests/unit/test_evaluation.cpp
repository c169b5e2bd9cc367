// Tests of lib/train/evaluation: a model with batch norm is evaluated with
// the statistics of the very parameters evaluated, θ and θ̄ each their own
// (docs/bn.md).
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <random>
#include <vector>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "data/dataset.hpp"
#include "metrics/records.hpp"
#include "nn/backend.hpp"
#include "nn/graph.hpp"
#include "train/evaluation.hpp"

namespace nn = syncopt::nn;
namespace train = syncopt::train;

namespace {

syncopt::data::Dataset random_set(std::int64_t count, std::uint64_t seed) {
  syncopt::data::Dataset d;
  d.name = "random";
  d.count = count;
  d.channels = 1;
  d.height = d.width = 4;
  d.classes = 3;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd;
  d.images.resize(static_cast<std::size_t>(count * 16));
  for (float& x : d.images) x = nd(rng);
  for (std::int64_t i = 0; i < count; ++i) d.labels.push_back(static_cast<std::int32_t>(rng() % 3));
  return d;
}

}  // namespace

TEST_CASE("EvalLog evaluates theta and its EMA each with its own batch-norm statistics",
          "[train]") {
  // fc - bn - relu - fc: batch norm undoes any scale of the first fc, so a
  // θ̄ that is θ with the first fc times 3 predicts exactly as θ, when (and
  // only when) it is normalised with statistics of its own.
  nn::ModelSpec spec;
  spec.model = syncopt::nn::Builtin::kCustom;
  spec.channels = 1;
  spec.height = spec.width = 4;
  spec.classes = 3;
  nn::LayerDesc f1, bn, relu, f2;
  f1.type = nn::LayerType::kFc;
  f1.name = "f1";
  f1.out = 6;
  bn.type = nn::LayerType::kBatchNorm;
  relu.type = nn::LayerType::kRelu;
  f2.type = nn::LayerType::kFc;
  spec.layers = {f1, bn, relu, f2};
  const nn::Graph graph = nn::model_graph(spec);
  std::vector<float> theta(graph.layout.count);
  nn::init_params(graph, theta.data(), 5);
  // A classifier of some weight (init_params starts it near 0), so that the
  // loss depends on what batch norm gives it.
  const nn::ParamView& f2w = graph.layout.find("fc4.w");
  for (std::size_t i = 0; i < f2w.count; ++i) theta[f2w.offset + i] *= 30.0f;
  std::vector<float> ema = theta;
  for (const char* name : {"f1.w", "f1.b"}) {
    const nn::ParamView& v = graph.layout.find(name);
    for (std::size_t i = 0; i < v.count; ++i) {
      theta[v.offset + i] += 0.05f * static_cast<float>(i % 7);  // a non-zero bias
      ema[v.offset + i] = 3.0f * theta[v.offset + i];
    }
  }
  const auto trainset = random_set(256, 1), testset = random_set(100, 2);
  auto net = nn::make_cpu_backend(1)->make_network(spec, 50);
  const auto dir = std::filesystem::temp_directory_path() / "syncopt_test_evaluation";
  std::filesystem::create_directories(dir);
  syncopt::metrics::JsonlWriter log(dir / "eval.jsonl");
  const syncopt::RunClock clock;
  train::EvalLog eval(*net, testset, log, 256.0, true, clock);
  CHECK_THROWS_AS(eval.run(1, 32, theta.data(), ema.data()), syncopt::InternalError);
  eval.set_batch_norm_set(trainset, 32, 4, 9);
  const train::EvalPoint p = eval.run(1, 32, theta.data(), ema.data());
  CHECK(p.ema.loss == Approx(p.theta.loss).epsilon(1e-5));
  CHECK(p.ema.accuracy == p.theta.accuracy);
  // θ̄ with θ's statistics is another model: the check above can tell.
  net->set_batch_norm_statistics(theta.data(), trainset.images.data(), 32, 4);
  const train::EvalResult wrong = train::evaluate(*net, ema.data(), testset);
  CHECK(std::abs(wrong.loss - p.theta.loss) > 0.05);
  std::filesystem::remove_all(dir);
}
