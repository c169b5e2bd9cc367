// Tests of lib/config: defaults, every class of config error (each naming the
// key, and the file and line where it came from a file), all problems in one
// error, override order, the to_toml() round trip and the key reference.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "config/model_layers.hpp"

namespace cfg = syncopt::config;

namespace {

// A config file in a fresh temp directory, removed at scope exit.
class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    static int counter = 0;
    m_dir = std::filesystem::temp_directory_path() /
            ("syncopt_test_config_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(m_dir);
    m_path = (m_dir / "exp.toml").string();
    std::ofstream(m_path) << text;
  }
  ~TempFile() {
    std::error_code ec;
    std::filesystem::remove_all(m_dir, ec);
  }
  const std::string& path() const { return m_path; }

 private:
  std::filesystem::path m_dir;
  std::string m_path;
};

// The message of the ConfigError that `fn` throws; fails the test if it throws nothing.
template <class Fn>
std::string config_error(Fn&& fn) {
  try {
    fn();
  } catch (const syncopt::ConfigError& e) {
    CHECK(e.code() == syncopt::ExitCode::kConfig);
    return e.what();
  }
  FAIL("no ConfigError was thrown");
  return {};
}

std::string load_error(const std::string& text, const std::vector<std::string>& overrides = {}) {
  TempFile file(text);
  return config_error([&] { cfg::load(file.path(), overrides); });
}

// The problem lines of an error message (the first line is the header).
std::vector<std::string> problem_lines(const std::string& message) {
  std::vector<std::string> lines;
  std::istringstream in(message);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

using Catch::Matchers::Contains;

}  // namespace

TEST_CASE("defaults are valid and empty text gives them", "[config]") {
  CHECK(cfg::validate(cfg::Config{}).empty());
  // Text parsed as such (tests, includes); an empty config *file* is refused
  // (below, "an empty config file is a usage error naming the file").
  CHECK(cfg::parse("", "empty.toml", {}) == cfg::Config{});
  TempFile file("[train]\n# nothing set but the section\n");
  CHECK(cfg::load(file.path(), {}) == cfg::Config{});
}

TEST_CASE("a file sets keys of every type -- an integer is accepted for a float", "[config]") {
  TempFile file(
      "[run]\nname = \"exp1\"\nseed = 7\nresume = true\n"
      "[optim]\nlr = 1\nname = \"rmsprop\"\n"
      "[stragglers]\nmodel = \"fixed\"\nworkers = [0, 3]\nfactor = 2.5\n");
  const cfg::Config c = cfg::load(file.path(), {});
  CHECK(c.run.name == "exp1");
  CHECK(c.run.seed == 7u);
  CHECK(c.run.resume);
  CHECK(c.optim.lr == 1.0);
  CHECK(c.optim.name == cfg::OptimizerName::kRmsprop);
  CHECK(c.stragglers.workers == std::vector<std::int64_t>{0, 3});
  CHECK(c.stragglers.factor == 2.5);
  CHECK(c.train.batch == cfg::Config{}.train.batch);  // untouched keys keep their default
}

TEST_CASE("unknown key names file, line and key, with a hint", "[config]") {
  const std::string msg = load_error("[train]\nbatch = 8\nbach = 16\n");
  CHECK_THAT(msg, Contains("exp.toml:3:"));
  CHECK_THAT(msg, Contains("unknown key train.bach"));
  CHECK_THAT(msg, Contains("did you mean train.batch"));
}

TEST_CASE("unknown section and a key outside any section are errors", "[config]") {
  const std::string msg = load_error("lr = 0.1\n[trian]\nbatch = 1\n");
  CHECK_THAT(msg, Contains("exp.toml:1: key 'lr' is outside any section"));
  CHECK_THAT(msg, Contains("optim.lr"));
  CHECK_THAT(msg, Contains("exp.toml:2: unknown section [trian]"));
  CHECK(problem_lines(msg).size() == 2);
}

TEST_CASE("duplicate key names the key and both lines -- the rest is still checked", "[config]") {
  const std::string msg =
      load_error("[train]\nbatch = 8\nmode = \"sync\"\nbatch = 16\nbogus = 1\n");
  CHECK_THAT(msg, Contains("exp.toml:4: duplicate key train.batch (first set on line 2)"));
  // Checking went on past the duplicate.
  CHECK_THAT(msg, Contains("exp.toml:5: unknown key train.bogus"));
}

