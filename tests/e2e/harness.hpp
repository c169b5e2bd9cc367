// Running the syncopt binary from a test: exit code and combined output.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace syncopt_test {

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line, capturing stdout and stderr together.
inline Result run_command(const std::string& cmd) {
  Result r;
  FILE* pipe = popen((cmd + " 2>&1").c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

inline Result run(const std::string& args) {
  return run_command(std::string(SYNCOPT_EXE) + " " + args);
}

// `mpirun -np NP syncopt ARGS` with Open MPI's root and oversubscription
// permissions (they belong to the harness, never to the binary), bounded by
// `timeout` so that a hang fails the test instead of stalling CI.
inline Result run_mpi(int np, const std::string& args, int timeout_s = 180) {
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  setenv("OMPI_MCA_rmaps_base_oversubscribe", "1", 1);
  return run_command("timeout -k 10 " + std::to_string(timeout_s) + " mpirun -np " +
                     std::to_string(np) + " " + std::string(SYNCOPT_EXE) + " " + args);
}

inline std::vector<float> read_floats(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

// A fresh, empty directory under the system temp dir.
inline std::filesystem::path temp_dir(const std::string& tag) {
  std::random_device rd;
  auto dir =
      std::filesystem::temp_directory_path() / ("syncopt-e2e-" + tag + "-" + std::to_string(rd()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_text(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline std::vector<nlohmann::json> read_jsonl(const std::filesystem::path& p) {
  std::vector<nlohmann::json> out;
  std::ifstream in(p);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

inline std::string src(const std::string& rel) {
  return std::string(SYNCOPT_SOURCE_DIR) + "/" + rel;
}

}  // namespace syncopt_test
