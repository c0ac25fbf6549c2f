#include <kbrl/core/error.hpp>
#include <kbrl/eval/summary.hpp>

#include <cmath>

#include "catch.hpp"

using namespace kbrl;

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