TEST_CASE("a repeated section header is reported, and its keys are still checked", "[config]") {
  const std::string msg =
      load_error("[train]\nbatch = 8\n[optim]\nlr = 0.1\n[train]\nbatch = 4\nepochs = -1\n");
  CHECK_THAT(msg, Contains("exp.toml:5: duplicate section [train] (first opened on line 1)"));
  CHECK_THAT(msg, Contains("exp.toml:6: duplicate key train.batch (first set on line 2)"));
  // epochs of the repeated [train] is checked as train.epochs, not optim.epochs.
  CHECK_THAT(msg, Contains("exp.toml:7: train.epochs = -1.0: must be >= 0"));
}

TEST_CASE("wrong type says expected and found", "[config]") {
  const std::string msg = load_error("[train]\nbatch = \"abc\"\n[model]\nweight_norm = 1\n");
  CHECK_THAT(msg, Contains("exp.toml:2: train.batch: expected integer, found string \"abc\""));
  CHECK_THAT(msg, Contains("exp.toml:4: model.weight_norm: expected boolean, found integer 1"));
  // A float where an integer is expected is not silently truncated.
  CHECK_THAT(load_error("[train]\nbatch = 32.5\n"),
             Contains("train.batch: expected integer, found float 32.5"));
  CHECK_THAT(load_error("[stragglers]\nworkers = [1, \"x\"]\n"),
             Contains("exp.toml:2: stragglers.workers: element 1: expected integer"));
  CHECK_THAT(load_error("[run]\nseed = -3\n"),
             Contains("exp.toml:2: run.seed: expected integer >= 0"));
}

TEST_CASE("out-of-range values name key, line and the range", "[config]") {
  const std::string msg = load_error("[optim]\nmomentum = 1.0\n[train]\nbatch = 0\n");
  CHECK_THAT(msg, Contains("exp.toml:2: optim.momentum = 1.0: must be in [0, 1)"));
  CHECK_THAT(msg, Contains("exp.toml:4: train.batch = 0: must be >= 1"));
}

TEST_CASE("invalid enum string lists the allowed values", "[config]") {
  const std::string msg = load_error("[train]\nmode = \"asink\"\n");
  CHECK_THAT(
      msg,
      Contains(
          "exp.toml:2: train.mode = \"asink\": must be one of local | sync | async | softsync | "
          "ssp | timeout | allreduce (did you mean \"async\"?)"));
  // Every enum-like key is parsed at the key table, with its own names.
  const std::string more = load_error(
      "[model]\nname = \"resnet\"\n[compute]\nbackend = \"tpu\"\n[train]\nclock = "
      "\"virtuel\"\n[stragglers]\nmodel = \"paretto\"\n[optim]\nschedule = \"cosine\"\n");
  CHECK_THAT(more,
             Contains("exp.toml:2: model.name = \"resnet\": must be one of cnn | mlp | logreg"));
  CHECK_THAT(more, Contains("exp.toml:4: compute.backend = \"tpu\": must be one of cpu | cuda"));
  CHECK_THAT(more, Contains("train.clock = \"virtuel\": must be one of wall | virtual (did you "
                            "mean \"virtual\"?)"));
  CHECK_THAT(more, Contains("stragglers.model = \"paretto\": must be one of none"));
  CHECK_THAT(more, Contains("(did you mean \"pareto\"?)"));
  CHECK_THAT(more, Contains("optim.schedule = \"cosine\": must be one of constant | exponential"));
  CHECK_THAT(more, Contains("5 problems"));
}

TEST_CASE("syntax error names file, line and the key near it", "[config]") {
  const std::string msg = load_error("[train]\nmode = \"sync\"\nbatch = \n");
  CHECK_THAT(msg, Contains("exp.toml:3:"));
  CHECK_THAT(msg, Contains("syntax error near train.batch"));
}

TEST_CASE("a missing file is a missing input, a directory a config error, each naming the path",
          "[config]") {
  const std::string missing =
      (std::filesystem::temp_directory_path() / "syncopt_no_such_dir" / "missing.toml").string();
  try {
    cfg::load(missing, {});
    FAIL("no error for a missing config file");
  } catch (const syncopt::MissingInputError& e) {
    CHECK(e.code() == syncopt::ExitCode::kNoInput);
    CHECK_THAT(e.what(), Contains(missing + ": config file not found"));
  }
  const std::string dir = std::filesystem::temp_directory_path().string();
  CHECK_THAT(config_error([&] { cfg::load(dir, {}); }), Contains("is a directory"));
}

