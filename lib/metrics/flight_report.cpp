// The flight recorder's section of the report (see flight_report.hpp).
#include "metrics/flight_report.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace syncopt::metrics {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One dump of one rank: its header and its lines (pending first).
struct Dump {
  json head;
  std::vector<json> lines;
};

struct RankDumps {
  int rank = 0;
  std::vector<Dump> dumps;
  bool torn = false;
};

// A field of the type wanted, or `fallback` (a dump is read as it is).
template <class T>
T get(const json& j, const char* key, T fallback) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if constexpr (std::is_same_v<T, std::string>) {
    return it->is_string() ? it->template get<std::string>() : fallback;
  } else if constexpr (std::is_same_v<T, bool>) {
    return it->is_boolean() ? it->template get<bool>() : fallback;
  } else {
    return it->is_number() ? it->template get<T>() : fallback;
  }
}

RankDumps read_rank(const fs::path& file, int rank) {
  RankDumps out;
  out.rank = rank;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      out.torn = true;
      break;
    }
    if (j.contains("dump")) {
      out.dumps.push_back({std::move(j), {}});
    } else if (!out.dumps.empty()) {
      out.dumps.back().lines.push_back(std::move(j));
    }
  }
  return out;
}

// The last dump taken at a deadline or on a signal; the end-of-run ones
// ("the run failed", "error") only when there is nothing else.
const Dump* telling(const std::vector<const Dump*>& dumps) {
  for (auto it = dumps.rbegin(); it != dumps.rend(); ++it) {
    const std::string reason = get<std::string>((*it)->head, "reason", "");
    if (reason.rfind("the run failed", 0) != 0 && reason.rfind("error:", 0) != 0) return *it;
  }
  return dumps.empty() ? nullptr : dumps.back();
}

std::string peer_of(const json& e) {
  const std::string name = get<std::string>(e, "peer_name", "");
  if (!name.empty()) return name;
  const int peer = get<int>(e, "peer", -1);
  return peer < 0 ? "every rank" : "rank " + std::to_string(peer);
}

// "GRAD bucket 0, version 17", or what the tag says of a receive not yet matched.
std::string message_of(const json& e) {
  const std::string kind = get<std::string>(e, "kind", "?");
  const std::string op = get<std::string>(e, "op", "");
  const auto bucket = get<std::uint64_t>(e, "bucket", 0);
  const auto version = get<std::uint64_t>(e, "version", 0);
  if (op == "collective") return "the " + kind + " of step " + std::to_string(version);
  if (kind != "?") {
    return kind + " bucket " + std::to_string(bucket) + ", version " + std::to_string(version);
  }
  const int tag = get<int>(e, "tag", 0);
  std::string what = tag == 11   ? "a gradient or request"
                     : tag == 12 ? "parameters or STOP"
                                 : "a message (tag " + std::to_string(tag) + ")";
  if (e.contains("after") && e["after"].is_object()) {
    const json& a = e["after"];
    what += " (after its " + get<std::string>(a, "kind", "?") + " bucket " +
            std::to_string(get<std::uint64_t>(a, "bucket", 0)) + ", version " +
            std::to_string(get<std::uint64_t>(a, "version", 0)) + ")";
  }
  return what;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f s", s);
  return buf;
}

// What one pending operation waits for, as a sentence.
std::string waiting_for(const json& e) {
  const std::string op = get<std::string>(e, "op", "");
  const std::string age = ", posted " + seconds(get<double>(e, "age_s", 0.0)) + " before the dump";
  if (op == "recv") return "waited for " + message_of(e) + " from " + peer_of(e) + age;
  if (op == "send") return "waited for " + peer_of(e) + " to take its " + message_of(e) + age;
  return "waited in " + message_of(e) + " (every rank)" + age;
}

