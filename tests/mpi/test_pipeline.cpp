// The pipelined exchange under mpirun, checked against the exchange without
// it: sync with b = 0 (one and two shards, one layer a bucket, and two at
// the default bucket size) and sync with b = 1 under the virtual clock give
// the same parameters bit for bit; async applies every bucket on arrival and
// records each bucket's staleness in steps.jsonl and summary.json. Each
// mpirun is bounded by a timeout.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "../e2e/harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

namespace {

// The reference CNN (four layers with parameters) on synthetic data, one
// bucket per layer when pipelined (exchange.bucket_bytes = 1), or at the
// default bucket size two buckets of two layers on one shard (conv1..conv2,
// fc1..fc2): a bucket leaves only once both its layers' gradients are final.
std::string job(const fs::path& dir, const std::string& name, bool pipeline,
                const std::string& extra, bool default_buckets = false) {
  return "train " + src("configs/smoke.toml") + " --quiet --set run.dir=" + dir.string() +
         " --set run.name=" + name +
         " --set model.name=cnn --set train.batch=8 --set optim.lr=0.05 --set optim.ema=0.9" +
         (default_buckets ? "" : " --set exchange.bucket_bytes=1") +
         " --set exchange.pipeline=" + (pipeline ? "true " : "false ") + extra;
}

// Every record's accepted workers per (shard, version).
std::map<std::pair<int, std::uint64_t>, std::set<int>> accepted_sets(const fs::path& steps) {
  std::map<std::pair<int, std::uint64_t>, std::set<int>> out;
  for (const auto& rec : read_jsonl(steps)) {
    auto& set = out[{rec["shard"].get<int>(), rec["version"].get<std::uint64_t>()}];
    for (const auto& g : rec["grads"]) {
      if (g["accepted"].get<bool>()) set.insert(g["worker"].get<int>());
    }
  }
  return out;
}

// How many floats of `a` and `b` differ (a different size: all of the
// longer), so that a failure says how much and does not print 800,000 floats.
std::size_t floats_differing(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return std::max(a.size(), b.size());
  std::size_t n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) n += a[i] == b[i] ? 0 : 1;
  return n;
}

}  // namespace

TEST_CASE("sync b = 0: the pipelined exchange gives the bits of the whole one", "[mpi][pipeline]") {
  const auto dir = temp_dir("pipe-b0");
  const std::string common = "--set train.mode=sync --set train.backups=0 --set train.steps=15 ";
  const Result whole = run_mpi(3, job(dir, "whole", false, common));
  INFO(whole.output);
  REQUIRE(whole.code == 0);
  const Result piped = run_mpi(3, job(dir, "piped", true, common));
  INFO(piped.output);
  REQUIRE(piped.code == 0);
  // Two shards (convolutions | fully connected), two buckets each.
  const Result two = run_mpi(4, job(dir, "two", true, common + "--set cluster.ps=2"));
  INFO(two.output);
  REQUIRE(two.code == 0);
  // The default bucket size: two layers a bucket.
  const Result pairs = run_mpi(3, job(dir, "pairs", true, common, true));
  INFO(pairs.output);
  REQUIRE(pairs.code == 0);
  const auto p_whole = read_floats(dir / "whole" / "params.f32");
  REQUIRE(p_whole.size() > 800000);
  const auto ema_whole = read_floats(dir / "whole" / "params_ema.f32");
  for (const char* name : {"piped", "two", "pairs"}) {
    INFO(name);
    CHECK(floats_differing(read_floats(dir / name / "params.f32"), p_whole) == 0);
    CHECK(floats_differing(read_floats(dir / name / "params_ema.f32"), ema_whole) == 0);
  }
  // And it trained: the parameters moved from their initial values.
  const Result init = run(job(dir, "init", false, "--set train.steps=1 --set optim.lr=1e-30"));
  REQUIRE(init.code == 0);
  CHECK(read_floats(dir / "init" / "params.f32") != p_whole);
  // The losses of every update agree too.
  const auto loss = [&](const std::string& name) {
    std::vector<double> out;
    for (const auto& rec : read_jsonl(dir / name / "steps.jsonl")) {
      if (rec["shard"].get<int>() == 0) out.push_back(rec["loss"].get<double>());
    }
    return out;
  };
  CHECK(loss("piped") == loss("whole"));
  CHECK(loss("pairs") == loss("whole"));
  CHECK(loss("two").size() == 15);
  fs::remove_all(dir);
}

