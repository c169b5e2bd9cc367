// What `--help` and the SLURM templates show a user: help that fits a
// terminal, and the same site lines in both sbatch templates (issue 28).
#include <catch2/catch.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "harness.hpp"

using namespace syncopt_test;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The subcommands `syncopt --help` lists (CLI11's "Subcommands:" block).
std::vector<std::string> subcommands(const std::string& help) {
  std::vector<std::string> out;
  bool in_block = false;
  for (const auto& line : lines_of(help)) {
    if (line == "Subcommands:") {
      in_block = true;
    } else if (in_block && line.starts_with("  ") && line[2] != ' ') {
      out.push_back(line.substr(2, line.find(' ', 2) - 2));
    } else if (in_block && !line.starts_with("  ")) {
      in_block = false;
    }
  }
  return out;
}

// The `##SBATCH` site lines of a template, in order.
std::vector<std::string> site_lines(const std::string& text) {
  std::vector<std::string> out;
  for (const auto& line : lines_of(text)) {
    if (line.starts_with("##SBATCH")) out.push_back(line);
  }
  return out;
}

}  // namespace

TEST_CASE("no line of any --help is over 100 characters", "[e2e][cli]") {
  const Result top = run("--help");
  REQUIRE(top.code == 0);
  const auto subs = subcommands(top.output);
  CHECK(subs.size() >= 8);
  std::vector<std::string> helps = {"--help"};
  for (const auto& s : subs) helps.push_back(s + " --help");
  for (const auto& args : helps) {
    const Result r = run(args);
    INFO("syncopt " << args);
    CHECK(r.code == 0);
    for (const auto& line : lines_of(r.output)) {
      INFO(line);
      CHECK(line.size() <= 100);
    }
  }
}

TEST_CASE("simulate --help's --from text ends its sentence", "[e2e][cli]") {
  const Result r = run("simulate --help");
  REQUIRE(r.code == 0);
  // The text as one line, however the help wraps it.
  std::string flat;
  for (const char c : r.output) {
    const bool blank = c == ' ' || c == '\n';
    if (!blank || (!flat.empty() && flat.back() != ' ')) flat += blank ? ' ' : c;
  }
  CHECK(flat.find("the shard's apply times drawn from the run's measured ones") !=
        std::string::npos);
}

TEST_CASE("both SLURM templates carry the same site lines", "[e2e]") {
  const auto train = site_lines(read_text(src("scripts/slurm/train.sbatch")));
  const auto sweep = site_lines(read_text(src("scripts/slurm/sweep.sbatch")));
  CHECK(train.size() >= 6);
  CHECK(sweep == train);
}
