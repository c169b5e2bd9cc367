// The built-in models (cnn, mlp, logreg, with and without weight norm) end
// 50 seeded local steps with exactly the parameters (and EMA) recorded in
// tests/golden/builtin_params.txt, bit for bit: their layout, initial values
// and every layer's arithmetic are pinned. Recorded with the binary of the
// straight-line models, before they became graphs.
//
// oneDNN's kernels differ between CPU generations, so each record carries
// the instruction set it ran on (oneDNN's own "isa:" line): a native record
// is compared where oneDNN reports the same ISA, and a record pinned with
// DNNL_MAX_CPU_ISA=AVX2 on any machine with AVX2 or better. At least one
// record must be compared. Regenerate deliberately with SYNCOPT_UPDATE_GOLDEN=1.
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

namespace {

// FNV-1a, 64 bits, of a file's bytes.
std::string file_hash(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::uint64_t h = 1469598103934665603ULL;
  for (char c; in.get(c);) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ULL;
  std::ostringstream os;
  os << std::hex << h;
  return os.str();
}

struct Record {
  std::string model, weight_norm, pin;  // pin: "native" or a DNNL_MAX_CPU_ISA value
  std::string params_hash, ema_hash;
  std::size_t floats = 0;
  std::string isa;  // oneDNN's "isa:" text
};

struct Outcome {
  Record got;
  std::string output;
};

Outcome run_case(const Record& want, const fs::path& dir) {
  const std::string name = want.model + "-" + want.weight_norm + "-" + want.pin;
  std::string env = "DNNL_VERBOSE=1 OMP_NUM_THREADS=1 ";
  if (want.pin != "native") env += "DNNL_MAX_CPU_ISA=" + want.pin + " ";
  const Result r = run_command(
      env + SYNCOPT_EXE + " train " + src("tests/golden/builtin_models.toml") +
      " --quiet --set run.dir=" + dir.string() + " --set run.name=" + name +
      " --set model.name=" + want.model + " --set model.weight_norm=" + want.weight_norm);
  Outcome out;
  out.output = r.output;
  out.got = want;
  if (r.code != 0) return out;
  const std::string tag = "onednn_verbose,info,cpu,isa:";
  const auto at = r.output.find(tag);
  if (at != std::string::npos) {
    const auto end = r.output.find('\n', at);
    out.got.isa = r.output.substr(at + tag.size(), end - at - tag.size());
  }
  out.got.params_hash = file_hash(dir / name / "params.f32");
  out.got.ema_hash = file_hash(dir / name / "params_ema.f32");
  out.got.floats = static_cast<std::size_t>(fs::file_size(dir / name / "params.f32")) / 4;
  return out;
}

std::vector<Record> read_records(const std::string& path) {
  std::vector<Record> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream is(line);
    Record r;
    std::string bar;
    is >> r.model >> r.weight_norm >> r.pin >> r.params_hash >> r.ema_hash >> r.floats >> bar;
    std::getline(is, r.isa);
    if (!r.isa.empty() && r.isa[0] == ' ') r.isa.erase(0, 1);
    out.push_back(r);
  }
  return out;
}

}  // namespace

TEST_CASE("built-in models end 50 steps with the golden parameters bit for bit", "[e2e][golden]") {
  const auto dir = temp_dir("golden-models");
  const std::string golden_path = src("tests/golden/builtin_params.txt");
  if (std::getenv("SYNCOPT_UPDATE_GOLDEN") != nullptr) {
    std::ofstream out(golden_path);
    out << "# Built-in models after 50 local steps of tests/golden/builtin_models.toml\n"
           "# (tests/e2e/test_golden_models.cpp). Fields: model weight_norm pin "
           "fnv1a64(params.f32)\n# fnv1a64(params_ema.f32) floats | oneDNN's isa line; pin is "
           "native or the DNNL_MAX_CPU_ISA it ran with.\n";
    for (const std::string pin : {"native", "AVX2"}) {
      for (const auto& [model, wn] :
           {std::pair{"cnn", "true"}, std::pair{"cnn", "false"}, std::pair{"mlp", "true"},
            std::pair{"mlp", "false"}, std::pair{"logreg", "true"}, std::pair{"logreg", "false"}}) {
        Record want;
        want.model = model;
        want.weight_norm = wn;
        want.pin = pin;
        const Outcome o = run_case(want, dir);
        INFO(o.output.substr(o.output.size() > 2000 ? o.output.size() - 2000 : 0));
        REQUIRE(!o.got.params_hash.empty());
        out << o.got.model << " " << o.got.weight_norm << " " << o.got.pin << " "
            << o.got.params_hash << " " << o.got.ema_hash << " " << o.got.floats << " | "
            << o.got.isa << "\n";
      }
    }
    WARN("golden file rewritten: " << golden_path);
  }
  const std::vector<Record> records = read_records(golden_path);
  REQUIRE(records.size() == 12);
  int compared = 0;
  for (const Record& want : records) {
    const Outcome o = run_case(want, dir);
    INFO(want.model << " weight_norm=" << want.weight_norm << " pin " << want.pin);
    INFO(o.output.substr(o.output.size() > 2000 ? o.output.size() - 2000 : 0));
    REQUIRE(!o.got.params_hash.empty());
    if (o.got.isa != want.isa) {
      WARN(want.model << " (" << want.pin << ") was recorded on '" << want.isa << "', oneDNN runs '"
                      << o.got.isa << "' here: not compared");
      continue;
    }
    ++compared;
    CHECK(o.got.floats == want.floats);
    CHECK(o.got.params_hash == want.params_hash);
    CHECK(o.got.ema_hash == want.ema_hash);
  }
  INFO("no record was made on this machine's instruction set, nor on AVX2");
  CHECK(compared > 0);
  fs::remove_all(dir);
}
