// Shard placement by bytes and the buckets of the pipelined exchange (see
// placement.hpp).
#include "layout/placement.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>

#include "common/error.hpp"

namespace syncopt::layout {

namespace {

// The groups must tile [0, total) in order: anything else is a bug of the
// caller (they come from nn::Graph::groups, which does).
std::size_t check_tiling(const std::vector<Group>& groups) {
  std::size_t end = 0;
  for (const auto& g : groups) {
    if (g.offset != end || g.count == 0) {
      throw InternalError("parameter group '" + g.name + "' at offset " + std::to_string(g.offset) +
                          " (" + std::to_string(g.count) +
                          " floats) does not follow the previous one, which ends at " +
                          std::to_string(end));
    }
    end += g.count;
  }
  return end;
}

// Index of the group that starts at `offset` (a slice boundary), else
// groups.size() for the end of the vector.
std::size_t group_at(const std::vector<Group>& groups, std::size_t offset) {
  const auto it = std::lower_bound(groups.begin(), groups.end(), offset,
                                   [](const Group& g, std::size_t o) { return g.offset < o; });
  const auto i = static_cast<std::size_t>(it - groups.begin());
  const std::size_t total = groups.empty() ? 0 : groups.back().offset + groups.back().count;
  if ((i < groups.size() && groups[i].offset != offset) ||
      (i == groups.size() && offset != total)) {
    throw InternalError("offset " + std::to_string(offset) +
                        " falls inside a parameter group: slices hold whole layers");
  }
  return i;
}

}  // namespace

std::vector<Slice> balanced_slices(const std::vector<Group>& groups, int shards) {
  if (shards < 1) throw InternalError("balanced_slices for " + std::to_string(shards) + " shards");
  const std::size_t total = check_tiling(groups);
  const auto n_groups = groups.size();
  if (n_groups < static_cast<std::size_t>(shards)) {
    std::string names;
    for (const auto& g : groups) names += (names.empty() ? "" : ", ") + g.name;
    throw ConfigError("cluster.ps = " + std::to_string(shards) + " shards, but the model has " +
                      std::to_string(n_groups) + " layer(s) with parameters (" + names +
                      "): a shard holds whole layers, so set cluster.ps to at most " +
                      std::to_string(n_groups));
  }
  // Two exact passes of dynamic programming over (shards, groups): first
  // the smallest cap on a shard's floats that S contiguous runs of whole
  // groups can meet, then, among the placements under that cap, the one
  // with the least sum of squared slice sizes (the other shards as even as
  // they can be, not just the largest one bounded). O(S G^2): a few
  // milliseconds for hundreds of layers.
  const auto S = static_cast<std::size_t>(shards);
  std::vector<std::size_t> prefix(n_groups + 1, 0);
  for (std::size_t g = 0; g < n_groups; ++g) prefix[g + 1] = prefix[g] + groups[g].count;
  const auto part = [&](std::size_t from, std::size_t to) { return prefix[to] - prefix[from]; };
  constexpr auto kNone = std::numeric_limits<std::size_t>::max();
  std::vector<std::vector<std::size_t>> largest(S + 1,
                                                std::vector<std::size_t>(n_groups + 1, kNone));
  largest[0][0] = 0;
  for (std::size_t s = 1; s <= S; ++s) {
    for (std::size_t g = s; g + (S - s) <= n_groups; ++g) {
      for (std::size_t j = s - 1; j < g; ++j) {
        if (largest[s - 1][j] == kNone) continue;
        largest[s][g] = std::min(largest[s][g], std::max(largest[s - 1][j], part(j, g)));
      }
    }
  }
  const std::size_t cap = largest[S][n_groups];
  std::vector<std::vector<double>> squares(S + 1, std::vector<double>(n_groups + 1, -1.0));
  std::vector<std::vector<std::size_t>> cut(S + 1, std::vector<std::size_t>(n_groups + 1, 0));
  squares[0][0] = 0.0;
  for (std::size_t s = 1; s <= S; ++s) {
    for (std::size_t g = s; g + (S - s) <= n_groups; ++g) {
      for (std::size_t j = s - 1; j < g; ++j) {
        const std::size_t p = part(j, g);
        if (squares[s - 1][j] < 0.0 || p > cap) continue;
        const double q = squares[s - 1][j] + static_cast<double>(p) * static_cast<double>(p);
        if (squares[s][g] < 0.0 || q < squares[s][g]) {
          squares[s][g] = q;
          cut[s][g] = j;
        }
      }
    }
  }
  std::vector<Slice> out(S);
  std::size_t g = n_groups;
  for (std::size_t s = S; s > 0; --s) {
    const std::size_t j = cut[s][g];
    out[s - 1] = {groups[j].offset, part(j, g)};
    g = j;
  }
  (void)total;
  return out;
}

std::vector<Slice> make_buckets(const std::vector<Group>& groups, const Slice& slice,
                                long long bucket_bytes) {
  if (bucket_bytes <= 0 || slice.count == 0) return {slice};
  const std::size_t first = group_at(groups, slice.offset);
  const std::size_t last = group_at(groups, slice.offset + slice.count);  // one past
  const auto min_floats = static_cast<std::size_t>((bucket_bytes + 3) / 4);
  std::vector<Slice> out;
  std::size_t end = slice.offset + slice.count;
  std::size_t floats = 0;
  for (std::size_t i = last; i-- > first;) {
    floats += groups[i].count;
    if (floats >= min_floats) {
      out.push_back({groups[i].offset, end - groups[i].offset});
      end = groups[i].offset;
      floats = 0;
    }
  }
  if (end > slice.offset) out.push_back({slice.offset, end - slice.offset});
  std::reverse(out.begin(), out.end());
  return out;
}

std::string group_span(const std::vector<Group>& groups, const Slice& slice) {
  if (slice.count == 0) return "(none)";
  const std::size_t first = group_at(groups, slice.offset);
  const std::size_t last = group_at(groups, slice.offset + slice.count) - 1;
  return first == last ? groups[first].name : groups[first].name + ".." + groups[last].name;
}

std::string describe_placement(const std::vector<Group>& groups, const std::vector<Slice>& slices,
                               long long bucket_bytes) {
  std::size_t total = 0;
  for (const auto& s : slices) total += s.count;
  std::string out = "# shards (whole layers, balanced by bytes; ";
  out += bucket_bytes > 0 ? "pipelined exchange, buckets of at least " +
                                std::to_string(bucket_bytes) + " bytes, in forward order)\n"
                          : "exchange.pipeline = false: one message per shard and step)\n";
  char line[256];
  for (std::size_t s = 0; s < slices.size(); ++s) {
    const auto& sl = slices[s];
    const auto buckets = make_buckets(groups, sl, bucket_bytes);
    std::snprintf(
        line, sizeof line, "shard %zu: %-24s %10zu floats %9.3f MB %6.1f %%  %zu bucket%s", s,
        group_span(groups, sl).c_str(), sl.count, static_cast<double>(sl.count) * 4.0 / 1e6,
        total > 0 ? 100.0 * static_cast<double>(sl.count) / static_cast<double>(total) : 0.0,
        buckets.size(), buckets.size() == 1 ? "" : "s");
    out += line;
    if (buckets.size() > 1) {
      out += ":";
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        out += (b ? " | " : " ") + group_span(groups, buckets[b]);
      }
    }
    out += "\n";
  }
  return out;
}

}  // namespace syncopt::layout
