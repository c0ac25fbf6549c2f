#include <kbrl/core/error.hpp>
#include <kbrl/eval/summary.hpp>

#include <boost/json.hpp>
#include <cmath>
#include <map>

#include "catch.hpp"

using namespace kbrl;
namespace json = boost::json;

namespace {
core::EvalResult result(const std::string& problem, bool compiled, bool correct, std::optional<double> speedup,
                        core::ErrorCategory category = core::ErrorCategory::none) {
  core::EvalResult r;
  r.problem_id = problem;
  r.format_ok = true;
  r.compiled = compiled;
  r.correct = correct;
  r.speedup = speedup;
  r.error_category = correct ? core::ErrorCategory::none : category;
  return r;
}
}  // namespace

TEST_CASE("pass at k matches the unbiased estimator") {
  CHECK(eval::pass_at_k(10, 0, 1) == 0.0);
  CHECK(eval::pass_at_k(10, 10, 5) == 1.0);
  CHECK(eval::pass_at_k(5, 1, 1) == Catch::Approx(0.2).epsilon(1e-12));
  // 1 - C(3,2)/C(5,2) = 1 - 3/10
  CHECK(eval::pass_at_k(5, 2, 2) == Catch::Approx(0.7).epsilon(1e-12));
  // n - c < k: at least one correct sample in every draw
  CHECK(eval::pass_at_k(4, 3, 2) == 1.0);
  CHECK_THROWS_AS(eval::pass_at_k(3, 1, 4), core::InvalidArgument);
  CHECK_THROWS_AS(eval::pass_at_k(3, 4, 1), core::InvalidArgument);
}

TEST_CASE("the summary counts rates and fast_p and the geometric mean of correct speedups") {
  std::vector<core::EvalResult> rs = {
      result("a", true, true, 2.0),
      result("a", true, true, 0.5),
      result("b", true, false, 3.0, core::ErrorCategory::correctness),  // fast but wrong: never counted
      result("b", false, false, std::nullopt, core::ErrorCategory::compile),
  };
  rs[3].static_findings.push_back({"try_except_fallback", "fallback", core::Severity::error, 3, "x"});
  const auto s = eval::summarize(rs);
  CHECK(s.total == 4);
  CHECK(s.compiled == 3);
  CHECK(s.correct == 2);
  CHECK(s.compile_rate == 0.75);
  CHECK(s.correct_rate == 0.5);
  CHECK(s.fast_p.at(0.0) == 0.5);
  CHECK(s.fast_p.at(1.0) == 0.25);
  CHECK(s.fast_p.at(2.0) == 0.0);  // strictly faster than 2x
  REQUIRE(s.geomean_speedup.has_value());
  CHECK(*s.geomean_speedup == Catch::Approx(1.0).epsilon(1e-12));  // sqrt(2 * 0.5)
  CHECK(s.pass_at_k.at(1) == Catch::Approx(0.5).epsilon(1e-12));  // a: 2/2 correct, b: 0/2
  CHECK(s.pass_at_k.at(2) == Catch::Approx(0.5).epsilon(1e-12));
  CHECK(s.by_error_category.at("none") == 2);
  CHECK(s.by_error_category.at("compile") == 1);
  CHECK(s.by_static_rule.at("try_except_fallback") == 1);
  const std::string table = eval::format_summary(s);
  CHECK(table.find("fast_1") != std::string::npos);
  CHECK(table.find("pass@2") != std::string::npos);
}

TEST_CASE("the summary does not depend on the order of the results") {
  // Speedups whose log-sum rounds differently in different orders: a resumed run reads results
  // back in file order, a fresh one collects them as they finish.
  std::vector<core::EvalResult> rs;
  for (int i = 0; i < 40; ++i) rs.push_back(result("p" + std::to_string(i % 7), true, true, 0.1 + 0.37 * i + 1e-3 * i * i));
  const auto forward = eval::summarize(rs);
  std::vector<core::EvalResult> reversed(rs.rbegin(), rs.rend());
  std::vector<core::EvalResult> interleaved;
  for (std::size_t i = 0; i < rs.size(); i += 2) interleaved.push_back(rs[i]);
  for (std::size_t i = 1; i < rs.size(); i += 2) interleaved.push_back(rs[i]);
  for (const auto& other : {reversed, interleaved}) {
    const auto s = eval::summarize(other);
    REQUIRE(s.geomean_speedup.has_value());
    CHECK(*s.geomean_speedup == *forward.geomean_speedup);  // bit for bit
    CHECK(eval::format_summary(s) == eval::format_summary(forward));
  }
}

