// "Did you mean ...?": the one typo distance of the program, for config
// keys and values, layer types and names, and subcommands.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string_view>
#include <vector>

namespace syncopt {

// Levenshtein distance: insertions, deletions and substitutions.
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The candidate closest to `word`, if it is a typo away (fewer than
// max(2, |word| / 3) + 1 edits), else "".
template <class Strings>
std::string_view closest(std::string_view word, const Strings& candidates) {
  std::string_view best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& cand : candidates) {
    const std::size_t d = edit_distance(word, cand);
    if (d < best_d) {
      best_d = d;
      best = cand;
    }
  }
  return best;
}

}  // namespace syncopt
