// Part names and the params layout of a checkpoint (see parts.hpp).
#include "checkpoint/parts.hpp"

#include "common/error.hpp"

namespace syncopt::checkpoint {

namespace {

constexpr const char* kTheta = "theta";
constexpr const char* kOptim = "optim";
constexpr const char* kEma = "ema";

}  // namespace

std::string shard_part(int shard) { return "shard" + std::to_string(shard); }
std::string worker_part(int worker) { return "worker" + std::to_string(worker); }
std::string rank_part(int rank) { return "rank" + std::to_string(rank); }

void put_params(State& into, const std::vector<float>& theta, State optim,
                std::optional<State> ema) {
  into.put(kTheta, theta);
  into.put_child(kOptim, std::move(optim));
  if (ema) into.put_child(kEma, std::move(*ema));
}

ParamsPart get_params(const State& s, std::size_t count, bool with_ema,
                      const std::string& what_differs) {
  ParamsPart p;
  p.theta = s.get<std::vector<float>>(kTheta);
  if (p.theta.size() != count) {
    throw ConfigError(s.field_error(kTheta, std::to_string(p.theta.size()) +
                                                " parameters were saved, " + std::to_string(count) +
                                                " are expected now: resume with the same " +
                                                what_differs));
  }
  p.optim = s.child(kOptim);
  if (with_ema != s.has(kEma)) {
    throw ConfigError(s.field_error(kEma, with_ema ? "no EMA was saved, and optim.ema is on now"
                                                   : "an EMA was saved, and optim.ema = 0 now") +
                      ": resume with the same optim.ema");
  }
  if (with_ema) p.ema = s.child(kEma);
  return p;
}

}  // namespace syncopt::checkpoint
