// Every built-in term, speed formula, cap, threshold, clip and the static-check override, with
// hand-computed values.
#include <cmath>
#include <limits>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/reward/config.hpp"
#include "kbrl/reward/reward.hpp"
#include "kbrl/reward/terms.hpp"

namespace core = kbrl::core;
using namespace kbrl::reward;

#if defined(KBRL_CATCH3)
using Catch::Approx;  // Catch2 2.x declares Approx at global scope
#endif

namespace {

Approx near(double v) { return Approx(v).epsilon(1e-12).margin(1e-15); }

// A kernel that passed every stage: correct, with the given speedup over the reference.
core::EvalResult correct_eval(double speedup) {
  core::EvalResult e;
  e.format_ok = true;
  e.compiled = true;
  e.correct = true;
  e.trials_passed = 5;
  e.trials_total = 5;
  e.speedup = speedup;
  return e;
}

core::EvalResult wrong_eval(int passed, int total) {
  core::EvalResult e;
  e.format_ok = true;
  e.compiled = true;
  e.correct = false;
  e.trials_passed = passed;
  e.trials_total = total;
  e.error_category = core::ErrorCategory::correctness;
  return e;
}

core::Completion good_completion() {
  core::Completion c;
  c.format_ok = true;
  c.num_tokens = 100;
  return c;
}

RewardConfig only(const std::string& term) {
  RewardConfig c;
  c.weights[term] = 1.0;
  return c;
}

}  // namespace

TEST_CASE("format term is 1 exactly when the completion is well formed") {
  const RewardConfig c = only("format");
  core::Completion ok = good_completion();
  core::Completion bad = ok;
  bad.format_ok = false;
  const auto e = wrong_eval(0, 5);
  CHECK(format_term(e, ok, c) == 1.0);
  CHECK(format_term(e, bad, c) == 0.0);
  CHECK(compute_reward(e, ok, c).total == 1.0);
  CHECK(compute_reward(e, bad, c).total == 0.0);
}

TEST_CASE("compile term follows eval.compiled") {
  const RewardConfig c = only("compile");
  auto e = wrong_eval(0, 5);
  CHECK(compile_term(e, good_completion(), c) == 1.0);
  e.compiled = false;
  e.error_category = core::ErrorCategory::compile;
  CHECK(compile_term(e, good_completion(), c) == 0.0);
  CHECK(compute_reward(e, good_completion(), c).total == 0.0);
}

TEST_CASE("correctness term is binary unless partial credit is on") {
  RewardConfig c = only("correctness");
  const auto comp = good_completion();
  CHECK(correctness_term(correct_eval(1.0), comp, c) == 1.0);
  CHECK(correctness_term(wrong_eval(3, 5), comp, c) == 0.0);

  c.correctness.partial_credit = true;
  CHECK(correctness_term(correct_eval(1.0), comp, c) == 1.0);
  CHECK(correctness_term(wrong_eval(3, 5), comp, c) == near(0.6));
  CHECK(correctness_term(wrong_eval(1, 4), comp, c) == 0.25);
  CHECK(correctness_term(wrong_eval(0, 5), comp, c) == 0.0);
  // No trials ran (compile failure): no credit, and no division by zero.
  CHECK(correctness_term(wrong_eval(0, 0), comp, c) == 0.0);
  // Inconsistent counts never exceed full credit.
  CHECK(correctness_term(wrong_eval(7, 5), comp, c) == 1.0);
}

TEST_CASE("speed formulas on exact speedups") {
  CHECK(apply_speed_formula(SpeedFormula::speedup, 4.0) == 4.0);
  CHECK(apply_speed_formula(SpeedFormula::speedup_minus_one, 4.0) == 3.0);
  CHECK(apply_speed_formula(SpeedFormula::log_speedup, 4.0) == 2.0);
  CHECK(apply_speed_formula(SpeedFormula::indicator, 4.0) == 1.0);

  CHECK(apply_speed_formula(SpeedFormula::speedup, 0.5) == 0.5);
  CHECK(apply_speed_formula(SpeedFormula::speedup_minus_one, 0.5) == -0.5);
  CHECK(apply_speed_formula(SpeedFormula::log_speedup, 0.5) == -1.0);
  CHECK(apply_speed_formula(SpeedFormula::indicator, 0.5) == 0.0);

  // Parity: only the raw ratio pays; the indicator needs strictly faster.
  CHECK(apply_speed_formula(SpeedFormula::speedup, 1.0) == 1.0);
  CHECK(apply_speed_formula(SpeedFormula::speedup_minus_one, 1.0) == 0.0);
  CHECK(apply_speed_formula(SpeedFormula::log_speedup, 1.0) == 0.0);
  CHECK(apply_speed_formula(SpeedFormula::indicator, 1.0) == 0.0);
}

