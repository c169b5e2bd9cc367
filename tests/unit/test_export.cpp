// The CSV export's text (metrics::to_csv) and what the report says of a run
// that was not evaluated (metrics::analyze, format_report).
#include <catch2/catch.hpp>

#include "metrics/analysis.hpp"
#include "metrics/export.hpp"

using nlohmann::json;
namespace m = syncopt::metrics;

TEST_CASE("to_csv puts the documented columns first and quotes as RFC 4180", "[export]") {
  const std::vector<json> rows = {
      {{"step", 1}, {"zeta", "a,b"}, {"loss", 0.5}, {"ok", true}},
      {{"step", 2}, {"alpha", "say \"hi\""}, {"loss", nullptr}, {"ok", false}},
  };
  const std::string csv = m::to_csv(rows, {"step", "loss", "missing"});
  CHECK(csv ==
        "step,loss,alpha,ok,zeta\n"
        "1,0.5,,true,\"a,b\"\n"
        "2,,\"say \"\"hi\"\"\",false,\n");
  CHECK(m::to_csv({}, {"step"}) == "\n");
}

TEST_CASE("a run that was not evaluated has null results and the report says so", "[export]") {
  m::RunInfo info;
  info.mode = syncopt::config::Mode::kLocal;
  info.evaluated = false;
  info.test_acc = 0.5;  // whatever is there is not a result
  const auto an = m::analyze({}, info);
  CHECK(an.summary["test_acc"].is_null());
  CHECK(an.summary["test_loss_ema"].is_null());
  const std::string text = m::format_report(an, {}, "killed: no summary.json");
  CHECK(text.rfind("INCOMPLETE: killed: no summary.json\n", 0) == 0);
  CHECK(text.find("final test accuracy: not evaluated (the run did not complete)") !=
        std::string::npos);
  CHECK(m::run_info_from_summary(an.summary).evaluated == false);

  info.evaluated = true;
  const auto done = m::analyze({}, info);
  CHECK(done.summary["test_acc"] == 0.5);
  CHECK(m::format_report(done, {}).find("theta 50.00%") != std::string::npos);
  CHECK(m::run_info_from_summary(done.summary).evaluated);
  // An older summary of a run that did not complete wrote 0 and said so.
  json old = done.summary;
  old["final_eval"] = "none: the run did not complete";
  CHECK_FALSE(m::run_info_from_summary(old).evaluated);
}
