// Resuming on another shape (see reshape.hpp).
#include "train/reshape.hpp"

#include <algorithm>
#include <optional>
#include <random>
#include <sstream>

#include "checkpoint/parts.hpp"
#include "common/error.hpp"
#include "common/seed.hpp"
#include "data/dataset.hpp"

namespace syncopt::train {

namespace fs = std::filesystem;
using checkpoint::State;

namespace {

// One field of `from` copied into `to`, whatever its kind.
void copy_field(const State& from, State& to, const std::string& name) {
  const std::string kind = from.kind_of(name);
  if (kind == "u64") to.put(name, from.get<std::uint64_t>(name));
  if (kind == "i64") to.put(name, from.get<std::int64_t>(name));
  if (kind == "f64") to.put(name, from.get<double>(name));
  if (kind == "string") to.put(name, from.get<std::string>(name));
  if (kind == "float array") to.put(name, from.get<std::vector<float>>(name));
  if (kind == "u64 array") to.put(name, from.get<std::vector<std::uint64_t>>(name));
  if (kind == "i64 array") to.put(name, from.get<std::vector<std::int64_t>>(name));
  if (kind == "child state") to.put_child(name, from.child(name));
}

// The float buffer `field` of child `child` ("" = the part itself) of every
// old shard, end to end: the whole vector, as the old slices held it.
std::vector<float> joined(const std::vector<const State*>& shards, const std::string& child,
                          const std::string& field) {
  std::vector<float> out;
  for (const State* s : shards) {
    const State& holder = child.empty() ? *s : s->child(child);
    const auto& v = holder.get<std::vector<float>>(field);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<float> cut(const std::vector<float>& all, const layout::Slice& s) {
  return {all.begin() + static_cast<std::ptrdiff_t>(s.offset),
          all.begin() + static_cast<std::ptrdiff_t>(s.offset + s.count)};
}

// The old shards' parameter state, whole.
struct Whole {
  std::vector<float> theta, mom, ms, avg;
  bool has_ms = false, has_ema = false;
};

Whole whole_params(const std::vector<const State*>& shards, std::size_t count) {
  Whole w;
  w.theta = joined(shards, "", "theta");
  w.mom = joined(shards, "optim", "mom");
  w.has_ms = shards[0]->child("optim").has("ms");
  if (w.has_ms) w.ms = joined(shards, "optim", "ms");
  w.has_ema = shards[0]->has("ema");
  if (w.has_ema) w.avg = joined(shards, "ema", "avg");
  const auto bad = [&](const std::vector<float>& v) { return v.size() != count; };
  if (bad(w.theta) || bad(w.mom) || (w.has_ms && bad(w.ms)) || (w.has_ema && bad(w.avg))) {
    throw ConfigError("cannot resume on another shape: the checkpoint's shards hold " +
                      std::to_string(w.theta.size()) + " parameters together, the model has " +
                      std::to_string(count) + ": resume with the same model");
  }
  return w;
}

// New shard `s`'s part: its slice of everything, shard 0's counters.
State shard_part(const std::vector<const State*>& old, const Whole& w,
                 const std::vector<layout::Slice>& slices, int s, int new_workers) {
  const State& s0 = *old[0];
  const auto& slice = slices[static_cast<std::size_t>(s)];
  State optim;
  const State& o0 = s0.child("optim");
  for (const auto& name : o0.names()) {
    if (name == "count") {
      optim.put("count", std::uint64_t{slice.count});
    } else if (name == "mom") {
      optim.put("mom", cut(w.mom, slice));
    } else if (name == "ms") {
      optim.put("ms", cut(w.ms, slice));
    } else {
      copy_field(o0, optim, name);
    }
  }
  std::optional<State> ema;
  if (w.has_ema) {
    const State& e0 = s0.child("ema");
    ema.emplace();
    ema->put("decay", e0.get<double>("decay"));
    ema->put("count", std::uint64_t{slice.count});
    ema->put("updates", e0.get<std::uint64_t>("updates"));
    ema->put("avg", cut(w.avg, slice));
  }
  State part;
  checkpoint::put_params(part, cut(w.theta, slice), std::move(optim), std::move(ema));
  // The counters per worker: kept for the workers that keep their number.
  const State& c0 = s0.child("core");
  auto drops = c0.get<std::vector<std::int64_t>>("drops");
  auto clocks = c0.get<std::vector<std::int64_t>>("clocks");
  const std::int64_t slowest = clocks.empty() ? 0 : *std::min_element(clocks.begin(), clocks.end());
  drops.resize(static_cast<std::size_t>(new_workers), 0);
  clocks.resize(static_cast<std::size_t>(new_workers), slowest);
  State core;
  core.put("version", c0.get<std::uint64_t>("version"));  // every bucket at it
  core.put("drops", std::move(drops));
  core.put("clocks", std::move(clocks));
  part.put_child("core", std::move(core));
  const auto mine =
      static_cast<std::size_t>(s) < old.size() ? old[static_cast<std::size_t>(s)] : &s0;
  part.put("examples", mine->get<std::uint64_t>("examples"));
  part.put("wall_s", s0.get<double>("wall_s"));
  if (s == 0) {
    for (const char* f : {"steps_bytes", "eval_bytes"}) {
      if (s0.has(f)) copy_field(s0, part, f);
    }
  } else {
    part.put("records", std::string());
  }
  return part;
}

// Every old shard's step records not yet in steps.jsonl (shards other than
// 0 keep theirs in memory): each new shard s >= 1 takes those of old shard
// s, the last one (or shard 0, which appends them to the file: field
// "records_to_append") those of the old shards past the new count.
void hand_over_records(const std::vector<const State*>& old, std::vector<State*>& fresh) {
  const std::size_t last = fresh.size() - 1;
  std::string orphans;
  for (std::size_t s = 1; s < old.size(); ++s) {
    const std::string& lines = old[s]->get<std::string>("records");
    if (s < fresh.size()) {
      State& to = *fresh[s];
      State rebuilt;
      for (const auto& name : to.names()) {
        if (name == "records") {
          rebuilt.put("records", lines);
        } else {
          copy_field(to, rebuilt, name);
        }
      }
      to = std::move(rebuilt);
    } else {
      orphans += lines;
    }
  }
  if (orphans.empty()) return;
  State& to = *fresh[last];
  if (last == 0) {
    to.put("records_to_append", orphans);
    return;
  }
  State rebuilt;
  for (const auto& name : to.names()) {
    if (name == "records") {
      rebuilt.put("records", to.get<std::string>("records") + orphans);
    } else {
      copy_field(to, rebuilt, name);
    }
  }
  to = std::move(rebuilt);
}

// The samplers of the old readers, a lost one's rebuilt from the gradients
// shard 0 counted from it (`taken`: batches it took; nullopt: not known).
std::vector<State> old_samplers(const checkpoint::Checkpoint& all, const Shape& shape, int readers,
                                std::string (*part_name)(int),
                                const std::vector<std::int64_t>& taken) {
  std::vector<State> out;
  for (int r = 0; r < readers; ++r) {
    const std::string name = part_name(r);
    if (all.has_part(name)) {
      out.push_back(all.part(name).child("loader").child("sampler"));
      continue;
    }
    if (static_cast<std::size_t>(r) >= taken.size()) {
      throw DataError("checkpoint " + all.dir.string() + " has no part " + name +
                      " and nothing says how far that reader came: it cannot resume on another "
                      "shape");
    }
    data::EpochSampler sampler(shape.train_count, shape.seed, r, readers);
    sampler.skip(static_cast<std::uint64_t>(taken[static_cast<std::size_t>(r)]) *
                 static_cast<std::uint64_t>(shape.batch));
    out.push_back(sampler.state());
  }
  return out;
}

// A new reader's loader: its continued sampler and an augmentation RNG,
// the old reader's of the same number when there was one, else seeded by
// the run's seed, the reader and the step.
State loader_part(const checkpoint::Checkpoint& all, const std::string& old_name, State sampler,
                  const Shape& shape, int reader, std::uint64_t step) {
  State loader;
  loader.put_child("sampler", std::move(sampler));
  if (all.has_part(old_name)) {
    loader.put("rng", all.part(old_name).child("loader").get<std::string>("rng"));
  } else {
    std::ostringstream rng;
    rng << std::mt19937_64(
        mix_seed(mix_seed(shape.seed, static_cast<std::uint64_t>(reader)), step));
    loader.put("rng", rng.str());
  }
  State part;
  if (all.has_part(old_name) && all.part(old_name).has("step")) {
    part.put("step", all.part(old_name).get<std::uint64_t>("step"));
  } else if (old_name.starts_with("worker")) {
    part.put("step", std::uint64_t{0});
  }
  part.put_child("loader", std::move(loader));
  return part;
}

bool wanted_part(const std::vector<std::string>& wanted, const std::string& name) {
  return std::find(wanted.begin(), wanted.end(), name) != wanted.end();
}

void reshape_shards(const checkpoint::Checkpoint& all, const Shape& shape, int old_shards,
                    const std::vector<std::string>& wanted, checkpoint::Checkpoint& out) {
  const auto& roles = *shape.roles;
  std::vector<const State*> old;
  for (int s = 0; s < old_shards; ++s) old.push_back(&all.part(checkpoint::shard_part(s)));
  for (const State* s : old) {
    if (s->child("core").get<std::uint64_t>("version") !=
        old[0]->child("core").get<std::uint64_t>("version")) {
      throw DataError("checkpoint " + all.dir.string() +
                      ": its shards saved different versions; it cannot resume on another shape");
    }
  }
  std::size_t count = 0;
  for (const auto& g : shape.groups) count = std::max(count, g.offset + g.count);
  const Whole w = whole_params(old, count);
  const auto slices = layout::balanced_slices(shape.groups, roles.shards);
  std::vector<State> fresh;
  for (int s = 0; s < roles.shards; ++s)
    fresh.push_back(shard_part(old, w, slices, s, roles.workers));
  std::vector<State*> ptrs;
  for (auto& f : fresh) ptrs.push_back(&f);
  hand_over_records(old, ptrs);
  for (int s = 0; s < roles.shards; ++s) {
    if (wanted_part(wanted, checkpoint::shard_part(s)))
      out.parts.emplace_back(checkpoint::shard_part(s),
                             std::move(fresh[static_cast<std::size_t>(s)]));
  }
}

void reshape_readers(const checkpoint::Checkpoint& all, const Shape& shape, int old_readers,
                     bool ps, const std::vector<std::string>& wanted, checkpoint::Checkpoint& out) {
  std::vector<std::int64_t> taken;
  if (ps)
    taken =
        all.part(checkpoint::shard_part(0)).child("core").get<std::vector<std::int64_t>>("clocks");
  std::string (*name)(int) = ps ? &checkpoint::worker_part : &checkpoint::rank_part;
  const auto fresh =
      data::continue_on(old_samplers(all, shape, old_readers, name, taken), shape.roles->workers);
  for (int r = 0; r < shape.roles->workers; ++r) {
    const std::string part = name(r);
    if (!wanted_part(wanted, part)) continue;
    out.parts.emplace_back(
        part, loader_part(all, part, fresh[static_cast<std::size_t>(r)], shape, r, all.step));
  }
}

}  // namespace

nlohmann::json saved_layout(const checkpoint::Manifest& m) {
  if (!m.run.is_object() || !m.run.contains("layout") || !m.run["layout"].is_object())
    return nullptr;
  return m.run["layout"];
}

bool other_shape(const nlohmann::json& saved, const layout::Roles& roles) {
  if (!saved.is_object()) return false;
  return saved.value("world", 0) != roles.world || saved.value("shards", 0) != roles.shards ||
         saved.value("workers", 0) != roles.workers;
}

checkpoint::Checkpoint reshape(const checkpoint::Checkpoint& all, const Shape& shape,
                               const std::vector<std::string>& wanted) {
  const auto& roles = *shape.roles;
  const nlohmann::json saved = saved_layout(all.manifest);
  const std::string mode = saved.value("mode", std::string());
  const bool evaluator = !saved.value("evaluator_rank", nlohmann::json()).is_null();
  if ((saved.value("shards", 0) > 0) != (roles.shards > 0) ||
      evaluator != (roles.evaluator_rank >= 0)) {
    throw ConfigError("checkpoint " + all.dir.string() + " was saved by " + mode +
                      " with another kind of layout (parameter servers, an evaluator): it resumes "
                      "on another number of shards and workers only");
  }
  checkpoint::Checkpoint out;
  out.step = all.step;
  out.dir = all.dir;
  out.manifest = all.manifest;
  const bool ps = roles.shards > 0;
  if (ps) reshape_shards(all, shape, saved.value("shards", 0), wanted, out);
  reshape_readers(all, shape, saved.value("workers", 0), ps, wanted, out);
  for (const char* same : {checkpoint::kEvaluatorPart, checkpoint::kRunPart}) {
    if (wanted_part(wanted, same) && all.has_part(same))
      out.parts.emplace_back(same, all.part(same));
  }
  return out;
}

checkpoint::Checkpoint load_for_shape(const fs::path& run_dir, const Shape& shape,
                                      const std::vector<std::string>& wanted) {
  const auto step = checkpoint::latest_step(run_dir);
  if (!step) return checkpoint::load_latest(run_dir);  // 66: nothing to resume
  const auto manifest = checkpoint::read_manifest(run_dir, *step);
  if (!other_shape(saved_layout(manifest), *shape.roles)) {
    // A part a rank's role has no state for (a worker lost before the
    // save) is not required: load what exists.
    std::vector<std::string> present;
    for (const auto& e : manifest.files) {
      if (wanted_part(wanted, e.part)) present.push_back(e.part);
    }
    if (present.empty()) present.push_back(wanted.at(0));  // 65 naming it
    return checkpoint::load_latest(run_dir, present);
  }
  return reshape(checkpoint::load_latest(run_dir), shape, wanted);
}

}  // namespace syncopt::train