TEST_CASE("sync b = 1 under the virtual clock: the pipeline changes no bit and no decision",
          "[mpi][pipeline][virtual]") {
  const auto dir = temp_dir("pipe-virtual");
  const std::string common =
      "--set train.mode=sync --set train.backups=1 --set train.steps=20 "
      "--set train.clock=virtual --set sim.compute_ms=10 --set sim.compute_cv=0.3 "
      "--set stragglers.model=exponential --set stragglers.mean_ms=8";
  const Result whole = run_mpi(5, job(dir, "whole", false, common));
  INFO(whole.output);
  REQUIRE(whole.code == 0);
  const Result piped = run_mpi(5, job(dir, "piped", true, common));
  INFO(piped.output);
  REQUIRE(piped.code == 0);
  for (const char* file : {"params.f32", "params_ema.f32"}) {
    INFO(file);
    CHECK(floats_differing(read_floats(dir / "piped" / file), read_floats(dir / "whole" / file)) ==
          0);
  }
  // Modelled times: the records are the same, byte for byte, drops included.
  CHECK(read_text(dir / "piped" / "steps.jsonl") == read_text(dir / "whole" / "steps.jsonl"));
  const auto sets = accepted_sets(dir / "piped" / "steps.jsonl");
  REQUIRE(sets.size() == 20);
  for (const auto& [key, workers] : sets) CHECK(workers.size() == 3);  // N = 3 of 4
  fs::remove_all(dir);
}