namespace {
// The timed result of problem P, sample S: the reference runs in `ref` ms, the candidate in
// ref / speedup.
core::EvalResult timed(int problem, bool compiled, bool correct, double ref, double speedup) {
  core::EvalResult r = result(std::to_string(problem), compiled, correct, correct ? std::optional(speedup) : std::nullopt,
                              compiled ? core::ErrorCategory::correctness : core::ErrorCategory::compile);
  if (correct) {
    r.runtime = core::TimingStats{.mean_ms = ref / speedup};
    r.ref_runtime = core::TimingStats{.mean_ms = ref};
  }
  return r;
}
}  // namespace

TEST_CASE("eval_results.json in KernelBench's current layout reads as its analysis script reads it") {
  std::map<std::pair<int, int>, core::EvalResult> results;
  const std::map<int, double> baseline = {{1, 2.0}, {2, 4.0}, {3, 1.0}, {4, 8.0}, {5, 3.0}};
  results[{1, 0}] = timed(1, true, true, 2.0, 2.5);
  results[{1, 1}] = timed(1, true, false, 2.0, 0);
  results[{2, 1}] = timed(2, true, true, 4.0, 3.0);  // no sample 0: KernelBench counts the problem as failed
  results[{3, 0}] = timed(3, false, false, 1.0, 0);
  results[{4, 0}] = timed(4, true, true, 8.0, 0.7);
  results[{4, 2}] = timed(4, true, true, 8.0, 1.9);
  results[{5, 0}] = timed(5, true, true, 3.0, 1.2);
  const json::object kb = eval::kernelbench_results(results);

  // benchmark_eval_analysis.py: per problem the entry whose sample_id is 0 (at most one), a
  // missing problem patched as not compiled, not correct, runtime -1; rates over all problems;
  // fast_p = the share of problems correct with baseline mean / runtime > p.
  int compiled = 0, correct = 0;
  std::map<double, int> fast;
  for (const auto& [number, ref] : baseline) {
    const json::value* entries = kb.if_contains(std::to_string(number));
    const json::object* zero = nullptr;
    if (entries != nullptr)
      for (const auto& e : entries->as_array())
        if (e.as_object().at("sample_id").to_number<int>() == 0) {
          REQUIRE(zero == nullptr);
          zero = &e.as_object();
        }
    if (zero == nullptr) continue;
    compiled += zero->at("compiled").as_bool();
    correct += zero->at("correctness").as_bool();
    for (const double p : eval::default_fast_p_thresholds())
      if (zero->at("correctness").as_bool() && ref / zero->at("runtime").to_number<double>() > p) ++fast[p];
  }
  // kbrl's own summary of the same sample-0 results, with the failed problem 2 counted.
  std::vector<core::EvalResult> zeros;
  for (const auto& [key, r] : results)
    if (key.second == 0) zeros.push_back(r);
  zeros.push_back(timed(2, false, false, 4.0, 0));
  const auto s = eval::summarize(zeros);
  CHECK(s.total == static_cast<int>(baseline.size()));
  CHECK(compiled == s.compiled);
  CHECK(correct == s.correct);
  for (const auto& [p, share] : s.fast_p) CHECK(static_cast<double>(fast[p]) / baseline.size() == Catch::Approx(share));
  CHECK(fast[1.0] == 2);  // problems 1 (2.5x) and 5 (1.2x)

  // Problems in number order, samples in order, each with its sample_id; the legacy layout.
  CHECK(kb.at("4").as_array().size() == 2);
  CHECK(kb.at("4").as_array()[1].as_object().at("sample_id") == 2);
  const json::object legacy = eval::kernelbench_results(results, eval::KernelBenchLayout::legacy);
  CHECK(legacy.at("4").as_object().at("2").as_object().at("correctness").as_bool());
  CHECK(legacy.at("2").as_object().contains("1"));
  CHECK(eval::parse_kernelbench_layout("legacy") == eval::KernelBenchLayout::legacy);
  CHECK_THROWS_AS(eval::parse_kernelbench_layout("old"), core::InvalidArgument);
}
