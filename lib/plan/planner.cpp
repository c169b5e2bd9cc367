// Choosing N and b (see planner.hpp).
#include "plan/planner.hpp"

#include <cstdio>
#include <set>

#include "common/error.hpp"

namespace syncopt::plan {

ItersModel fit_iters(const std::vector<std::pair<int, double>>& points) {
  std::set<int> distinct;
  for (const auto& p : points) distinct.insert(p.first);
  if (distinct.size() < 2) {
    throw DataError("I(N) = a + c/N needs the updates to the target at two or more distinct N (" +
                    std::to_string(distinct.size()) +
                    " found): give runs at several N, or the model with --iters a,c");
  }
  // Linear least squares in x = 1/N: I = a + c x.
  double sx = 0.0, sy = 0.0, sxx = 0.0, sxy = 0.0;
  for (const auto& [n, iters] : points) {
    const double x = 1.0 / static_cast<double>(n);
    sx += x;
    sy += iters;
    sxx += x * x;
    sxy += x * iters;
  }
  const double m = static_cast<double>(points.size());
  ItersModel out;
  out.c = (m * sxy - sx * sy) / (m * sxx - sx * sx);
  out.a = (sy - out.c * sx) / m;
  out.points = points;
  out.source = "least squares over " + std::to_string(points.size()) + " runs";
  return out;
}

Plan choose(int workers, const std::map<int, double>& step_s, const ItersModel& iters) {
  Plan plan;
  plan.workers = workers;
  plan.iters = iters;
  for (const auto& [n, t] : step_s) {
    if (n < 1 || n > workers) continue;
    Row r;
    r.n = n;
    r.b = workers - n;
    r.step_s = t;
    r.iters = iters.at(n);
    r.time_s = r.iters * t;
    plan.rows.push_back(r);
    if (plan.rows.size() == 1 || r.time_s <= plan.best.time_s) plan.best = r;
  }
  if (plan.rows.empty()) {
    throw DataError("no step time T(N, b) for any N in 1.." + std::to_string(workers) +
                    ": give runs or a simulation with " + std::to_string(workers) + " workers");
  }
  return plan;
}

nlohmann::json to_json(const Plan& plan) {
  const auto row = [](const Row& r) {
    return nlohmann::json{
        {"N", r.n}, {"b", r.b}, {"step_s", r.step_s}, {"iters", r.iters}, {"time_s", r.time_s}};
  };
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : plan.rows) rows.push_back(row(r));
  nlohmann::json points = nlohmann::json::array();
  for (const auto& [n, i] : plan.iters.points) points.push_back({{"N", n}, {"iters", i}});
  return {{"workers", plan.workers},
          {"target_acc", plan.target_acc},
          {"iters_model",
           {{"formula", "I(N) = a + c / N"},
            {"a", plan.iters.a},
            {"c", plan.iters.c},
            {"source", plan.iters.source},
            {"points", points}}},
          {"step_source", plan.step_source},
          {"rows", rows},
          {"best", row(plan.best)}};
}

std::string format(const Plan& plan) {
  std::string out;
  char buf[200];
  std::snprintf(buf, sizeof(buf), "K = %d workers; I(N) = %.6g + %.6g / N (%s)\nT(N, b): %s\n",
                plan.workers, plan.iters.a, plan.iters.c, plan.iters.source.c_str(),
                plan.step_source.c_str());
  out += buf;
  out += "     N     b   T(N,b) s      I(N)     time s       time h\n";
  for (const auto& r : plan.rows) {
    std::snprintf(buf, sizeof(buf), "  %4d  %4d  %9.4f  %8.0f  %9.0f  %11.2f%s\n", r.n, r.b,
                  r.step_s, r.iters, r.time_s, r.time_s / 3600.0,
                  r.n == plan.best.n ? "   <- best" : "");
    out += buf;
  }
  std::snprintf(buf, sizeof(buf),
                "best: N = %d, b = %d: %.0f updates of %.4f s, %.2f h to the target\n", plan.best.n,
                plan.best.b, plan.best.iters, plan.best.step_s, plan.best.time_s / 3600.0);
  out += buf;
  return out;
}

}  // namespace syncopt::plan