TEST_CASE("async applies each bucket on arrival and records its staleness",
          "[mpi][pipeline][async]") {
  const auto dir = temp_dir("pipe-async");
  const Result r = run_mpi(5, job(dir, "async", true,
                                  "--set train.mode=async --set train.steps=40 --set optim.lr=0.01 "
                                  "--set stragglers.model=exponential --set stragglers.mean_ms=3"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto steps = read_jsonl(dir / "async" / "steps.jsonl");
  REQUIRE(steps.size() == 40);
  std::vector<double> sum(4, 0.0);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& rec = steps[i];
    CHECK(rec["version"].get<std::uint64_t>() == i);
    REQUIRE(rec["grads"].size() == 1);
    const auto& g = rec["grads"][0];
    REQUIRE(g.contains("layer_staleness"));
    const auto layers = g["layer_staleness"].get<std::vector<std::int64_t>>();
    REQUIRE(layers.size() == 4);  // conv1, conv2, fc1, fc2
    // Bucket 0 completes the gradient: its staleness is the gradient's.
    CHECK(layers[0] == g["staleness"].get<std::int64_t>());
    // Bucket 0 has had i updates before this one; a bucket above it may
    // also have had the top buckets of gradients still on their way, one
    // per other worker at most.
    CHECK(layers[0] <= static_cast<std::int64_t>(i));
    for (std::size_t b = 0; b < 4; ++b) {
      CHECK(layers[b] >= 0);
      CHECK(layers[b] <= static_cast<std::int64_t>(i) + 3);
      sum[b] += static_cast<double>(layers[b]);
    }
  }
  const auto summary = nlohmann::json::parse(read_text(dir / "async" / "summary.json"));
  const auto& by_layer = summary["staleness_by_layer"];
  REQUIRE(by_layer.size() == 4);
  const std::vector<std::string> names{"conv1", "conv2", "fc1", "fc2"};
  for (std::size_t b = 0; b < 4; ++b) {
    CHECK(by_layer[b]["bucket"].get<std::size_t>() == b);
    CHECK(by_layer[b]["layers"].get<std::string>() == names[b]);
    CHECK(by_layer[b]["mean"].get<double>() == Approx(sum[b] / 40.0));
    CHECK(by_layer[b]["samples"].get<int>() == 40);
  }
  CHECK(summary["staleness_mean"].get<double>() == Approx(sum[0] / 40.0));
  // The top layer is fresher than the bottom one: its parameters were read
  // later in the step and its gradient is applied earlier. (Every bucket
  // tagged with bucket 0's version by the shard makes the top look as stale
  // as the bottom or more: issue "One shape for both executors", point 6.)
  INFO("mean staleness bottom " << sum[0] / 40.0 << ", top " << sum[3] / 40.0);
  CHECK(sum[3] < sum[0]);
  // Without the pipeline: one bucket, no per-layer record.
  const Result whole = run_mpi(5, job(dir, "whole", false,
                                      "--set train.mode=async --set "
                                      "train.steps=10 --set optim.lr=0.01"));
  REQUIRE(whole.code == 0);
  for (const auto& rec : read_jsonl(dir / "whole" / "steps.jsonl")) {
    CHECK_FALSE(rec["grads"][0].contains("layer_staleness"));
  }
  CHECK(nlohmann::json::parse(read_text(dir / "whole" / "summary.json"))["staleness_by_layer"]
            .is_null());
  fs::remove_all(dir);
}

TEST_CASE("dry-run prints every shard's layers, bytes and buckets", "[mpi][pipeline][layout]") {
  const auto dir = temp_dir("pipe-dry");
  const Result r = run_mpi(4,
                           job(dir, "dry", true,
                               "--set train.mode=sync --set train.backups=0 "
                               "--set cluster.ps=2 --set exchange.bucket_bytes=100000 --dry-run"),
                           60);
  INFO(r.output);
  REQUIRE(r.code == 0);
  // Shard 0 the convolutions (2.3 % of the bytes), shard 1 the fully
  // connected layers; 100 kB buckets from the top: fc1..fc2 is one.
  CHECK(r.output.find("shard 0: conv1..conv2") != std::string::npos);
  CHECK(r.output.find("shard 1: fc1..fc2") != std::string::npos);
  CHECK(r.output.find("rank 1: parameter-server shard 1, parameters [18912, 824820)") !=
        std::string::npos);
  CHECK(r.output.find("1 bucket") != std::string::npos);
  // More shards than layers: a config error on every rank, said once.
  const Result bad = run_mpi(6,
                             job(dir, "bad", true,
                                 "--set train.mode=sync --set model.name=logreg "
                                 "--set cluster.ps=2 --set train.backups=0"),
                             60);
  CHECK(bad.code == 78);
  CHECK(bad.output.find("cluster.ps = 2 shards, but the model has 1 layer(s)") !=
        std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("exchange.wire = bf16 halves the bytes of every update, the shard stays FP32",
          "[mpi][pipeline][bf16]") {
  const auto dir = temp_dir("wire-bf16");
  // Sync, b = 0, two workers, one shard: per update the shard takes two
  // gradients and sends two answers of P values (the first pull's answer
  // counts into update 1, the last update's answer is STOP), so 4 P values
  // an update: 16 P bytes in FP32, 8 P in bf16. Two shards: the same in all.
  const std::string common =
      "--set train.mode=sync --set train.backups=0 --set train.steps=12 --set optim.lr=0.01 ";
  for (const std::string ps : {"1", "2"}) {
    INFO("cluster.ps = " << ps);
    const std::string extra = common + "--set cluster.ps=" + ps + " ";
    const Result fp = run_mpi(2 + std::stoi(ps), job(dir, "fp32-" + ps, true, extra, true));
    INFO(fp.output);
    REQUIRE(fp.code == 0);
    const Result bf = run_mpi(
        2 + std::stoi(ps), job(dir, "bf16-" + ps, true, extra + "--set exchange.wire=bf16", true));
    INFO(bf.output);
    REQUIRE(bf.code == 0);
    const auto theta = read_floats(dir / ("bf16-" + ps) / "params.f32");
    const double p = static_cast<double>(theta.size());
    const auto summary = [&](const std::string& name) {
      return nlohmann::json::parse(read_text(dir / name / "summary.json"));
    };
    const auto s_fp = summary("fp32-" + ps), s_bf = summary("bf16-" + ps);
    CHECK(s_fp["exchange_wire"] == "fp32");
    CHECK(s_bf["exchange_wire"] == "bf16");
    CHECK(s_fp["exchange_bytes_per_update"].get<double>() == 16.0 * p);
    CHECK(s_bf["exchange_bytes_per_update"].get<double>() == 8.0 * p);
    // Every shard's record says what it moved.
    std::uint64_t records = 0;
    for (const auto& rec : read_jsonl(dir / ("bf16-" + ps) / "steps.jsonl")) {
      CHECK(rec["wire_bytes"].get<std::uint64_t>() > 0);
      ++records;
    }
    CHECK(records == 12u * static_cast<std::uint64_t>(std::stoi(ps)));
    // The master weights stay FP32: most of theta is not a bf16 value.
    std::size_t wide = 0;
    for (const float v : theta) {
      std::uint32_t u;
      std::memcpy(&u, &v, sizeof u);
      wide += (u & 0xffffu) != 0 ? 1 : 0;
    }
    CHECK(wide > theta.size() / 2);
    // bf16 parameters and gradients change the bits but not the training.
    const auto losses = [&](const std::string& name) {
      std::vector<double> out;
      for (const auto& rec : read_jsonl(dir / name / "steps.jsonl")) {
        if (rec["shard"].get<int>() == 0) out.push_back(rec["loss"].get<double>());
      }
      return out;
    };
    const auto l_fp = losses("fp32-" + ps), l_bf = losses("bf16-" + ps);
    REQUIRE(l_fp.size() == l_bf.size());
    CHECK(l_fp != l_bf);
    for (std::size_t i = 0; i < l_fp.size(); ++i)
      CHECK(std::abs(l_bf[i] - l_fp[i]) < 0.01 * l_fp[i]);
  }
  fs::remove_all(dir);
}