TEST_CASE("speed term applies the configured formula") {
  RewardConfig c = only("speed");
  const auto comp = good_completion();
  const auto e = correct_eval(4.0);
  c.speed.formula = SpeedFormula::speedup;
  CHECK(compute_reward(e, comp, c).total == 4.0);
  c.speed.formula = SpeedFormula::speedup_minus_one;
  CHECK(compute_reward(e, comp, c).total == 3.0);
  c.speed.formula = SpeedFormula::log_speedup;
  CHECK(compute_reward(e, comp, c).total == 2.0);
  c.speed.formula = SpeedFormula::indicator;
  CHECK(compute_reward(e, comp, c).total == 1.0);
}

TEST_CASE("speed cap bounds the speedup before the formula") {
  RewardConfig c = only("speed");
  c.speed.cap = 10.0;
  const auto comp = good_completion();
  CHECK(speed_term(correct_eval(25.0), comp, c) == 10.0);
  CHECK(speed_term(correct_eval(10.0), comp, c) == 10.0);
  CHECK(speed_term(correct_eval(3.0), comp, c) == 3.0);
  c.speed.formula = SpeedFormula::log_speedup;
  CHECK(speed_term(correct_eval(1000.0), comp, c) == near(std::log2(10.0)));
  c.speed.formula = SpeedFormula::speedup_minus_one;
  CHECK(speed_term(correct_eval(1000.0), comp, c) == 9.0);
}

TEST_CASE("speed min_speedup is an inclusive threshold") {
  RewardConfig c = only("speed");
  c.speed.min_speedup = 1.5;
  const auto comp = good_completion();
  CHECK(speed_term(correct_eval(1.2), comp, c) == 0.0);
  CHECK(speed_term(correct_eval(1.5), comp, c) == 1.5);
  CHECK(speed_term(correct_eval(2.0), comp, c) == 2.0);
  // With log_speedup and min 1, slower kernels get 0 instead of a negative value.
  c.speed.formula = SpeedFormula::log_speedup;
  c.speed.min_speedup = 1.0;
  CHECK(speed_term(correct_eval(0.25), comp, c) == 0.0);
  CHECK(speed_term(correct_eval(8.0), comp, c) == 3.0);
}

TEST_CASE("speed term requires correctness unless told otherwise") {
  RewardConfig c = only("speed");
  auto fast_but_wrong = wrong_eval(4, 5);
  fast_but_wrong.speedup = 3.0;
  const auto comp = good_completion();
  CHECK(speed_term(fast_but_wrong, comp, c) == 0.0);
  c.speed.require_correct = false;
  CHECK(speed_term(fast_but_wrong, comp, c) == 3.0);
}

TEST_CASE("speed term uses timings when no speedup was recorded") {
  const RewardConfig c = only("speed");
  const auto comp = good_completion();
  auto e = correct_eval(1.0);
  e.speedup.reset();
  CHECK(speed_term(e, comp, c) == 0.0);  // nothing measured
  e.runtime = core::TimingStats{2.0, 2.0, 0.1, 1.9, 2.2, 100};
  e.ref_runtime = core::TimingStats{6.0, 6.0, 0.1, 5.9, 6.2, 100};
  REQUIRE(measured_speedup(e).has_value());
  CHECK(*measured_speedup(e) == 3.0);
  CHECK(speed_term(e, comp, c) == 3.0);
  e.runtime->mean_ms = 0.0;  // a zero timing is no evidence of speed
  CHECK_FALSE(measured_speedup(e).has_value());
  CHECK(speed_term(e, comp, c) == 0.0);
}

TEST_CASE("speed term ignores unusable speedups") {
  const RewardConfig c = only("speed");
  const auto comp = good_completion();
  for (double s : {0.0, -2.0, std::numeric_limits<double>::infinity(),
                   std::numeric_limits<double>::quiet_NaN()}) {
    CAPTURE(s);
    CHECK(speed_term(correct_eval(s), comp, c) == 0.0);
    CHECK(compute_reward(correct_eval(s), comp, c).total == 0.0);
  }
}

