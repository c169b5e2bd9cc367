// What a worker and the evaluator do with their liveness watch: neither can
// go on without every shard (docs/design.md §10).
#pragma once

#include <string>
#include <vector>

#include "comm/liveness.hpp"
#include "comm/peers.hpp"
#include "comm/requests.hpp"

namespace syncopt::comm {

// A shard silent past cluster.dead_after_s: UnavailableError (69), the sends
// to it cancelled (kept, never waited for). A shard's ENDING notice:
// EndedByPeerError with its code, one line. `who` begins the message
// ("worker 3", "the evaluator").
void check_shards(Watch& watch, SendQueue& sends, const std::vector<Peer>& peers,
                  const std::string& who, double now);

}  // namespace syncopt::comm