TEST_CASE("bad overrides name the override and the key", "[config]") {
  const auto err = [](const std::vector<std::string>& overrides) {
    return config_error([&] { cfg::parse("", "x.toml", overrides); });
  };
  CHECK_THAT(err({"train.batch=abc"}),
             Contains("--set train.batch=abc: train.batch: expected integer"));
  CHECK_THAT(err({"train.batch=2.5"}),
             Contains("--set train.batch=2.5: train.batch: expected integer, found float"));
  CHECK_THAT(err({"train.bach=3"}),
             Contains("--set train.bach=3: unknown key train.bach; did you mean train.batch"));
  CHECK_THAT(err({"trian.batch=3"}), Contains("--set trian.batch=3: unknown section [trian]"));
  CHECK_THAT(err({"train.batch"}), Contains("--set train.batch: expected section.key=value"));
  CHECK_THAT(err({"batch=3"}), Contains("--set batch=3: 'batch' is not section.key"));
  CHECK_THAT(err({"train.batch=0"}),
             Contains("--set train.batch=0: train.batch = 0: must be >= 1"));
  CHECK_THAT(err({"train.mode=asink"}),
             Contains("--set train.mode=asink: train.mode = \"asink\": must be one of"));
  // A value that smuggles in a second TOML line is refused.
  const std::string smuggled = err({"train.batch=1\nsteps = 5"});
  CHECK_THAT(smuggled, Contains("--set train.batch=1\\nsteps = 5: train.batch: expected integer"));
  CHECK(problem_lines(smuggled).size() == 1);
}

TEST_CASE("overrides apply in order and win over the file", "[config]") {
  TempFile file("[train]\nbatch = 8\nmode = \"sync\"\n[optim]\nlr = 0.1\n");
  const cfg::Config c =
      cfg::load(file.path(), {"train.batch=16", "train.mode=async", "train.batch=64", "optim.lr=2",
                              "stragglers.workers=[1,2]", "run.name=\"quoted\"",
                              "data.path=/tmp/some data", "optim.scale_lr_by_n=true"});
  CHECK(c.train.batch == 64);
  CHECK(c.train.mode == cfg::Mode::kAsync);  // bare text for a string (enum) key
  CHECK(c.optim.lr == 2.0);
  CHECK(c.stragglers.workers == std::vector<std::int64_t>{1, 2});
  CHECK(c.run.name == "quoted");
  CHECK(c.data.path == "/tmp/some data");
  CHECK(c.optim.scale_lr_by_n);
  // A later valid override repairs an earlier invalid one's value, but the bad one is still
  // reported.
  CHECK_THAT(config_error([&] {
               cfg::load(file.path(), {"train.batch=abc", "train.batch=4"});
             }),
             Contains("--set train.batch=abc"));
}

TEST_CASE("every problem is reported at once, one per line, in one error", "[config]") {
  const std::string msg = load_error(
      "[train]\n"
      "batch = 0\n"         // 2: out of range
      "mode = \"asink\"\n"  // 3: bad enum
      "bogus = 1\n"         // 4: unknown key
      "[optim]\n"
      "lr = \"fast\"\n"  // 6: wrong type
      "momentum = 0.5\n"
      "momentum = 0.6\n"  // 8: duplicate
      "[stragglers]\n"
      "model = \"trace\"\n",  // 10: trace needs a path
      {"eval.batch=x", "compute.threads=0"});
  const auto lines = problem_lines(msg);
  REQUIRE(lines.size() == 8);
  CHECK_THAT(msg, Contains("8 problems"));
  CHECK_THAT(msg, Contains("exp.toml:2: train.batch = 0"));
  CHECK_THAT(msg, Contains("exp.toml:3: train.mode = \"asink\""));
  CHECK_THAT(msg, Contains("exp.toml:4: unknown key train.bogus"));
  CHECK_THAT(msg, Contains("exp.toml:6: optim.lr: expected float, found string"));
  CHECK_THAT(msg, Contains("exp.toml:8: duplicate key optim.momentum (first set on line 7)"));
  CHECK_THAT(msg, Contains("exp.toml:10: stragglers.model = \"trace\": needs stragglers.trace"));
  CHECK_THAT(msg, Contains("--set eval.batch=x: eval.batch: expected integer"));
  CHECK_THAT(msg, Contains("--set compute.threads=0: compute.threads = 0: must be >= 1"));
}

