// What a worker and the evaluator do with their liveness watch: neither can
// go on without every shard (docs/design.md §10).
#pragma once

#include <string>
#include <vector>

#include "comm/liveness.hpp"
#include "comm/peers.hpp"
#include "comm/requests.hpp"
#include "common/error.hpp"

namespace syncopt::comm {

// A shard found silent: which one, for the rank that ends on it to tell
// whether shard 0 reports it (a shard other than 0: this rank says one line).
class ShardLostError : public UnavailableError {
 public:
  ShardLostError(int shard, const std::string& m) : UnavailableError(m), m_shard(shard) {}
  int shard() const noexcept { return m_shard; }

 private:
  int m_shard;
};

// A shard silent past cluster.dead_after_s: ShardLostError (69), the sends
// to it cancelled (kept, never waited for). A shard's ENDING notice:
// EndedByPeerError with its code, one line. `who` begins the message
// ("worker 3", "the evaluator").
void check_shards(Watch& watch, SendQueue& sends, const std::vector<Peer>& peers,
                  const std::string& who, double now);

}  // namespace syncopt::comm