TEST_CASE("length term penalizes linearly between target and limit") {
  RewardConfig c = only("length");
  c.length.target_tokens = 1000;
  c.length.limit_tokens = 3000;
  const auto e = correct_eval(1.0);
  core::Completion comp = good_completion();
  auto at = [&](int n) {
    comp.num_tokens = n;
    return length_term(e, comp, c);
  };
  CHECK(at(500) == 0.0);
  CHECK(at(1000) == 0.0);
  CHECK(at(1500) == -0.25);
  CHECK(at(2000) == -0.5);
  CHECK(at(3000) == -1.0);
  CHECK(at(9000) == -1.0);
  CHECK_FALSE(std::signbit(at(10)));  // 0, not -0
  // Without a token count, the sampled tokens are counted.
  comp.num_tokens = 0;
  comp.tokens.assign(2500, 7);
  CHECK(length_term(e, comp, c) == -0.75);
}

TEST_CASE("length term penalizes truncated completions when asked") {
  RewardConfig c = only("length");
  c.length.penalize_truncated = true;
  const auto e = correct_eval(1.0);
  core::Completion comp = good_completion();
  comp.num_tokens = 10;
  CHECK(length_term(e, comp, c) == 0.0);
  comp.truncated = true;
  CHECK(length_term(e, comp, c) == -1.0);
  // Truncation wins over a short length; without the flag only the length counts.
  c.length.target_tokens = 1000;
  c.length.limit_tokens = 2000;
  CHECK(length_term(e, comp, c) == -1.0);
  c.length.penalize_truncated = false;
  CHECK(length_term(e, comp, c) == 0.0);
  comp.num_tokens = 1500;
  CHECK(length_term(e, comp, c) == -0.5);
}

TEST_CASE("thinking term rewards a present block and penalizes a missing required one") {
  RewardConfig c = only("thinking");
  const auto e = correct_eval(1.0);
  core::Completion comp = good_completion();
  CHECK(thinking_term(e, comp, c) == 0.0);  // no block, not required
  c.thinking.required = true;
  CHECK(thinking_term(e, comp, c) == -1.0);
  comp.has_thinking = true;
  comp.thinking = "  abc \n";
  CHECK(thinking_term(e, comp, c) == 1.0);

  c.thinking.min_chars = 3;
  CHECK(thinking_term(e, comp, c) == 1.0);
  c.thinking.min_chars = 4;  // whitespace does not count towards the minimum
  CHECK(thinking_term(e, comp, c) == -1.0);
  c.thinking.required = false;
  CHECK(thinking_term(e, comp, c) == 0.0);

  // Length is counted in code points: "héllo" is 5 characters in 6 bytes.
  comp.thinking = "h\xC3\xA9llo";
  c.thinking.min_chars = 5;
  CHECK(thinking_term(e, comp, c) == 1.0);
  c.thinking.min_chars = 6;
  CHECK(thinking_term(e, comp, c) == 0.0);
}

TEST_CASE("weights scale terms and the total is their sum") {
  RewardConfig c;
  c.weights = {{"format", 0.1}, {"compile", 0.2}, {"correctness", 0.7}, {"speed", 0.5}};
  c.correctness.partial_credit = true;
  const auto comp = good_completion();

  const auto b = compute_reward(correct_eval(2.0), comp, c);
  CHECK(b.total == near(0.1 + 0.2 + 0.7 + 0.5 * 2.0));
  CHECK(b.unclipped == b.total);
  CHECK_FALSE(b.clipped);
  CHECK_FALSE(b.zeroed_by_static_check);
  REQUIRE(b.terms.size() == 4);
  CHECK(b.terms.at("format") == near(0.1));
  CHECK(b.terms.at("compile") == near(0.2));
  CHECK(b.terms.at("correctness") == near(0.7));
  CHECK(b.terms.at("speed") == 1.0);
  CHECK(b.values.at("speed") == 2.0);
  CHECK(b.values.at("correctness") == 1.0);

  const auto partial = compute_reward(wrong_eval(2, 5), comp, c);
  CHECK(partial.total == near(0.1 + 0.2 + 0.7 * 0.4));
  CHECK(partial.terms.at("speed") == 0.0);
  CHECK(partial.values.at("correctness") == near(0.4));
}

TEST_CASE("terms with weight zero are neither computed nor reported") {
  RewardConfig c;
  c.weights = {{"format", 1.0}, {"speed", 0.0}, {"length", 0.0}};
  const auto b = compute_reward(correct_eval(5.0), good_completion(), c);
  CHECK(b.total == 1.0);
  CHECK(b.terms.size() == 1);
  CHECK(b.terms.count("speed") == 0);
  CHECK(b.values.count("length") == 0);
}