TEST_CASE("validate reports every semantic problem of a config", "[config]") {
  cfg::Config c;
  c.train.batch = 0;
  c.optim.lr = 0.0;
  c.optim.eps = -1.0;
  c.optim.ema = 1.0;
  c.train.steps = 0;
  c.train.epochs = 0.0;
  c.stragglers.prob = 1.5;
  c.stragglers.factor = 0.5;
  c.stragglers.alpha = 1.0;
  c.stragglers.sigma = 0.0;
  c.stragglers.workers = {2, -1, 2};
  c.run.name = "../escape";
  c.data.augment_max_zoom = 1.0;
  c.optim.momentum = std::numeric_limits<double>::quiet_NaN();
  c.stragglers.seed = std::numeric_limits<std::uint64_t>::max();
  const auto problems = cfg::validate(c);
  const auto has = [&](const std::string& text) {
    return std::any_of(problems.begin(), problems.end(),
                       [&](const std::string& p) { return p.find(text) != std::string::npos; });
  };
  CHECK(has("train.batch = 0: must be >= 1"));
  CHECK(has("optim.lr = 0.0: must be > 0"));
  CHECK(has("optim.eps = -1.0: must be > 0"));
  CHECK(has("optim.ema = 1.0: must be in [0, 1)"));
  CHECK(has("train.epochs = 0.0: must be > 0 when train.steps = 0"));
  CHECK(has("stragglers.prob = 1.5: must be in [0, 1]"));
  CHECK(has("stragglers.factor = 0.5: must be >= 1"));
  CHECK(has("stragglers.alpha = 1.0: must be > 1"));
  CHECK(has("stragglers.sigma = 0.0: must be > 0"));
  CHECK(has("stragglers.workers = [2, -1, 2]: element 1 must be >= 0"));
  CHECK(has("element 2 repeats worker 2"));
  CHECK(has("run.name = \"../escape\": must be a plain"));
  CHECK(has("data.augment_max_zoom = 1.0: must be in [0, 1)"));
  CHECK(has("optim.momentum = nan: must be a finite number"));
  CHECK(has("stragglers.seed = 18446744073709551615: must be <= 9223372036854775807"));
  CHECK(problems.size() == 15);

  // epochs may be 0 when steps is set; a trace model with a path is fine.
  cfg::Config ok;
  ok.train.steps = 100;
  ok.train.epochs = 0.0;
  ok.stragglers.model = cfg::StragglerModel::kTrace;
  ok.stragglers.trace = "runs/x/steps.jsonl";
  ok.data.name = cfg::DataSet::kSynthetic;
  ok.data.path = "";
  CHECK(cfg::validate(ok).empty());
}

TEST_CASE("to_toml writes every key and reads back equal", "[config]") {
  CHECK(cfg::parse(cfg::to_toml(cfg::Config{}), "resolved.toml", {}) == cfg::Config{});

  cfg::Config c;
  c.run.name = "odd-name_1.v2";
  c.run.dir = "dir with \"quotes\" and \\backslash\\ and tab\t and ünïcode";
  c.run.seed = 9223372036854775807ULL;
  c.run.resume = true;
  c.run.overwrite = true;
  c.run.progress_every_steps = 7;
  c.data.name = cfg::DataSet::kSynthetic;
  c.data.path = "";
  c.data.augment = true;
  c.data.augment_max_rotate_deg = 180.0;
  c.data.augment_max_zoom = 0.1 + 0.2;  // not exactly 0.3
  c.data.limit_train = 123456789012;
  c.model.name = cfg::ModelName::kMlp;
  c.model.weight_norm = false;
  c.optim.name = cfg::OptimizerName::kRmsprop;
  c.optim.lr = 1.0 / 3.0;
  c.optim.eps = 1e-300;
  c.optim.schedule = cfg::Schedule::kWarmupExponential;
  c.optim.decay_epochs = 3.0;
  c.optim.ema = 0.0;
  c.optim.weight_decay = 5e-4;
  c.train.mode = cfg::Mode::kSoftsync;
  c.train.batch = 128;
  c.train.steps = 1000;
  c.train.epochs = 2.75;
  c.cluster.ps = 3;
  c.cluster.evaluator = true;
  c.stragglers.model = cfg::StragglerModel::kPareto;
  c.stragglers.workers = {0, 5, 9};
  c.stragglers.alpha = 1.5;
  c.stragglers.mean_ms = 12.25;
  c.stragglers.trace = "t.jsonl";
  c.stragglers.seed = 42;
  c.eval.every_steps = 100;
  c.eval.every_s = 0.5;
  c.compute.backend = cfg::Backend::kCuda;
  c.compute.threads = 2;
  REQUIRE(cfg::validate(c).empty());
  const std::string text = cfg::to_toml(c);
  const cfg::Config back = cfg::parse(text, "resolved.toml", {});
  // Field-by-field through operator==; the text comparison shows what differs.
  CHECK(cfg::to_toml(back) == text);
  CHECK(back == c);
  CHECK(back.optim.lr == c.optim.lr);
  CHECK(back.optim.eps == c.optim.eps);
  CHECK(back.run.dir == c.run.dir);
  // Floats stay floats: a whole number is written as 180.0, not 180.
  CHECK_THAT(text, Contains("augment_max_rotate_deg = 180.0\n"));
  // Every key of the reference is written.
  for (const std::string section :
       {"run", "data", "model", "optim", "train", "cluster", "stragglers", "eval", "compute"}) {
    CHECK_THAT(text, Contains("[" + section + "]\n"));
  }
}

