// Models as a user meets them on the command line: --dry-run prints the
// model (shapes, parameters, FLOPs, totals), and a layer list that does not
// fit or does not parse is a config error (78) that names the layer.
#include <catch2/catch.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>

#include "harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

TEST_CASE("dry-run prints every model with its totals", "[e2e]") {
  const Result r20 =
      run("train " + src("configs/smoke.toml") + " --dry-run --set model.name=resnet20");
  INFO(r20.output);
  REQUIRE(r20.code == 0);
  CHECK(r20.output.find("# model resnet20, input 1x28x28, 10 outputs") != std::string::npos);
  CHECK(r20.output.find("s3b1.add.proj") != std::string::npos);
  CHECK(r20.output.find("total: 272186 params") != std::string::npos);
  const Result cnn = run("train " + src("configs/smoke.toml") + " --dry-run");
  CHECK(cnn.code == 0);
  CHECK(cnn.output.find("conv 3x3/1 pad 1 wn +relu    64x14x14") != std::string::npos);
  CHECK(cnn.output.find("total: 824820 params") != std::string::npos);
  // The CUDA backend runs every layer too: no model is refused for it (a
  // build without the CUDA backend refuses the backend itself, 78).
  const Result cuda = run("train " + src("configs/smoke.toml") +
                          " --dry-run --set model.name=resnet20 --set compute.backend=cuda");
  INFO(cuda.output);
  const bool no_cuda_build =
      cuda.output.find("this build has no CUDA backend") != std::string::npos;
  CHECK(cuda.code == (no_cuda_build ? 78 : 0));
  if (!no_cuda_build) CHECK(cuda.output.find("total: 272186 params") != std::string::npos);
  CHECK(cuda.output.find("not yet supported") == std::string::npos);
}

TEST_CASE("a custom model that does not fit exits 78 naming the layer and both shapes", "[e2e]") {
  const auto dir = temp_dir("models");
  write_text(dir / "m.toml",
             "[model]\nname = \"custom\"\n[[model.layers]]\ntype = \"conv\"\nname = \"a\"\n"
             "out = 8\npad = 1\n[[model.layers]]\ntype = \"conv\"\nout = 16\nstride = 2\npad = 1\n"
             "[[model.layers]]\ntype = \"add\"\nfrom = \"a\"\n[[model.layers]]\ntype = \"fc\"\n");
  const Result bad = run("train " + (dir / "m.toml").string() + " --dry-run");
  CHECK(bad.code == 78);
  CHECK(bad.output.find("layer 3 (\"add3\", add)") != std::string::npos);
  CHECK(bad.output.find("16x14x14") != std::string::npos);
  CHECK(bad.output.find("8x28x28") != std::string::npos);
  const Result fixed = run("train " + (dir / "m.toml").string() +
                           " --dry-run --set 'model.layers=[{type=\"conv\", name=\"a\", out=8, "
                           "pad=1}, {type=\"conv\", out=16, stride=2, pad=1}, {type=\"add\", "
                           "from=\"a\", shortcut=\"projection\"}, {type=\"fc\"}]'");
  INFO(fixed.output);
  CHECK(fixed.code == 0);
  CHECK(fixed.output.find("conv 1x1/2 pad 0 no-bias") != std::string::npos);
  write_text(dir / "t.toml", "[model]\nname = \"custom\"\nlayers = [{ type = \"linear\" }]\n");
  const Result typo = run("train " + (dir / "t.toml").string() + " --dry-run");
  CHECK(typo.code == 78);
  CHECK(typo.output.find("t.toml:3: model.layers") != std::string::npos);
  CHECK(typo.output.find("did you mean \"fc\"?") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("resnet20 trains on a generated directory in the CIFAR-10 binary layout", "[e2e]") {
  // data_batch_1..5.bin and test_batch.bin, records of 1 label byte and
  // 3072 image bytes (R, G, B planes of 32x32), as the CIFAR-10 site ships
  // them: read through data.name = cifar10 into 3x32x32 images.
  const auto dir = temp_dir("cifar");
  std::uint32_t x = 12345;
  auto write_batch = [&](const std::string& name, int records) {
    std::ofstream out(dir / name, std::ios::binary);
    for (int r = 0; r < records; ++r) {
      out.put(static_cast<char>(r % 10));
      for (int i = 0; i < 3072; ++i) {
        x = x * 1664525u + 1013904223u;
        out.put(static_cast<char>((x >> 24) / 2 + (r % 10) * 12));  // class-dependent brightness
      }
    }
  };
  for (int b = 1; b <= 5; ++b) write_batch("data_batch_" + std::to_string(b) + ".bin", 16);
  write_batch("test_batch.bin", 20);
  const std::string base =
      "train " + src("configs/smoke.toml") + " --quiet --set run.dir=" + (dir / "runs").string() +
      " --set data.name=cifar10 --set data.path=" + dir.string() + " --set model.name=resnet20";
  const Result dry = run(base + " --dry-run");
  CHECK(dry.code == 0);
  CHECK(dry.output.find("input 3x32x32") != std::string::npos);
  CHECK(dry.output.find("total: 272474 params") != std::string::npos);
  const Result r = run(base + " --set train.steps=4 --set train.batch=8 --set eval.bn_batches=2");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto summary = nlohmann::json::parse(read_text(dir / "runs" / "smoke" / "summary.json"));
  CHECK(summary["params"].get<int>() == 272474);
  CHECK(summary["examples"].get<int>() == 32);
  CHECK(summary["test_acc"].get<double>() >= 0.0);
  CHECK(read_floats(dir / "runs" / "smoke" / "params.f32").size() == 272474);
  fs::remove_all(dir);
}

TEST_CASE("simulate sizes its messages from the model graph's parameter count", "[e2e][sim]") {
  const auto dir = temp_dir("sim-model");
  const std::string base =
      "simulate " + src("configs/smoke.toml") + " -q --set run.dir=" + dir.string() +
      " --set train.mode=sync --set train.steps=10 " + "--set sim.workers=4 --set run.name=";
  const Result r18 = run(base + "r18 --set model.name=resnet18");
  REQUIRE(r18.code == 0);
  const Result r20 = run(base + "r20 --set model.name=resnet20");
  REQUIRE(r20.code == 0);
  const auto s18 = nlohmann::json::parse(read_text(dir / "r18" / "summary.json"))["sim"];
  const auto s20 = nlohmann::json::parse(read_text(dir / "r20" / "summary.json"))["sim"];
  // ResNet-18 with a 1-channel stem: 11173962 - 2 * 9 * 64 parameters.
  CHECK(s18["param_count"].get<std::int64_t>() == 11172810);
  CHECK(s20["param_count"].get<std::int64_t>() == 272186);
  // A reply carries the parameters (4 bytes each) and a small header.
  CHECK(s18["reply_bytes"].get<double>() >= 4.0 * 11172810);
  CHECK(s18["reply_bytes"].get<double>() < 4.0 * 11172810 + 1024);
  fs::remove_all(dir);
}