std::string last_done(const std::vector<json>& lines) {
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    if (get<bool>(*it, "pending", false) || get<std::string>(*it, "event", "") != "done") continue;
    const std::string op = get<std::string>(*it, "op", "");
    const std::string verb = op == "recv" ? "received" : op == "send" ? "sent" : "completed";
    const std::string dir = op == "recv" ? " from " : op == "send" ? " to " : "";
    return verb + " " + message_of(*it) + (dir.empty() ? "" : dir + peer_of(*it)) + ", " +
           seconds(get<double>(*it, "age_s", 0.0)) + " before the dump";
  }
  return "nothing completed in its ring";
}

constexpr std::size_t kShownPending = 3;

void describe_rank(const RankDumps& rd, const Dump& d, std::size_t count, std::string& out,
                   std::set<int>& waited_on) {
  out += "  " + get<std::string>(d.head, "role", "rank " + std::to_string(rd.rank)) + ": dump " +
         std::to_string(get<int>(d.head, "dump", 0)) + " of " + std::to_string(count) + " at " +
         seconds(get<double>(d.head, "t", 0.0)) + " (" + get<std::string>(d.head, "reason", "?") +
         ")" + (rd.torn ? " [the file ends in a torn line]" : "") + "\n";
  out += "    last: " + last_done(d.lines) + "\n";
  std::vector<const json*> pending;
  for (const json& e : d.lines) {
    if (get<bool>(e, "pending", false)) pending.push_back(&e);
  }
  // Oldest first (the dump writes them so; sorted again in case).
  std::stable_sort(pending.begin(), pending.end(), [](const json* a, const json* b) {
    return get<double>(*a, "age_s", 0.0) > get<double>(*b, "age_s", 0.0);
  });
  for (std::size_t i = 0; i < pending.size() && i < kShownPending; ++i) {
    out += "    " + waiting_for(*pending[i]) + "\n";
    const int peer = get<int>(*pending[i], "peer", -1);
    if (peer >= 0) waited_on.insert(peer);
  }
  if (pending.size() > kShownPending) {
    out += "    ... and " + std::to_string(pending.size() - kShownPending) +
           " more in flight (younger)\n";
  }
  if (pending.empty()) out += "    nothing in flight\n";
}

}  // namespace

std::string format_flight(const fs::path& run_dir, const std::string& launch_id) {
  const fs::path dir = run_dir / "flight";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::map<int, RankDumps> ranks;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("rank-", 0) != 0 || entry.path().extension() != ".jsonl") continue;
    const std::string number = name.substr(5, name.size() - 5 - 6);
    if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) continue;
    const int rank = std::stoi(number);
    ranks[rank] = read_rank(entry.path(), rank);
  }
  std::string out;
  std::set<int> waited_on, dumped;
  std::map<int, std::string> names;
  for (const auto& [rank, rd] : ranks) {
    std::string launch = launch_id;
    if (launch.empty() && !rd.dumps.empty())
      launch = get<std::string>(rd.dumps.back().head, "launch_id", "");
    std::vector<const Dump*> mine;
    for (const Dump& d : rd.dumps) {
      if (get<std::string>(d.head, "launch_id", "") == launch) mine.push_back(&d);
    }
    const Dump* d = telling(mine);
    if (d == nullptr) continue;
    dumped.insert(rank);
    describe_rank(rd, *d, mine.size(), out, waited_on);
    for (const json& e : d->lines) {
      const int peer = get<int>(e, "peer", -1);
      if (peer >= 0) names[peer] = peer_of(e);
    }
  }
  if (out.empty()) return "";
  std::string head = "flight recorder (" + dir.string() +
                     "/rank-<r>.jsonl; per rank its last dump at a deadline or on SIGUSR2):\n";
  std::string missing;
  for (const int r : waited_on) {
    if (dumped.count(r) == 0) missing += (missing.empty() ? "" : ", ") + names[r];
  }
  if (!missing.empty()) {
    out += "  waited for, and left no dump (stopped or dead?): " + missing + "\n";
  }
  return head + out;
}

}  // namespace syncopt::metrics