TEST_CASE("key_reference lists every key with its default, and configs/README.md holds it",
          "[config]") {
  const std::string ref = cfg::key_reference();
  // Each "key = value" line of to_toml() appears in the reference as section.key = default.
  std::istringstream in(cfg::to_toml(cfg::Config{}));
  std::string line, section;
  int keys = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    CHECK_THAT(ref, Contains("  " + section + "." + line));
    ++keys;
  }
  CHECK(keys >= 50);
  CHECK_THAT(ref, Contains("one of sgd | rmsprop"));
  CHECK_THAT(ref, Contains("optim.momentum = 0.9"));

  std::ifstream readme(std::string(SYNCOPT_SOURCE_DIR) + "/configs/README.md");
  REQUIRE(readme);
  std::stringstream text;
  text << readme.rdbuf();
  // Regenerate the README block from `syncopt train --help` when keys change.
  CHECK_THAT(text.str(), Contains(ref));
}

TEST_CASE("model.layers: read from [[model.layers]] and inline, written back equal", "[config]") {
  const std::string text =
      "[model]\nname = \"custom\"\n\n"
      "[[model.layers]]\ntype = \"conv\"\nname = \"c1\"\nout = 16\nkernel = 3\npad = 1\n"
      "bias = false\n\n"
      "[[model.layers]]\ntype = \"bn\"\neps = 1e-3\n\n"
      "[[model.layers]]\ntype = \"relu\"\nname = \"r1\"\n\n"
      "[[model.layers]]\ntype = \"conv\"\nout = 32\nstride = 2\npad = 1\nweight_norm = true\n\n"
      "[[model.layers]]\ntype = \"add\"\nfrom = \"r1\"\nshortcut = \"projection\"\n\n"
      "[[model.layers]]\ntype = \"dropout\"\nrate = 0.25\n\n"
      "[[model.layers]]\ntype = \"gap\"\n\n[[model.layers]]\ntype = \"fc\"\n";
  const cfg::Config c = cfg::parse(text, "m.toml", {});
  using T = syncopt::nn::LayerType;
  REQUIRE(c.model.layers.size() == 8);
  CHECK(c.model.layers[0].type == T::kConv);
  CHECK(c.model.layers[0].name == "c1");
  CHECK(c.model.layers[0].out == 16);
  CHECK(c.model.layers[0].pad == 1);
  CHECK(!c.model.layers[0].bias);
  CHECK(c.model.layers[1].eps == 1e-3);
  CHECK(c.model.layers[3].stride == 2);
  CHECK(c.model.layers[3].kernel == 0);  // the default, resolved by the graph
  CHECK(c.model.layers[3].weight_norm);
  CHECK(c.model.layers[4].from == "r1");
  CHECK(c.model.layers[4].shortcut == syncopt::nn::Shortcut::kProjection);
  CHECK(c.model.layers[5].rate == 0.25);
  CHECK(c.model.layers[7].type == T::kFc);
  CHECK(c.model.layers[7].out == 0);
  const std::string resolved = cfg::to_toml(c);
  CHECK_THAT(resolved, Contains("{ type = \"add\", from = \"r1\", shortcut = \"projection\" },\n"));
  CHECK(cfg::parse(resolved, "resolved.toml", {}) == c);
  // The same layers inline, and through --set.
  const std::string inline_text =
      "[model]\nname = \"custom\"\nlayers = [{ type = \"fc\", out = 8, bias = false }, "
      "{ type = \"relu\" }, { type = \"fc\" }]\n";
  CHECK(cfg::parse(inline_text, "i.toml", {}).model.layers.size() == 3);
  const cfg::Config set =
      cfg::parse("", "empty.toml", {"model.name=custom", "model.layers=[{type=\"fc\"}]"});
  REQUIRE(set.model.layers.size() == 1);
  CHECK(set.model.layers[0].type == T::kFc);
}