TEST_CASE("negative weights turn a term into a penalty") {
  RewardConfig c;
  c.weights = {{"compile", 1.0}, {"thinking", -0.5}};
  core::Completion comp = good_completion();
  comp.has_thinking = true;
  CHECK(compute_reward(correct_eval(1.0), comp, c).total == 0.5);
}

TEST_CASE("clip bounds the total and reports it") {
  RewardConfig c = RewardConfig::preset("kevin");
  c.clip.max = 5.0;
  const auto comp = good_completion();
  auto b = compute_reward(correct_eval(25.0), comp, c);
  CHECK(b.total == 5.0);
  CHECK(b.unclipped == near(25.3));
  CHECK(b.clipped);
  b = compute_reward(correct_eval(2.0), comp, c);
  CHECK(b.total == near(2.3));
  CHECK_FALSE(b.clipped);

  RewardConfig d = only("speed");
  d.speed.formula = SpeedFormula::speedup_minus_one;
  d.clip.min = -0.5;
  b = compute_reward(correct_eval(0.25), comp, d);
  CHECK(b.unclipped == -0.75);
  CHECK(b.total == -0.5);
  CHECK(b.clipped);
  b = compute_reward(correct_eval(0.75), comp, d);
  CHECK(b.total == -0.25);
  CHECK_FALSE(b.clipped);
}

TEST_CASE("static check failures override every term") {
  RewardConfig c = RewardConfig::preset("kbrl_stage2");
  c.weights["speed"] = 1.0;
  const auto comp = good_completion();
  auto hacked = correct_eval(50.0);

  SECTION("static_ok false") { hacked.static_ok = false; }
  SECTION("static_check category") { hacked.error_category = core::ErrorCategory::static_check; }
  SECTION("reward_hack category") { hacked.error_category = core::ErrorCategory::reward_hack; }
  SECTION("an error finding even with static_ok left true") {
    hacked.static_findings.push_back(
        core::StaticFinding{"try_except_fallback", "fallback", core::Severity::error, 12, "..."});
  }
  REQUIRE(is_static_check_failure(hacked));
  const auto b = compute_reward(hacked, comp, c);
  CHECK(b.total == 0.0);
  CHECK(b.unclipped == 0.0);
  CHECK(b.zeroed_by_static_check);
  CHECK(b.terms.empty());
  CHECK(b.values.empty());

  // A configured penalty replaces the zero, and clipping does not soften it.
  c.static_check_value = -1.0;
  c.clip.min = 0.0;
  const auto p = compute_reward(hacked, comp, c);
  CHECK(p.total == -1.0);
  CHECK(p.zeroed_by_static_check);
  CHECK_FALSE(p.clipped);
}

TEST_CASE("warning findings do not trigger the static override") {
  const RewardConfig c = RewardConfig::preset("kevin");
  auto e = correct_eval(2.0);
  e.static_findings.push_back(
      core::StaticFinding{"suspicious_name", "style", core::Severity::warning, 3, "..."});
  CHECK_FALSE(is_static_check_failure(e));
  const auto b = compute_reward(e, good_completion(), c);
  CHECK_FALSE(b.zeroed_by_static_check);
  CHECK(b.total == near(2.3));
}

TEST_CASE("breakdown metrics are flat and prefixed") {
  const RewardConfig c = RewardConfig::preset("kevin");
  const auto b = compute_reward(correct_eval(2.0), good_completion(), c);
  const auto m = b.metrics();
  CHECK(m.size() == 6);
  CHECK(m.at("reward/total") == near(2.3));
  CHECK(m.at("reward/unclipped") == near(2.3));
  CHECK(m.at("reward/clipped") == 0.0);
  CHECK(m.at("reward/static_zeroed") == 0.0);
  CHECK(m.at("reward/correctness") == near(0.3));
  CHECK(m.at("reward/speed") == 2.0);
  CHECK(b.metrics("r.").count("r.total") == 1);
  CHECK(reward_total(correct_eval(2.0), good_completion(), c) == b.total);
}

TEST_CASE("breakdown JSON carries every field") {
  const RewardConfig c = RewardConfig::preset("kevin");
  const auto b = compute_reward(correct_eval(2.0), good_completion(), c);
  const auto jv = boost::json::value_from(b);
  const auto& o = jv.as_object();
  CHECK(o.at("total").as_double() == near(2.3));
  CHECK(o.at("terms").as_object().at("speed").as_double() == 2.0);
  CHECK(o.at("values").as_object().at("correctness").as_double() == 1.0);
  CHECK(o.at("zeroed_by_static_check").as_bool() == false);
  CHECK(o.at("clipped").as_bool() == false);
}
