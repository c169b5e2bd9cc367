// Memory limits of this process (see memory.hpp).
#include "common/memory.hpp"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <string>

namespace syncopt {

namespace {

constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();

// A "Key:   123 kB" line of /proc/meminfo, in bytes (kNone if absent).
std::uint64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    unsigned long long kb = 0;
    if (std::sscanf(line.c_str() + key.size() + 1, "%llu", &kb) == 1) return kb * 1024ULL;
  }
  return kNone;
}

// The cgroup's memory limit (v2 memory.max, v1 memory.limit_in_bytes), or kNone.
std::uint64_t cgroup_bytes() {
  for (const char* path :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    if (!(in >> text) || text == "max") continue;
    try {
      const std::uint64_t v = std::stoull(text);
      if (v > 0 && v < (std::uint64_t{1} << 62)) return v;
    } catch (const std::exception&) {
    }
  }
  return kNone;
}

// Bytes of address space this process maps now (/proc/self/statm, pages).
std::uint64_t mapped_bytes() {
  std::ifstream in("/proc/self/statm");
  unsigned long long pages = 0;
  if (!(in >> pages)) return 0;
  return pages * static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
}

std::uint64_t rlimit_bytes(int resource) {
  rlimit r{};
  if (::getrlimit(resource, &r) != 0 || r.rlim_cur == RLIM_INFINITY) return kNone;
  return static_cast<std::uint64_t>(r.rlim_cur);
}

}  // namespace

std::string format_bytes(std::uint64_t nbytes) {
  char buf[64];
  const double b = static_cast<double>(nbytes);
  if (b >= 1e9) {
    std::snprintf(buf, sizeof(buf), "%.2f GB", b / 1e9);
  } else if (b >= 1e6) {
    std::snprintf(buf, sizeof(buf), "%.1f MB", b / 1e6);
  } else if (b >= 1e3) {
    std::snprintf(buf, sizeof(buf), "%.1f kB", b / 1e3);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu bytes", static_cast<unsigned long long>(nbytes));
  }
  return buf;
}

MemoryLimit memory_limit(int ranks_here, double limit_gb) {
  if (limit_gb > 0.0) {
    return {
        static_cast<std::uint64_t>(limit_gb * 1e9),
        "compute.memory_limit_gb = " + format_bytes(static_cast<std::uint64_t>(limit_gb * 1e9))};
  }
  MemoryLimit out{kNone, ""};
  const int ranks = std::max(1, ranks_here);
  const std::uint64_t total = meminfo_bytes("MemTotal");
  const std::uint64_t cgroup = cgroup_bytes();
  const bool by_cgroup = cgroup < total;
  const std::uint64_t node = std::min(total, cgroup);
  if (node != kNone) {
    out.nbytes = node / static_cast<std::uint64_t>(ranks);
    out.source = (by_cgroup ? "the cgroup's " + format_bytes(node) + " (memory.max)"
                            : "the machine's " + format_bytes(node) + " (MemTotal)") +
                 (ranks > 1 ? " shared by " + std::to_string(ranks) + " ranks on this node" : "");
  }
  if (const std::uint64_t as = rlimit_bytes(RLIMIT_AS); as != kNone) {
    const std::uint64_t mapped = mapped_bytes();
    const std::uint64_t left = as > mapped ? as - mapped : 0;
    if (left < out.nbytes) {
      out = {left, "ulimit -v " + format_bytes(as) + ", of which " + format_bytes(mapped) +
                       " is mapped already (libraries, threads)"};
    }
  }
  if (const std::uint64_t data = rlimit_bytes(RLIMIT_DATA); data < out.nbytes) {
    out = {data, "ulimit -d " + format_bytes(data)};
  }
  return out;
}

}  // namespace syncopt