TEST_CASE("model.layers: every bad layer is named with its line and a hint", "[config]") {
  const std::string e = load_error(
      "[model]\nname = \"custom\"\n\n"
      "[[model.layers]]\ntype = \"conv\"\nout = 16\nstrides = 2\n\n"  // line 4
      "[[model.layers]]\ntype = \"batchnorm\"\n\n"                    // line 9
      "[[model.layers]]\ntype = \"relu\"\nrate = 0.2\n\n"             // line 12
      "[[model.layers]]\ntype = \"conv\"\nkernel = 0\n\n"             // line 16
      "[[model.layers]]\ntype = \"add\"\nshortcut = \"proj\"\n\n"     // line 20
      "[[model.layers]]\nout = 3\n");                                 // line 24
  CHECK_THAT(e, Contains("exp.toml:4: model.layers: 8 problems"));
  CHECK_THAT(e, Contains("layer 1 (line 4, conv): unknown attribute 'strides'; did you mean "
                         "'stride'?"));
  CHECK_THAT(e, Contains("layer 2 (line 9): unknown type \"batchnorm\"; did you mean \"bn\"?"));
  CHECK_THAT(e, Contains("layer 3 (line 12, relu): 'rate' is not an attribute of relu (dropout "
                         "has it)"));
  CHECK_THAT(e, Contains("layer 4 (line 16, conv): kernel = 0: must be >= 1"));
  CHECK_THAT(e, Contains("layer 4 (line 16, conv): a conv needs out = <output channels>"));
  CHECK_THAT(e, Contains("layer 5 (line 20, add): shortcut: must be \"identity\" or "
                         "\"projection\""));
  CHECK_THAT(e, Contains("layer 6 (line 24): no type"));
  // A built-in name with layers, and custom without any.
  CHECK_THAT(load_error("[model]\nname = \"cnn\"\nlayers = [{ type = \"fc\" }]\n"),
             Contains("model.name = \"cnn\": is a built-in model, but model.layers describes one"));
  CHECK_THAT(load_error("[model]\nname = \"custom\"\n"),
             Contains("model.name = \"custom\": needs the layers"));
  CHECK_THAT(load_error("[model]\nlayers = 3\n"), Contains("expected an array of layer tables"));
}

TEST_CASE("config: integers that the code reads into an int are checked as 64-bit values",
          "[config]") {
  // 2^32 + 1 once truncated to a batch of 1 and a 1-unit model.
  for (const char* key : {"train.batch", "model.mlp_hidden", "eval.batch", "eval.bn_batches",
                          "cluster.ps", "train.softsync_c", "sim.workers", "compute.threads"}) {
    INFO(key);
    const std::string msg = load_error("[run]\nseed = 1\n", {std::string(key) + "=4294967297"});
    CHECK(msg.find(std::string(key) + " = 4294967297") != std::string::npos);
    CHECK(msg.find("2147483647") != std::string::npos);
  }
  // The largest int is fine; one more is not, and neither is 2^53 + 1,
  // which a comparison in doubles would round.
  TempFile file("[train]\nbatch = 2147483647\n");
  CHECK(cfg::load(file.path(), {}).train.batch == 2147483647);
  CHECK(load_error("[train]\nbatch = 2147483648\n").find("train.batch") != std::string::npos);
  CHECK(load_error("[train]\nbatch = 9007199254740993\n").find("train.batch") != std::string::npos);
  // compute.threads above the CPUs is not a config error: each rank caps it
  // to what it may use (apps/syncopt/platform.cpp, tests/faults config_ranges).
  TempFile threads("[compute]\nthreads = 100000\n");
  CHECK(cfg::load(threads.path(), {}).compute.threads == 100000);
}

