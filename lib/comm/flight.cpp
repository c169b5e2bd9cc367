// The flight recorder (see flight.hpp).
#include "comm/flight.hpp"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "common/signals.hpp"

namespace syncopt::comm::flight {

namespace {

enum class What : std::uint8_t { kPosted, kDone, kCancelled };

struct Event {
  double t = 0.0;       // CLOCK_MONOTONIC seconds
  double posted = 0.0;  // kDone, kCancelled: when the operation was posted
  About a;
  Op op = Op::kSend;
  What what = What::kPosted;
};

// An operation in flight: its post, until done() or cancelled().
struct Pending {
  Event post;
  bool used = false;
};

struct Recorder {
  Setup setup;
  bool running = false;
  std::vector<Event> ring;  // sized once by start()
  std::size_t next = 0;     // where the next event goes
  std::uint64_t recorded = 0;
  std::vector<Pending> pending;
  std::vector<Ticket> free;
  int dumps = 0;
  double last_dump = -1e300;  // CLOCK_MONOTONIC seconds
  int signals_seen = 0;
  std::filesystem::path file;
};

Recorder& rec() {
  static Recorder r;  // one per process, i.e. per rank; only the role's thread uses it
  return r;
}

double mono_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

void push(Recorder& r, const Event& e) {
  r.ring[r.next] = e;
  r.next = (r.next + 1) % r.ring.size();
  ++r.recorded;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kSend:
      return "send";
    case Op::kRecv:
      return "recv";
    case Op::kCollective:
      return "collective";
  }
  return "?";
}

const char* what_name(What w) {
  switch (w) {
    case What::kPosted:
      return "posted";
    case What::kDone:
      return "done";
    case What::kCancelled:
      return "cancelled";
  }
  return "?";
}

std::string kind_text(Op op, std::uint16_t kind) {
  if (op == Op::kCollective) {
    switch (kind) {
      case kAllreduce:
        return "ALLREDUCE";
      case kAllgather:
        return "ALLGATHER";
      case kBarrier:
        return "BARRIER";
      default:
        return "?";
    }
  }
  return kind == 0 ? "?" : kind_name(kind);
}

// One event as a JSON line; times on the run's clock (`run_minus_mono`
// added to a monotonic time) and as an age at the dump (`t_dump`).
nlohmann::json event_json(const Recorder& r, const Event& e, double run_minus_mono, double t_dump) {
  nlohmann::json j;
  j["t"] = e.t + run_minus_mono;
  j["age_s"] = t_dump - e.t;
  j["event"] = what_name(e.what);
  j["op"] = op_name(e.op);
  j["peer"] = e.a.peer;
  if (e.a.peer >= 0 && r.setup.name_of) j["peer_name"] = r.setup.name_of(e.a.peer);
  j["tag"] = e.a.tag;
  j["kind"] = kind_text(e.op, e.a.kind);
  j["bucket"] = e.a.bucket;
  j["version"] = e.a.version;
  j["bytes"] = e.a.bytes;
  if (e.what != What::kPosted) j["waited_s"] = e.t - e.posted;
  if (e.op == Op::kRecv && e.a.after_kind != 0) {
    j["after"] = {{"kind", kind_text(e.op, e.a.after_kind)},
                  {"bucket", e.a.after_bucket},
                  {"version", e.a.after_version}};
  }
  return j;
}

std::string dump_text(const Recorder& r, const std::string& reason) {
  const double t_dump = mono_s();
  const double run_now = r.setup.now ? r.setup.now() : t_dump;
  const double shift = run_now - t_dump;
  std::vector<const Event*> in_flight;
  for (const Pending& p : r.pending) {
    if (p.used) in_flight.push_back(&p.post);
  }
  std::sort(in_flight.begin(), in_flight.end(),
            [](const Event* a, const Event* b) { return a->t < b->t; });
  const std::size_t n = std::min<std::uint64_t>(r.recorded, r.ring.size());
  nlohmann::json head = {{"dump", r.dumps + 1},
                         {"launch_id", r.setup.launch_id},
                         {"rank", r.setup.rank},
                         {"role", r.setup.role},
                         {"reason", reason},
                         {"t", run_now},
                         {"pending", in_flight.size()},
                         {"events", n},
                         {"recorded", r.recorded},
                         {"capacity", r.ring.size()}};
  std::string out = head.dump() + "\n";
  for (const Event* e : in_flight) {
    nlohmann::json j = event_json(r, *e, shift, t_dump);
    j["pending"] = true;
    out += j.dump() + "\n";
  }
  // Oldest first: the ring from `next` on, when it has wrapped.
  const std::size_t first = r.recorded > r.ring.size() ? r.next : 0;
  for (std::size_t i = 0; i < n; ++i) {
    out += event_json(r, r.ring[(first + i) % r.ring.size()], shift, t_dump).dump() + "\n";
  }
  return out;
}

}  // namespace

