// Simulated staleness (train.simulated_staleness, replica/staleness.hpp):
// the draws, the parameter ring, and the local trainer against a reference
// loop written here from the definition: update t applies, to θ_t, the
// gradient computed on θ_{t-s_t}.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "data/batch.hpp"
#include "nn/backend.hpp"
#include "nn/model.hpp"
#include "optim/optimizer.hpp"
#include "replica/staleness.hpp"
#include "train/compute.hpp"
#include "train/inputs.hpp"
#include "train/local.hpp"

namespace fs = std::filesystem;
using namespace syncopt;
using replica::ParamHistory;
using replica::StalenessDist;
using replica::StalenessModel;
using replica::StalenessOptions;

namespace {

StalenessModel model_of(double mean, StalenessDist dist, std::uint64_t seed = 1,
                        std::int64_t max = 0) {
  StalenessOptions o;
  o.mean = mean;
  o.dist = dist;
  o.seed = seed;
  o.max = max;
  return StalenessModel(o);
}

double mean_draw(const StalenessModel& m, std::uint64_t n) {
  double sum = 0;
  for (std::uint64_t t = 0; t < n; ++t) sum += static_cast<double>(m.draw(t));
  return sum / static_cast<double>(n);
}

fs::path fresh_dir(const std::string& tag) {
  std::random_device rd;
  const fs::path dir =
      fs::temp_directory_path() / ("syncopt-stale-" + tag + "-" + std::to_string(rd()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A small MLP on synthetic data: every step takes milliseconds.
config::Config tiny_config(const fs::path& dir, const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"run.dir=" + dir.string(),
                                "run.name=r",
                                "run.seed=3",
                                "data.name=synthetic",
                                "data.synthetic_train=256",
                                "data.synthetic_test=64",
                                "model.name=mlp",
                                "model.mlp_hidden=16",
                                "optim.name=sgd",
                                "optim.lr=0.05",
                                "optim.momentum=0.9",
                                "optim.schedule=constant",
                                "optim.ema=0",
                                "train.mode=local",
                                "train.batch=8",
                                "train.steps=30",
                                "eval.batch=64",
                                "compute.threads=1"};
  o.insert(o.end(), extra.begin(), extra.end());
  return config::parse("", "test", o);
}

train::LocalResult train_run(const config::Config& cfg) {
  return train::run_local(cfg, train::cpu_compute(1), /*quiet=*/true);
}

std::vector<float> read_floats(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

std::vector<nlohmann::json> read_steps(const fs::path& run_dir) {
  std::ifstream in(run_dir / "steps.jsonl");
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// The definition, written out: θ_{t+1} = opt(θ_t, ∇L(θ_{t - min(s, t)}; batch t)),
// with the trainer's batches (same loader, seed and shard) and initial θ.
std::vector<float> reference_params(const config::Config& cfg, std::int64_t s) {
  const data::TrainTest d = data::load(train::load_options(cfg));
  const nn::ModelSpec spec = train::model_spec(cfg, d.train);
  const nn::ParamLayout layout = nn::param_layout(spec);
  const int batch = static_cast<int>(cfg.train.batch);
  std::vector<std::vector<float>> theta(1, std::vector<float>(layout.count));  // θ_0 .. θ_t
  nn::init_params(spec, layout, theta[0].data(), cfg.run.seed);
  auto backend = nn::make_cpu_backend(1);
  auto net = backend->make_network(spec, std::max<int>(batch, static_cast<int>(cfg.eval.batch)));
  optim::Optimizer opt(optim::optimizer_options(cfg.optim), layout.count);
  data::BatchLoader loader(d.train, batch, cfg.run.seed, 0, 1, false, train::augment_options(cfg));
  std::vector<float> grad(layout.count);
  const auto lr = static_cast<float>(cfg.optim.lr);
  for (std::int64_t t = 0; t < cfg.train.steps; ++t) {
    loader.next();
    const std::int64_t stale = std::min(s, t);
    net->train_step(theta[static_cast<std::size_t>(t - stale)].data(), loader.images(),
                    loader.labels(), batch, grad.data());
    std::vector<float> next = theta.back();
    opt.step(next.data(), grad.data(), lr);
    theta.push_back(std::move(next));
  }
  return theta.back();
}

}  // namespace

TEST_CASE("staleness draws: fixed, uniform, geometric means and bounds", "[staleness]") {
  const auto fixed = model_of(5, StalenessDist::kFixed);
  CHECK(fixed.max() == 5);
  for (std::uint64_t t = 0; t < 100; ++t) CHECK(fixed.draw(t) == 5);
  CHECK(fixed.at(0) == 0);  // warm-up: only θ_0 exists
  CHECK(fixed.at(3) == 3);
  CHECK(fixed.at(5) == 5);
  CHECK(fixed.at(99) == 5);

  const std::uint64_t n = 200000;
  const auto uni = model_of(10, StalenessDist::kUniform);
  CHECK(uni.max() == 20);
  std::map<std::int64_t, int> hist;
  for (std::uint64_t t = 0; t < n; ++t) ++hist[uni.draw(t)];
  CHECK(hist.begin()->first == 0);
  CHECK(hist.rbegin()->first == 20);
  CHECK(hist.size() == 21);
  for (const auto& [v, c] : hist) CHECK(std::abs(c - static_cast<double>(n) / 21) < 0.05 * n / 21);
  CHECK(mean_draw(uni, n) == Approx(10).epsilon(0.01));
  CHECK(model_of(2.5, StalenessDist::kUniform).max() == 5);

  for (const double s : {0.5, 3.0, 20.0, 50.0}) {
    INFO("geometric mean " << s);
    const auto geo = model_of(s, StalenessDist::kGeometric);
    CHECK(geo.max() == static_cast<std::int64_t>(std::ceil(4 * s)));
    // q solves the clamped mean exactly, and sits just above the unclamped s / (1 + s).
    CHECK(replica::clamped_geometric_mean(geo.geometric_q(), geo.max()) == Approx(s).epsilon(1e-9));
    CHECK(geo.geometric_q() >= s / (1 + s));
    CHECK(mean_draw(geo, n) == Approx(s).epsilon(0.02));
    std::int64_t hi = 0;
    for (std::uint64_t t = 0; t < n; ++t) hi = std::max(hi, geo.draw(t));
    CHECK(hi == geo.max());  // clamped, and the clamp is reached
  }
  // P(s_t = 0) = 1 - q for the geometric.
  const auto geo = model_of(4, StalenessDist::kGeometric, 9, 1000);
  int zeros = 0;
  for (std::uint64_t t = 0; t < n; ++t) zeros += geo.draw(t) == 0 ? 1 : 0;
  CHECK(zeros / static_cast<double>(n) == Approx(1 - geo.geometric_q()).epsilon(0.02));
  CHECK(geo.geometric_q() == Approx(0.8).epsilon(1e-6));  // max far above: q = s / (1 + s)
}

TEST_CASE("staleness draws are a function of (seed, t)", "[staleness]") {
  const auto a = model_of(10, StalenessDist::kGeometric, 1);
  const auto b = model_of(10, StalenessDist::kGeometric, 1);
  const auto c = model_of(10, StalenessDist::kGeometric, 2);
  int differ = 0;
  for (std::uint64_t t = 0; t < 1000; ++t) {
    CHECK(a.draw(t) == b.draw(t));
    differ += a.draw(t) != c.draw(t) ? 1 : 0;
  }
  CHECK(differ > 800);
  // Out of order, the same values: nothing to checkpoint.
  CHECK(a.draw(500) == b.draw(500));
}

TEST_CASE("staleness options no draw can honour are ConfigErrors", "[staleness]") {
  CHECK_THROWS_AS(model_of(0, StalenessDist::kFixed), ConfigError);
  CHECK_THROWS_AS(model_of(2.5, StalenessDist::kFixed), ConfigError);
  CHECK_THROWS_AS(model_of(2.25, StalenessDist::kUniform), ConfigError);
  CHECK_THROWS_AS(model_of(5, StalenessDist::kGeometric, 1, 5), ConfigError);
  CHECK_NOTHROW(model_of(5, StalenessDist::kGeometric, 1, 6));
}

TEST_CASE("staleness config keys: validated, local mode only", "[staleness][config]") {
  const auto errors_of = [](const std::vector<std::string>& o) -> std::string {
    try {
      config::parse("", "test", o);
      return "";
    } catch (const ConfigError& e) {
      return e.what();
    }
  };
  CHECK(errors_of({"train.mode=local", "train.simulated_staleness=5"}).empty());
  CHECK(errors_of(
            {"train.mode=local", "train.simulated_staleness=2.5", "train.staleness_dist=uniform"})
            .empty());
  CHECK(errors_of({"train.mode=local", "train.simulated_staleness=2.5",
                   "train.staleness_dist=exponential"})
            .empty());
  CHECK_THAT(errors_of({"train.mode=async", "train.simulated_staleness=5"}),
             Catch::Contains("train.simulated_staleness") && Catch::Contains("local"));
  CHECK_THAT(errors_of({"train.mode=local", "train.simulated_staleness=2.5"}),
             Catch::Contains("whole number"));
  CHECK_THAT(errors_of({"train.mode=local", "train.simulated_staleness=1.2",
                        "train.staleness_dist=uniform"}),
             Catch::Contains("0.5"));
  CHECK_THAT(errors_of({"train.mode=local", "train.simulated_staleness=5",
                        "train.staleness_dist=geometric", "train.staleness_max=5"}),
             Catch::Contains("train.staleness_max"));
  CHECK_THAT(errors_of({"train.simulated_staleness=-1"}), Catch::Contains(">= 0"));
  CHECK_THAT(errors_of({"train.staleness_dist=poisson"}), Catch::Contains("geometric"));
}

TEST_CASE("parameter history: a ring by version, its state round trip", "[staleness]") {
  ParamHistory h(3, 2);  // θ_v = {v, -v}
  CHECK(h.empty());
  CHECK_THROWS_AS(h.at(0), InternalError);
  const auto put = [&](std::uint64_t v) {
    float* p = h.push(v);
    p[0] = static_cast<float>(v);
    p[1] = -static_cast<float>(v);
  };
  put(0);
  CHECK(h.at(0)[0] == 0.0f);
  put(1);
  put(2);
  put(3);  // evicts θ_0
  CHECK(h.oldest() == 1);
  CHECK(h.newest() == 3);
  for (std::uint64_t v = 1; v <= 3; ++v) {
    CHECK(h.at(v)[0] == static_cast<float>(v));
    CHECK(h.at(v)[1] == -static_cast<float>(v));
  }
  CHECK_THROWS_AS(h.at(0), InternalError);
  CHECK_THROWS_AS(h.at(4), InternalError);
  CHECK_THROWS_AS(h.push(5), InternalError);  // a gap
  CHECK(h.nbytes() == 3 * 2 * sizeof(float));

  ParamHistory back(3, 2);
  back.restore(h.state());
  CHECK(back.oldest() == 1);
  CHECK(back.newest() == 3);
  for (std::uint64_t v = 1; v <= 3; ++v) CHECK(back.at(v)[1] == -static_cast<float>(v));
  put(4);
  float* p = back.push(4);
  p[0] = 4.0f;
  p[1] = -4.0f;
  CHECK(back.state() == h.state());

  // A partly filled history, and one restored into other settings.
  ParamHistory young(3, 2);
  young.push(0)[0] = 7.0f;
  ParamHistory young_back(3, 2);
  young_back.restore(young.state());
  CHECK(young_back.oldest() == 0);
  CHECK(young_back.at(0)[0] == 7.0f);
  ParamHistory deeper(4, 2);
  CHECK_THROWS_AS(deeper.restore(h.state()), ConfigError);
}

TEST_CASE("local training with fixed staleness s applies the gradient of θ_{t-s}", "[staleness]") {
  const fs::path dir = fresh_dir("exact");
  for (const std::int64_t s : {1, 4}) {
    INFO("s = " << s);
    const config::Config cfg = tiny_config(
        dir, {"run.name=s" + std::to_string(s), "train.simulated_staleness=" + std::to_string(s)});
    const auto r = train_run(cfg);
    REQUIRE(r.steps == 30);
    const auto got = read_floats(r.run_dir / "params.f32");
    const auto want = reference_params(cfg, s);
    REQUIRE(got.size() == want.size());
    CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
    // And not what a neighbouring staleness gives.
    const auto off_by_one = reference_params(cfg, s + 1);
    CHECK(std::memcmp(got.data(), off_by_one.data(), got.size() * sizeof(float)) != 0);

    // The records: staleness s after the warm-up (min(s, t) before it).
    const auto steps = read_steps(r.run_dir);
    REQUIRE(steps.size() == 30);
    for (const auto& rec : steps) {
      const auto t = rec["version"].get<std::int64_t>();
      const auto& g = rec["grads"][0];
      CHECK(g["staleness"].get<std::int64_t>() == std::min(s, t));
      CHECK(g["version"].get<std::int64_t>() == t - std::min(s, t));
    }
    const auto summary =
        nlohmann::json::parse(std::ifstream(r.run_dir / "summary.json"), nullptr, true);
    CHECK(summary["staleness_max"].get<double>() == static_cast<double>(s));
    CHECK(summary["simulated_staleness"]["max"].get<std::int64_t>() == s);
  }
  // Staleness off is the plain loop (s = 0), and differs from s = 1.
  const config::Config cfg0 = tiny_config(dir, {"run.name=s0"});
  const auto r0 = train_run(cfg0);
  const auto p0 = read_floats(r0.run_dir / "params.f32");
  const auto want0 = reference_params(cfg0, 0);
  CHECK(std::memcmp(p0.data(), want0.data(), p0.size() * sizeof(float)) == 0);
  const auto p1 = read_floats(dir / "s1" / "params.f32");
  CHECK(std::memcmp(p0.data(), p1.data(), p0.size() * sizeof(float)) != 0);
  for (const auto& rec : read_steps(r0.run_dir)) CHECK(rec["grads"][0]["staleness"] == 0);
  fs::remove_all(dir);
}

TEST_CASE("simulated staleness: same seed same run -- a resumed run is the straight run",
          "[staleness]") {
  const fs::path dir = fresh_dir("resume");
  const std::vector<std::string> geo = {"train.simulated_staleness=3",
                                        "train.staleness_dist=geometric", "train.steps=40"};
  const auto with = [&](std::vector<std::string> o) {
    o.insert(o.begin(), geo.begin(), geo.end());
    return tiny_config(dir, o);
  };
  const auto staleness_of = [](const fs::path& run) {
    std::vector<std::int64_t> out;
    for (const auto& rec : read_steps(run)) out.push_back(rec["grads"][0]["staleness"]);
    return out;
  };
  const auto a = train_run(with({"run.name=a"}));
  const auto b = train_run(with({"run.name=b"}));
  CHECK(read_floats(a.run_dir / "params.f32") == read_floats(b.run_dir / "params.f32"));
  const auto sa = staleness_of(a.run_dir);
  CHECK(sa == staleness_of(b.run_dir));
  std::map<std::int64_t, int> hist;
  for (const auto s : sa) ++hist[s];
  CHECK(hist.size() >= 3);  // drawn, not constant

  // Another straggler seed: other draws, other parameters.
  const auto c = train_run(with({"run.name=c", "stragglers.seed=11"}));
  CHECK(staleness_of(c.run_dir) != sa);
  CHECK(read_floats(c.run_dir / "params.f32") != read_floats(a.run_dir / "params.f32"));

  // Resumed from its checkpoint at step 17 (as if stopped there): the history
  // came back with it, so steps 18..40 repeat the straight run's.
  const auto d0 =
      train_run(with({"run.name=d", "run.checkpoint_every_steps=17", "run.keep_checkpoints=5"}));
  REQUIRE(fs::exists(d0.run_dir / "checkpoints" / "17"));
  fs::remove_all(d0.run_dir / "checkpoints" / "34");
  fs::remove_all(d0.run_dir / "checkpoints" / "40");
  std::ofstream(d0.run_dir / "checkpoints" / "latest") << "17\n";
  fs::remove(d0.run_dir / "params.f32");
  const auto d = train_run(with({"run.name=d", "run.resume=true"}));
  CHECK(d.steps == 40);
  CHECK(read_floats(d.run_dir / "params.f32") == read_floats(a.run_dir / "params.f32"));
  CHECK(staleness_of(d.run_dir) == sa);
  fs::remove_all(dir);
}
