// The event heap of the simulation: events in time order, ties in the order
// they were scheduled (first in, first out), so that a simulation is
// deterministic. O(log E) per push and pop.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

namespace syncopt::sim {

enum class EventKind : std::uint8_t {
  kPullArrives,   // a worker's first pull (any version) reaches a shard
  kGradArrives,   // a gradient slice (which also asks for newer parameters) reaches a shard
  kBatchDone,     // a shard finished a pass of its loop (its updates): it answers
  kPoll,          // an idle shard's loop tests its receives (after a back-off sleep)
  kDeadline,      // timeout mode: a step's deadline at a shard
  kReplyArrives,  // parameters or STOP reach a worker
  kWorkerSends,   // a worker finished computing (and its straggler delay): it sends
};

struct Event {
  double t = 0.0;
  std::uint64_t order = 0;  // set by the queue
  EventKind kind = EventKind::kGradArrives;
  bool stop = false;  // reply: STOP
  std::int32_t shard = 0;
  std::int32_t worker = 0;
  std::uint64_t version = 0;  // grad: version read; reply: version sent; deadline: the step's
  std::uint64_t seq = 0;      // grad: the worker's gradient counter
  double compute_s = 0.0;     // grad: the worker's compute time
  std::int32_t group = 1;     // reply: workers answered in the same pass
};

class EventQueue {
 public:
  void push(Event e) {
    e.order = m_next++;
    m_heap.push(e);
  }
  Event pop() {
    Event e = m_heap.top();
    m_heap.pop();
    return e;
  }
  bool empty() const { return m_heap.empty(); }
  std::uint64_t pushed() const { return m_next; }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.t != b.t ? a.t > b.t : a.order > b.order;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> m_heap;
  std::uint64_t m_next = 0;
};

}  // namespace syncopt::sim