About about(const MsgHeader& h, int peer, int tag, std::uint64_t bytes) {
  About a;
  a.peer = peer;
  a.tag = tag;
  a.kind = h.kind;
  a.bucket = h.bucket;
  a.version = h.param_version;
  a.bytes = bytes;
  return a;
}

bool on() { return rec().running; }

Ticket posted(Op op, const About& a) {
  Recorder& r = rec();
  if (!r.running) return kNone;
  Event e;
  e.t = mono_s();
  e.posted = e.t;
  e.a = a;
  e.op = op;
  push(r, e);
  Ticket t;
  if (!r.free.empty()) {
    t = r.free.back();
    r.free.pop_back();
  } else {
    t = static_cast<Ticket>(r.pending.size());
    r.pending.emplace_back();
  }
  r.pending[t] = {e, true};
  return t;
}

namespace {

void finish(Ticket t, What what, const MsgHeader* h, std::uint64_t bytes) {
  Recorder& r = rec();
  if (!r.running || t == kNone || t >= r.pending.size() || !r.pending[t].used) return;
  Pending& p = r.pending[t];
  Event e = p.post;
  e.posted = p.post.t;
  e.t = mono_s();
  e.what = what;
  if (h != nullptr) {
    e.a.kind = h->kind;
    e.a.bucket = h->bucket;
    e.a.version = h->param_version;
  }
  if (bytes != 0) e.a.bytes = bytes;
  push(r, e);
  p.used = false;
  r.free.push_back(t);
}

}  // namespace

void done(Ticket t, const MsgHeader* h, std::uint64_t bytes) { finish(t, What::kDone, h, bytes); }

void cancelled(Ticket t) { finish(t, What::kCancelled, nullptr, 0); }

void start(Setup setup) {
  Recorder& r = rec();
  r = Recorder{};
  if (setup.events == 0) return;
  r.ring.resize(setup.events);
  r.pending.reserve(64);
  r.free.reserve(64);
  r.file = setup.run_dir / "flight" / ("rank-" + std::to_string(setup.rank) + ".jsonl");
  r.setup = std::move(setup);
  r.signals_seen = dump_requests();
  r.running = true;
}

void stop() {
  Recorder& r = rec();
  r.running = false;
}

bool dump(const std::string& reason) {
  Recorder& r = rec();
  if (!r.running) return false;
  try {
    const std::string text = dump_text(r, reason);
    std::filesystem::create_directories(r.file.parent_path());
    // One write of the whole dump, appended: earlier dumps are kept.
    std::FILE* f = std::fopen(r.file.c_str(), "ab");
    if (f == nullptr) throw std::runtime_error("cannot open for appending");
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    const bool closed = std::fclose(f) == 0;
    if (!ok || !closed) throw std::runtime_error("write failed (a full disk?)");
    ++r.dumps;
    r.last_dump = mono_s();
    spdlog::debug("flight recorder: dump {} ({}) to {}", r.dumps, reason, r.file.string());
    return true;
  } catch (const std::exception& e) {
    spdlog::warn("flight recorder: could not write {}: {}", r.file.string(), e.what());
    return false;
  }
}

bool dump_unless_recent(const std::string& reason, double quiet_s) {
  if (mono_s() - rec().last_dump < quiet_s) return false;
  return dump(reason);
}

void poll_signal() {
  Recorder& r = rec();
  if (!r.running) return;
  const int n = dump_requests();
  if (n == r.signals_seen) return;
  r.signals_seen = n;
  (void)dump("SIGUSR2");
}

std::filesystem::path dumped_to() {
  const Recorder& r = rec();
  return r.dumps > 0 ? r.file : std::filesystem::path{};
}

std::string ending_note() {
  const Recorder& r = rec();
  if (r.dumps == 0) return "";
  return "flight recorder: what each rank last sent and received, and waited for, is in " +
         r.file.parent_path().string() + "/rank-*.jsonl (syncopt report " +
         r.setup.run_dir.string() + ")";
}

}  // namespace syncopt::comm::flight
