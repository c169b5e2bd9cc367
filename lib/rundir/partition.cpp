// A partition told apart from a death (see partition.hpp).
#include "rundir/partition.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>

#include "common/atomic_file.hpp"
#include "common/clock.hpp"
#include "metrics/records.hpp"

namespace syncopt::rundir {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path mark_path(const fs::path& run_dir, const std::string& launch_id) {
  return run_dir / (".alive-" + launch_id);
}

std::string report_prefix(const std::string& launch_id) { return ".cut-" + launch_id + "-r"; }

// The mark's text, read with a fresh open (NFS close-to-open); "" if none.
std::string read_mark(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  char buf[64];
  const ssize_t n = ::read(fd, buf, sizeof buf);
  ::close(fd);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "";
}

// Rewrites the mark in place (not renamed: a reader on another NFS client
// may hold the old directory entry), a counter that changes every time.
bool write_mark(const fs::path& path, std::uint64_t count) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  char buf[32];
  const int n = std::snprintf(buf, sizeof buf, "%020llu\n", static_cast<unsigned long long>(count));
  const bool ok = ::pwrite(fd, buf, static_cast<std::size_t>(n), 0) == n;
  ::close(fd);
  return ok;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

AliveMark::AliveMark(const fs::path& run_dir, const std::string& launch_id)
    : m_path(mark_path(run_dir, launch_id)) {
  m_thread = std::thread([this] {
    bool warned = false;
    for (std::uint64_t n = 1; !m_stop.load(); ++n) {
      if (!write_mark(m_path, n) && !warned) {
        spdlog::warn("cannot write {} ({}): a rank cut off from this one cannot tell",
                     m_path.string(), std::strerror(errno));
        warned = true;
      }
      for (int i = 0; i < 5 && !m_stop.load(); ++i) {
        std::this_thread::sleep_for(std::chrono::duration<double>(kAliveEveryS / 5));
      }
    }
  });
}

AliveMark::~AliveMark() {
  m_stop = true;
  if (m_thread.joinable()) m_thread.join();
  std::error_code ec;
  fs::remove(m_path, ec);
}

bool rank0_running(const fs::path& run_dir, const std::string& launch_id, double watch_s) {
  const fs::path path = mark_path(run_dir, launch_id);
  const std::string first = read_mark(path);
  if (first.empty()) return false;
  const RunClock waited;
  while (waited.now() < watch_s) {
    std::this_thread::sleep_for(std::chrono::duration<double>(kAliveEveryS / 2));
    const std::string now = read_mark(path);
    if (now.empty()) return false;  // rank 0 removed it: it is done
    if (now != first) return true;
  }
  return false;
}

void report_cut_off(const fs::path& run_dir, const std::string& launch_id,
                    const json& report) noexcept {
  try {
    const int rank = report.at("rank").get<int>();
    write_file_atomic(run_dir / (report_prefix(launch_id) + std::to_string(rank) + ".json"),
                      metrics::json_text(report) + "\n");
  } catch (const std::exception& e) {
    spdlog::error("could not leave the report that this rank is cut off in {}: {}",
                  run_dir.string(), e.what());
  }
}

std::vector<json> cut_off_reports(const fs::path& run_dir, const std::string& launch_id,
                                  const std::vector<std::string>& hosts, double wait_s) {
  const std::string prefix = report_prefix(launch_id);
  const RunClock waited;
  for (;;) {
    std::vector<json> out;
    std::set<std::string> seen;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) != 0) continue;
      try {
        out.push_back(json::parse(read_file_bytes(e.path())));
        seen.insert(out.back().value("host", ""));
      } catch (const std::exception&) {
        // half written (another host's rename not seen yet): the next round
      }
    }
    const bool all = std::all_of(hosts.begin(), hosts.end(),
                                 [&](const std::string& h) { return seen.count(h) > 0; });
    if (all || waited.now() >= wait_s) {
      std::sort(out.begin(), out.end(), [](const json& a, const json& b) {
        return a.value("rank", 0) < b.value("rank", 0);
      });
      return out;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void remove_partition_files(const fs::path& run_dir, const std::string& launch_id) noexcept {
  std::error_code ec;
  fs::remove(mark_path(run_dir, launch_id), ec);
  const std::string prefix = report_prefix(launch_id);
  std::vector<fs::path> mine;
  for (const auto& e : fs::directory_iterator(run_dir, ec)) {
    if (e.path().filename().string().rfind(prefix, 0) == 0) mine.push_back(e.path());
  }
  for (const auto& p : mine) fs::remove(p, ec);
}

json describe_partition(const std::string& own_host, const std::vector<std::string>& lost_hosts,
                        const std::vector<std::string>& all_hosts,
                        const std::vector<json>& reports) {
  if (reports.empty()) return nullptr;
  std::set<std::string> reported;
  json ranks = json::array();
  for (const auto& r : reports) {
    reported.insert(r.value("host", ""));
    ranks.push_back(r.value("rank", -1));
  }
  std::vector<std::string> others;
  for (const auto& h : all_hosts) {
    if (h != own_host && std::find(others.begin(), others.end(), h) == others.end())
      others.push_back(h);
  }
  std::vector<std::string> lost_reported;
  for (const auto& h : lost_hosts) {
    if (reported.count(h) > 0 &&
        std::find(lost_reported.begin(), lost_reported.end(), h) == lost_reported.end())
      lost_reported.push_back(h);
  }
  json out = {{"reported_by", ranks}};
  // Every other host lost rank 0's at once, and said so through the shared
  // file system: rank 0's host is the one cut off (with two hosts, either).
  if (others.size() >= 2 && lost_reported.size() == others.size()) {
    out["cut_off"] = {own_host};
    out["from"] = others;
    out["detail"] = own_host + " (rank 0's host) was cut off from the network: the ranks on " +
                    join(others) + " kept running and lost it at once";
  } else if (!lost_reported.empty()) {
    out["cut_off"] = lost_reported;
    out["from"] = {own_host};
    out["detail"] = join(lost_reported) + " lost its link to " + own_host +
                    " (rank 0's host): its ranks kept running, cut off, and were excluded";
  } else {
    return nullptr;
  }
  return out;
}

}  // namespace syncopt::rundir
