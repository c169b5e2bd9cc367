// A worker's or the evaluator's view of the shards' liveness (see shard_watch.hpp).
#include "comm/shard_watch.hpp"

#include "comm/protocol.hpp"

namespace syncopt::comm {

void check_shards(Watch& watch, SendQueue& sends, const std::vector<Peer>& peers,
                  const std::string& who, double now) {
  for (const int dead : watch.poll(now)) {
    sends.cancel_to(dead);  // what it will never take (kept, not waited for)
    throw ShardLostError(dead, who + ": shard " + std::to_string(dead) + " (" +
                                   describe_rank(peers, dead) + ") has been silent for " +
                                   std::to_string(static_cast<int>(now - watch.last_heard(dead))) +
                                   "s: the run cannot go on without it");
  }
  for (const auto& n : watch.notices()) {
    if (n.kind != Kind::kEnding) continue;
    throw EndedByPeerError(static_cast<ExitCode>(n.code),
                           "ends with exit " + std::to_string(n.code) + ": shard " +
                               std::to_string(n.from) + " (" + describe_rank(peers, n.from) +
                               ") ended the run; see its message");
  }
}

}  // namespace syncopt::comm
