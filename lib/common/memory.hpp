// How much memory this process may use (docs/design.md §5, "Memory"), so
// that a model or batch that cannot fit is refused before anything is
// allocated, and sizes printed the same way everywhere.
#pragma once

#include <cstdint>
#include <string>

namespace syncopt {

struct MemoryLimit {
  std::uint64_t nbytes = 0;
  std::string source;  // e.g. "the machine's 24.0 GB (MemTotal) shared by 4 ranks on this node"
};

// The least of: the machine's memory (MemTotal) or its cgroup's limit
// (memory.max), shared by `ranks_here` ranks on this node; the address
// space left under `ulimit -v` (RLIMIT_AS less what is mapped now); and
// `ulimit -d` (RLIMIT_DATA). `limit_gb` > 0 (compute.memory_limit_gb)
// replaces them all.
MemoryLimit memory_limit(int ranks_here, double limit_gb = 0.0);

// "6.40 GB" (10^9 bytes), "512.0 MB", "96 bytes".
std::string format_bytes(std::uint64_t nbytes);

}  // namespace syncopt