TEST_CASE("config: an empty config file is a usage error naming the file", "[config]") {
  for (const char* text : {"", "\n\n", "# only a comment\n   # and another\n"}) {
    TempFile file(text);
    try {
      cfg::load(file.path(), {});
      FAIL("an empty config was accepted");
    } catch (const syncopt::UsageError& e) {
      CHECK(std::string(e.what()).find(file.path()) != std::string::npos);
      CHECK(std::string(e.what()).find("empty") != std::string::npos);
    }
  }
  // One key is enough to say something.
  TempFile one("# a comment\n[train]\nbatch = 8\n");
  CHECK(cfg::load(one.path(), {}).train.batch == 8);
}

TEST_CASE("the model.layers reference names every layer type and attribute the reader takes",
          "[config][layers]") {
  // key_reference() describes model.layers by hand, with defaults; this holds
  // it to the reader's own table (config::layers_reference()).
  std::string ref = cfg::key_reference();
  ref.erase(std::remove(ref.begin(), ref.end(), '\n'), ref.end());
  std::string flat;  // the reference with its wrapping undone
  for (std::size_t i = 0; i < ref.size(); ++i) {
    if (ref[i] == ' ' && !flat.empty() && flat.back() == ' ') continue;
    flat += ref[i];
  }
  // Only the model.layers entry counts (an attribute like eps is also a key elsewhere).
  const auto begin = flat.find("model.layers =");
  REQUIRE(begin != std::string::npos);
  flat = flat.substr(begin, flat.find("[optim]", begin) - begin);
  const std::string table = cfg::layers_reference();  // "conv (out, kernel, ...); bn (eps); ..."
  std::size_t pos = 0, types = 0;
  while (pos < table.size()) {
    const auto open = table.find(" (", pos), close = table.find(')', pos);
    REQUIRE(open != std::string::npos);
    const std::string type = table.substr(pos, open - pos);
    ++types;
    INFO(type);
    CHECK(flat.find(type) != std::string::npos);
    std::string attrs = table.substr(open + 2, close - open - 2) + ",";
    for (std::size_t a = 0, comma; (comma = attrs.find(',', a)) != std::string::npos;
         a = comma + 2) {
      const std::string attr = attrs.substr(a, comma - a);
      if (attr == "-") continue;
      INFO(attr);
      CHECK(flat.find(attr) != std::string::npos);
    }
    pos = table.find("; ", close);
    pos = pos == std::string::npos ? table.size() : pos + 2;
  }
  CHECK(types == syncopt::nn::layer_type_names().size());
}

TEST_CASE(
    "micro-batches and the compute budget: allreduce only, a number or auto, smaller "
    "micro-batches than the batch",
    "[config]") {
  const auto err = [](const std::vector<std::string>& overrides) {
    return config_error([&] { cfg::parse("", "x.toml", overrides); });
  };
  const auto ok = [](const std::vector<std::string>& overrides) {
    return cfg::parse("", "x.toml", overrides);
  };
  const auto c = ok({"train.mode=allreduce", "train.batch=32", "train.micro_batch=8",
                     "train.compute_budget_ms=auto"});
  CHECK(cfg::is_auto(c.train.compute_budget_ms));
  const auto d = ok({"train.mode=allreduce", "train.micro_batch=8", "train.compute_budget_ms=12"});
  CHECK(std::get<double>(d.train.compute_budget_ms) == 12.0);
  CHECK_THAT(err({"train.compute_budget_ms=fast"}), Contains("expected float or \"auto\""));
  CHECK_THAT(err({"train.compute_budget_ms=-1"}), Contains("must be \"auto\" or >= 0"));
  CHECK_THAT(err({"train.mode=sync", "train.micro_batch=8"}),
             Contains("train.micro_batch = 8: applies to train.mode = \"allreduce\" only"));
  CHECK_THAT(err({"train.mode=allreduce", "train.compute_budget_ms=50"}),
             Contains("needs micro-batches smaller than the batch"));
  CHECK_THAT(err({"train.mode=allreduce", "train.micro_batch=64"}),
             Contains("train.micro_batch = 64: exceeds train.batch = 32"));
  CHECK_THAT(err({"train.mode=allreduce", "train.micro_batch=8", "train.compute_budget_ms=auto",
                  "train.compute_budget_keep=0"}),
             Contains("train.compute_budget_keep"));
}
