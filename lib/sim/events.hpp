// The event queue of the simulation: events in time order, ties in the order
// they were scheduled (first in, first out), so that a simulation is
// deterministic. O(log E) per push and pop.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/error.hpp"

namespace syncopt::sim {

enum class EventKind : std::uint8_t {
  kPullArrives,   // a worker's first pull (any version) reaches a shard
  kGradArrives,   // a gradient slice (which also asks for newer parameters) reaches a shard
  kBatchDone,     // a shard finished a pass of its loop (its updates): it answers
  kPoll,          // an idle shard's loop tests its receives (after a back-off sleep)
  kDeadline,      // timeout mode: a step's deadline at a shard
  kReplyArrives,  // parameters or STOP reach a worker
  kWorkerSends,   // a worker finished computing (and its straggler delay): it sends
  kDecision,      // agreeing shards: shard 0's choice of workers for a version reaches a follower
  kParamsArrive,  // fair links, pipelined: a bucket of parameters (not the last) reaches a worker
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
  std::int32_t bucket = -1;   // worker sends, params: the bucket of a pipelined exchange (-1: all)
  std::uint64_t oldest =
      ~std::uint64_t{0};  // grad: the oldest version the worker held of any shard
};

// A 4-ary min-heap of 16-byte keys (time, then the order of pushing) over
// runs of events: a run is a batch pushed at once in time order (a shard's
// replies leave one after another over its link; a worker sends its slices
// one after another), and only its next event is in the heap. The order of
// popping is exactly that of pushing every event on its own (a run's next
// event never precedes its head), but the heap holds one key per run, not
// per event: at a thousand workers and ten shards, ~1000 keys instead of
// ~20000, and the sifting that was most of the simulation's time is short.
class EventQueue {
 public:
  void push(const Event& e) {
    begin_run(1)[0] = e;
    end_run();
  }
  // Pushes a batch of events in time order: fill the `count` events
  // returned, then call end_run() before anything else touches the queue.
  Event* begin_run(std::size_t count) {
    m_batch.assign(count, Event{});
    return m_batch.data();
  }
  void end_run() {
    // The callers' batches are in time order; an event earlier than the one
    // before it would start a run of its own (a safeguard, never needed).
    std::size_t from = 0;
    for (std::size_t i = 0; i < m_batch.size(); ++i) {
      m_batch[i].order = m_next++;
      if (i + 1 == m_batch.size() || m_batch[i + 1].t < m_batch[i].t) {
        add_run(from, i + 1);
        from = i + 1;
      }
    }
  }
  Event pop() {
    const auto id = static_cast<std::uint32_t>(m_heap.front().order_id & kIdMask);
    Run& run = m_runs[id];
    const Event e = run.events[run.next++];
    if (run.next < run.events.size()) {
      m_heap.front() = key_of(id);  // the run's next event: not before this one
    } else {
      // A long run's buffer is not kept for the single events that reuse it.
      if (run.events.capacity() > kKeepCapacity) std::vector<Event>().swap(run.events);
      m_free.push_back(id);
      m_heap.front() = m_heap.back();
      m_heap.pop_back();
    }
    if (!m_heap.empty()) sift_down(0);
    return e;
  }
  bool empty() const { return m_heap.empty(); }
  // The time of the next event (empty: infinity).
  double next_t() const {
    if (m_heap.empty()) return std::numeric_limits<double>::infinity();
    const Run& run = m_runs[static_cast<std::uint32_t>(m_heap.front().order_id & kIdMask)];
    return run.events[run.next].t;
  }
  std::uint64_t pushed() const { return m_next; }

 private:
  static constexpr std::size_t kKeepCapacity = 64;
  static constexpr int kIdBits = 24;  // up to 16M runs at once; 2^40 events in all
  static constexpr std::uint64_t kIdMask = (std::uint64_t{1} << kIdBits) - 1;
  // The time's bits, then the order of pushing above the run's id: for
  // times >= 0 (every simulated time is) the bits of a double order as its
  // value, so integer comparisons order by time, then first in first out.
  struct Key {
    std::uint64_t time_bits, order_id;
    bool before(const Key& o) const {
      return time_bits != o.time_bits ? time_bits < o.time_bits : order_id < o.order_id;
    }
  };
  struct Run {
    std::vector<Event> events;  // its capacity is kept when the run is reused
    std::size_t next = 0;
  };
  void add_run(std::size_t from, std::size_t to) {
    std::uint32_t id;
    if (!m_free.empty()) {
      id = m_free.back();
      m_free.pop_back();
    } else {
      id = static_cast<std::uint32_t>(m_runs.size());
      m_runs.emplace_back();
    }
    Run& run = m_runs[id];
    run.events.assign(m_batch.begin() + static_cast<std::ptrdiff_t>(from),
                      m_batch.begin() + static_cast<std::ptrdiff_t>(to));
    run.next = 0;
    m_heap.push_back(key_of(id));
    std::size_t i = m_heap.size() - 1;
    const Key k = m_heap[i];
    while (i > 0) {
      const std::size_t parent = (i - 1) / 4;
      if (!k.before(m_heap[parent])) break;
      m_heap[i] = m_heap[parent];
      i = parent;
    }
    m_heap[i] = k;
  }
  Key key_of(std::uint32_t id) const {
    const Event& e = m_runs[id].events[m_runs[id].next];
    if (!(e.t >= 0.0)) {
      throw InternalError("simulation: an event at time " + std::to_string(e.t) +
                          " (times start at 0 and only grow)");
    }
    const double t = e.t + 0.0;  // -0.0 -> +0.0
    std::uint64_t tbits;
    std::memcpy(&tbits, &t, sizeof tbits);
    return {tbits, (e.order << kIdBits) | id};
  }
  void sift_down(std::size_t i) {
    const Key k = m_heap[i];
    const std::size_t n = m_heap.size();
    for (;;) {
      const std::size_t first = 4 * i + 1;
      if (first >= n) break;
      std::size_t best = first;
      const std::size_t last = std::min(first + 4, n);
      for (std::size_t c = first + 1; c < last; ++c) {
        if (m_heap[c].before(m_heap[best])) best = c;
      }
      if (!m_heap[best].before(k)) break;
      m_heap[i] = m_heap[best];
      i = best;
    }
    m_heap[i] = k;
  }
  std::vector<Key> m_heap;
  std::vector<Run> m_runs;
  std::vector<std::uint32_t> m_free;
  std::vector<Event> m_batch;  // the run being pushed
  std::uint64_t m_next = 0;
};

}  // namespace syncopt::sim
