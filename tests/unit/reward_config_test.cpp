// Presets (with the exact rewards they give), strict JSON reading, validation errors that name
// their field, overrides on top of a preset, and round trips.
#include <boost/json.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/reward/config.hpp"
#include "kbrl/reward/reward.hpp"

#if defined(KBRL_CATCH3)
using Catch::Approx;  // Catch2 2.x declares Approx at global scope
#endif

namespace core = kbrl::core;
using namespace kbrl::reward;

namespace {

Approx near(double v) { return Approx(v).epsilon(1e-12).margin(1e-15); }

core::EvalResult correct_eval(double speedup) {
  core::EvalResult e;
  e.format_ok = e.compiled = e.correct = true;
  e.trials_passed = e.trials_total = 5;
  e.speedup = speedup;
  return e;
}

core::EvalResult partial_eval() {  // builds and runs, 3 of 5 trials right
  core::EvalResult e;
  e.format_ok = e.compiled = true;
  e.trials_passed = 3;
  e.trials_total = 5;
  e.error_category = core::ErrorCategory::correctness;
  return e;
}

core::EvalResult compile_failure() {
  core::EvalResult e;
  e.format_ok = true;
  e.error_category = core::ErrorCategory::compile;
  return e;
}

core::Completion completion(bool format_ok = true) {
  core::Completion c;
  c.format_ok = format_ok;
  c.num_tokens = 200;
  return c;
}

double reward_of(const std::string& preset, const core::EvalResult& e, bool format_ok = true) {
  return compute_reward(e, completion(format_ok), RewardConfig::preset(preset)).total;
}

struct Caught {
  std::string where, field, what;
};

// The ConfigError `f` throws; fails the test when it throws nothing or something else.
Caught config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::ConfigError& e) {
    return {e.where(), e.field(), e.what()};
  } catch (const std::exception& e) {
    FAIL("expected a ConfigError, got: " << e.what());
  }
  FAIL("expected a ConfigError, nothing was thrown");
  return {};
}

Caught parse_error(const std::string& text) {
  return config_error([&] { (void)RewardConfig::from_json_text(text); });
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

}  // namespace

TEST_CASE("preset kbrl_stage1 rewards format and compilation most") {
  const auto c = RewardConfig::preset("kbrl_stage1");
  CHECK(c.name == "kbrl_stage1");
  CHECK(c.weights == std::map<std::string, double, std::less<>>{
                         {"format", 0.4}, {"compile", 0.4}, {"correctness", 0.2}});
  CHECK(c.correctness.partial_credit);
  CHECK(reward_of("kbrl_stage1", correct_eval(2.0)) == near(1.0));
  CHECK(reward_of("kbrl_stage1", partial_eval()) == near(0.4 + 0.4 + 0.2 * 0.6));
  CHECK(reward_of("kbrl_stage1", compile_failure()) == near(0.4));
  CHECK(reward_of("kbrl_stage1", compile_failure(), false) == 0.0);
}

TEST_CASE("preset kbrl_stage2 rewards correctness most") {
  const auto c = RewardConfig::preset("kbrl_stage2");
  CHECK(c.weights == std::map<std::string, double, std::less<>>{
                         {"format", 0.1}, {"compile", 0.2}, {"correctness", 0.7}});
  CHECK(c.correctness.partial_credit);
  CHECK(reward_of("kbrl_stage2", correct_eval(2.0)) == near(1.0));
  CHECK(reward_of("kbrl_stage2", correct_eval(0.1)) == near(1.0));  // speed does not count
  CHECK(reward_of("kbrl_stage2", partial_eval()) == near(0.1 + 0.2 + 0.7 * 0.6));
  CHECK(reward_of("kbrl_stage2", compile_failure()) == near(0.1));
}

TEST_CASE("preset kbrl_stage3 rewards log speedup of correct kernels") {
  const auto c = RewardConfig::preset("kbrl_stage3");
  CHECK(c.weights == std::map<std::string, double, std::less<>>{{"correctness", 0.3}, {"speed", 1.0}});
  CHECK(c.speed.formula == SpeedFormula::log_speedup);
  CHECK(c.speed.cap == 10.0);
  CHECK(c.speed.min_speedup == 1.0);
  CHECK(c.speed.require_correct);
  CHECK_FALSE(c.correctness.partial_credit);
  CHECK(reward_of("kbrl_stage3", correct_eval(2.0)) == near(1.3));
  CHECK(reward_of("kbrl_stage3", correct_eval(4.0)) == near(2.3));
  CHECK(reward_of("kbrl_stage3", correct_eval(0.5)) == near(0.3));  // slow but correct beats wrong
  CHECK(reward_of("kbrl_stage3", correct_eval(25.0)) == near(0.3 + std::log2(10.0)));
  CHECK(reward_of("kbrl_stage3", partial_eval()) == 0.0);
  auto fast_wrong = partial_eval();
  fast_wrong.speedup = 8.0;
  CHECK(reward_of("kbrl_stage3", fast_wrong) == 0.0);
}

TEST_CASE("preset kevin is 0.3 correct plus speedup when correct") {
  const auto c = RewardConfig::preset("kevin");
  CHECK(c.weights == std::map<std::string, double, std::less<>>{{"correctness", 0.3}, {"speed", 1.0}});
  CHECK(c.speed.formula == SpeedFormula::speedup);
  CHECK_FALSE(c.speed.cap.has_value());
  CHECK_FALSE(c.speed.min_speedup.has_value());
  CHECK(c.multi_turn.gamma == 0.4);
  CHECK(c.multi_turn.form == ReturnForm::sum);
  CHECK(reward_of("kevin", correct_eval(2.0)) == near(2.3));
  CHECK(reward_of("kevin", correct_eval(0.5)) == near(0.8));
  CHECK(reward_of("kevin", correct_eval(25.0)) == near(25.3));
  CHECK(reward_of("kevin", partial_eval()) == 0.0);
  // No format or compile terms: a bad answer and a wrong kernel both earn 0.
  CHECK(reward_of("kevin", compile_failure(), false) == 0.0);
}

TEST_CASE("preset kbrl_sparse pays 1 only for correct kernels faster than the reference") {
  CHECK(reward_of("kbrl_sparse", correct_eval(1.01)) == 1.0);
  CHECK(reward_of("kbrl_sparse", correct_eval(30.0)) == 1.0);
  CHECK(reward_of("kbrl_sparse", correct_eval(1.0)) == 0.0);
  CHECK(reward_of("kbrl_sparse", correct_eval(0.7)) == 0.0);
  auto fast_wrong = partial_eval();
  fast_wrong.speedup = 3.0;
  CHECK(reward_of("kbrl_sparse", fast_wrong) == 0.0);
  CHECK(reward_of("kbrl_sparse", compile_failure()) == 0.0);
}

TEST_CASE("every preset pays nothing for statically rejected kernels, except kernel_rl's own penalty") {
  auto hacked = correct_eval(40.0);
  hacked.static_ok = false;
  hacked.error_category = core::ErrorCategory::static_check;
  for (const auto& name : RewardConfig::preset_names()) {
    CAPTURE(name);
    CHECK_NOTHROW(RewardConfig::preset(name).validate());
    if (RewardConfig::preset(name).static_check_value) {
      CHECK(reward_of(name, hacked) == 0.0);
    } else {  // kernel_rl: its format and length terms, and -1 on the compile term for cheating
      const auto b = compute_reward(hacked, completion(), RewardConfig::preset(name));
      CHECK(b.values.at("compile") == -1.0);
      CHECK(b.values.at("correctness") == 0.0);
    }
  }
}

TEST_CASE("unknown preset names are rejected with the valid ones listed") {
  CHECK(RewardConfig::preset_names() == std::vector<std::string>{"default", "stage1", "stage2", "stage3", "sparse",
                                                                  "kevin", "kbrl_stage1", "kbrl_stage2", "kbrl_stage3",
                                                                  "kbrl_sparse"});
  CHECK_THROWS_WITH(RewardConfig::preset("stage4"),
                    "unknown reward preset 'stage4' (valid presets: default, stage1, stage2, stage3, sparse, kevin, "
                    "kbrl_stage1, kbrl_stage2, kbrl_stage3, kbrl_sparse)");
  CHECK_THROWS_AS(RewardConfig::preset(""), core::InvalidArgument);
}

TEST_CASE("JSON overrides apply on top of a preset") {
  const auto c = RewardConfig::from_json_text(R"({"preset": "kbrl_stage2", "weights": {"speed": 0.5}})");
  CHECK(c.name == "kbrl_stage2");
  CHECK(c.weights == std::map<std::string, double, std::less<>>{
                         {"format", 0.1}, {"compile", 0.2}, {"correctness", 0.7}, {"speed", 0.5}});
  CHECK(c.correctness.partial_credit);  // kept from the preset
  CHECK(compute_reward(correct_eval(2.0), completion(), c).total == near(2.0));

  const auto d = RewardConfig::from_json_text(
      R"({"preset": "kbrl_stage3", "name": "s3-uncapped", "speed": {"cap": null},
          "weights": {"format": 0.05}})");
  CHECK(d.name == "s3-uncapped");
  CHECK_FALSE(d.speed.cap.has_value());
  CHECK(d.speed.formula == SpeedFormula::log_speedup);  // untouched keys keep the preset's value
  CHECK(d.speed.min_speedup == 1.0);
  CHECK(compute_reward(correct_eval(32.0), completion(), d).total == near(0.05 + 0.3 + 5.0));

  // A zero weight switches a preset's term off.
  const auto e = RewardConfig::from_json_text(R"({"preset": "kevin", "weights": {"speed": 0}})");
  CHECK(compute_reward(correct_eval(3.0), completion(), e).total == near(0.3));
}

TEST_CASE("JSON reads every section") {
  const auto c = RewardConfig::from_json_text(R"({
    "weights": {"format": 0.1, "compile": 0.1, "correctness": 1, "speed": 0.5,
                "length": 0.2, "thinking": 0.05},
    "correctness": {"partial_credit": true},
    "speed": {"formula": "speedup_minus_one", "cap": 8, "min_speedup": 1.1, "require_correct": false},
    "length": {"target_tokens": 4096, "limit_tokens": 8192, "penalize_truncated": true},
    "thinking": {"min_chars": 200, "required": true},
    "static_check_value": -0.5,
    "clip": {"min": -1, "max": 10},
    "multi_turn": {"gamma": 0.9, "form": "max"}
  })");
  CHECK(c.name.empty());
  CHECK(c.weight("correctness") == 1.0);
  CHECK(c.weight("thinking") == 0.05);
  CHECK(c.weight("nonexistent") == 0.0);
  CHECK(c.correctness.partial_credit);
  CHECK(c.speed.formula == SpeedFormula::speedup_minus_one);
  CHECK(c.speed.cap == 8.0);
  CHECK(c.speed.min_speedup == 1.1);
  CHECK_FALSE(c.speed.require_correct);
  CHECK(c.length.target_tokens == 4096);
  CHECK(c.length.limit_tokens == 8192);
  CHECK(c.length.penalize_truncated);
  CHECK(c.thinking.min_chars == 200);
  CHECK(c.thinking.required);
  CHECK(c.static_check_value == -0.5);
  CHECK(c.clip.min == -1.0);
  CHECK(c.clip.max == 10.0);
  CHECK(c.multi_turn.gamma == 0.9);
  CHECK(c.multi_turn.form == ReturnForm::max);
}

TEST_CASE("a JSON string is shorthand for a preset") {
  CHECK(RewardConfig::from_json(boost::json::value("kevin")) == RewardConfig::preset("kevin"));
  CHECK(parse_error(R"("kevn")").field == "preset");
}

TEST_CASE("JSON round trips exactly") {
  for (const auto& name : RewardConfig::preset_names()) {
    CAPTURE(name);
    const auto p = RewardConfig::preset(name);
    CHECK(RewardConfig::from_json(p.to_json()) == p);
    CHECK(boost::json::value_to<RewardConfig>(boost::json::value_from(p)) == p);
  }
  RewardConfig c = RewardConfig::preset("kbrl_stage3");
  c.name = "custom";
  c.weights["length"] = 0.25;
  c.weights["format"] = 0.0;
  c.length.target_tokens = 100;
  c.length.limit_tokens = 300;
  c.thinking.min_chars = 7;
  c.static_check_value = -2.0;
  c.clip.max = 4.0;
  c.multi_turn.form = ReturnForm::max;
  const auto text = boost::json::serialize(c.to_json());
  CHECK(RewardConfig::from_json_text(text) == c);
}

TEST_CASE("JSON writes optional values as null") {
  const auto jv = RewardConfig::preset("kevin").to_json();
  const auto& speed = jv.at("speed").as_object();
  CHECK(speed.at("cap").is_null());
  CHECK(speed.at("formula").as_string() == "speedup");
  CHECK(jv.at("clip").at("min").is_null());
  CHECK_FALSE(jv.as_object().contains("preset"));
}

TEST_CASE("JSON errors name the field") {
  struct Case {
    const char* json;
    const char* field;
    const char* mentions;
  };
  const Case cases[] = {
      {R"({"preset": "kevin", "weight": {}})", "weight", "unknown key"},
      {R"({"preset": "kevin", "speed": {"formla": "speedup"}})", "speed.formla", "accepted: formula"},
      {R"({"weights": {"spede": 1}})", "weights.spede", "unknown reward term 'spede'"},
      {R"({"weights": {"format": "1"}})", "weights.format", "expected a number"},
      {R"({"weights": [1]})", "weights", "expected a JSON object"},
      {R"({"preset": "stage9"})", "preset", "valid presets: default, stage1, stage2, stage3, sparse, kevin"},
      {R"({"preset": 3})", "preset", "expected a string"},
      {R"({"preset": "kevin", "speed": {"formula": "cubic"}})", "speed.formula",
       "accepted: speedup, speedup_minus_one, log_speedup, indicator"},
      {R"({"preset": "kevin", "speed": {"cap": -2}})", "speed.cap", "must be a number >= 1"},
      {R"({"preset": "kevin", "speed": {"cap": 0.5}})", "speed.cap", ">= 1"},
      {R"({"preset": "kevin", "speed": {"cap": "10x"}})", "speed.cap", "expected a number"},
      {R"({"preset": "kevin", "speed": {"min_speedup": -1}})", "speed.min_speedup", ">= 0"},
      {R"({"preset": "kevin", "speed": {"cap": 2, "min_speedup": 3}})", "speed.cap",
       "below min_speedup"},
      {R"({"preset": "kevin", "speed": {"require_correct": 1}})", "speed.require_correct",
       "expected true or false"},
      {R"({"preset": "kevin", "speed": 2})", "speed", "expected a JSON object"},
      {R"({"preset": "kevin", "correctness": {"partial": true}})", "correctness.partial",
       "unknown key"},
      {R"({})", "weights", "no reward term has a nonzero weight"},
      {R"({"weights": {"format": 0}})", "weights", "nonzero"},
      {R"({"preset": "kevin", "weights": {"length": 0.1}})", "weights.length", "nothing to penalize"},
      {R"({"preset": "kevin", "length": {"target_tokens": 100}})", "length.limit_tokens",
       "set both"},
      {R"({"preset": "kevin", "length": {"limit_tokens": 100}})", "length.target_tokens",
       "set both"},
      {R"({"preset": "kevin", "length": {"target_tokens": 100, "limit_tokens": 100}})",
       "length.limit_tokens", "greater than target_tokens"},
      {R"({"preset": "kevin", "length": {"target_tokens": -5, "limit_tokens": 100}})",
       "length.target_tokens", ">= 0"},
      {R"({"preset": "kevin", "length": {"target_tokens": 1.5, "limit_tokens": 100}})",
       "length.target_tokens", "expected an integer"},
      {R"({"preset": "kevin", "thinking": {"min_chars": -1}})", "thinking.min_chars", ">= 0"},
      {R"({"preset": "kevin", "static_check_value": "zero"})", "static_check_value",
       "expected a number"},
      {R"({"preset": "kevin", "clip": {"min": 2, "max": 1}})", "clip", "greater than max"},
      {R"({"preset": "kevin", "clip": {"low": 0}})", "clip.low", "accepted: min, max"},
      {R"({"preset": "kevin", "multi_turn": {"gamma": 1.5}})", "multi_turn.gamma", "[0, 1]"},
      {R"({"preset": "kevin", "multi_turn": {"gamma": -0.1}})", "multi_turn.gamma", "[0, 1]"},
      {R"({"preset": "kevin", "multi_turn": {"form": "mean"}})", "multi_turn.form",
       "accepted: sum, max"},
      {R"({"preset": "kevin", "params": {"speed": {"x": 1}}})", "params.speed", "built-in term"},
      {R"({"preset": "kevin", "params": {"nope": {"x": 1}}})", "params.nope",
       "unknown reward term 'nope'"},
      {R"({"preset": "kevin", "params": [1]})", "params", "expected a JSON object"},
      {R"([1, 2])", "", "expected a JSON object"},
  };
  for (const auto& c : cases) {
    CAPTURE(c.json);
    const Caught e = parse_error(c.json);
    CHECK(e.where == "reward config");
    CHECK(e.field == c.field);
    CHECK(contains(e.what, c.mentions));
    if (*c.field != '\0') CHECK(contains(e.what, std::string("field '") + c.field + "'"));
  }
}

TEST_CASE("JSON errors name the file or place given as where") {
  const Caught e = config_error([] {
    (void)RewardConfig::from_json_text(R"({"preset": "kevin", "speed": {"cap": -1}})",
                                       "train.json: reward");
  });
  CHECK(e.where == "train.json: reward");
  CHECK(e.field == "speed.cap");
  CHECK(e.what.rfind("train.json: reward: field 'speed.cap': ", 0) == 0);

  const Caught m = config_error([] { (void)RewardConfig::from_json_text("{\"preset\": ", "r.json"); });
  CHECK(m.where == "r.json");
  CHECK(contains(m.what, "malformed JSON"));
}

TEST_CASE("validate catches configs built in C++") {
  RewardConfig c = RewardConfig::preset("kevin");
  CHECK_NOTHROW(c.validate());
  c.speed.cap = -3.0;
  CHECK(config_error([&] { c.validate(); }).field == "speed.cap");
  c = RewardConfig::preset("kevin");
  c.weights["format"] = std::nan("");
  CHECK(config_error([&] { c.validate(); }).field == "weights.format");
  c = RewardConfig::preset("kevin");
  c.weights["typo"] = 0.0;  // unknown names are errors even with weight 0
  CHECK(config_error([&] { c.validate(); }).field == "weights.typo");
  c = RewardConfig::preset("kevin");
  c.static_check_value = INFINITY;
  CHECK(config_error([&] { c.validate(); }).field == "static_check_value");
  c = RewardConfig::preset("kevin");
  c.clip.max = NAN;
  CHECK(config_error([&] { c.validate(); }).field == "clip.max");
  c = RewardConfig::preset("kevin");
  c.multi_turn.gamma = NAN;
  CHECK(config_error([&] { c.validate(); }).field == "multi_turn.gamma");
}

TEST_CASE("load reads a config file and names it in errors") {
  const std::filesystem::path dir = std::filesystem::path(KBRL_TEST_TMP) / "reward_config_test";
  std::filesystem::create_directories(dir);
  const auto good = dir / "good.json";
  std::ofstream(good) << R"({"preset": "kbrl_stage3", "speed": {"cap": 4}})";
  const auto c = RewardConfig::load(good);
  CHECK(c.speed.cap == 4.0);
  CHECK(compute_reward(correct_eval(16.0), completion(), c).total == near(2.3));

  const auto bad = dir / "bad.json";
  std::ofstream(bad) << R"({"preset": "kbrl_stage3", "speed": {"formula": "fast"}})";
  const Caught e = config_error([&] { (void)RewardConfig::load(bad); });
  CHECK(e.where == bad.string());
  CHECK(e.field == "speed.formula");

  const Caught missing = config_error([&] { (void)RewardConfig::load(dir / "missing.json"); });
  CHECK(missing.where == (dir / "missing.json").string());
  CHECK(contains(missing.what, "cannot open"));
}

TEST_CASE("speed formula and return form names parse and print") {
  for (auto f : {SpeedFormula::speedup, SpeedFormula::speedup_minus_one, SpeedFormula::log_speedup,
                 SpeedFormula::indicator})
    CHECK(parse_speed_formula(to_string(f)) == f);
  CHECK(to_string(SpeedFormula::log_speedup) == "log_speedup");
  CHECK_THROWS_AS(parse_speed_formula("log"), core::InvalidArgument);
  CHECK(parse_return_form("max") == ReturnForm::max);
  CHECK(to_string(ReturnForm::sum) == "sum");
  CHECK_THROWS_AS(parse_return_form("avg"), core::InvalidArgument);
}

namespace {

// The Python kernel_rl project's reward (its training/reward.py, RewardConfig and the stage
// presets), written out here as its own code computes it, to check kbrl's presets of the same
// names against. `cheated` is its check for answers that only call PyTorch; kbrl's static checker
// stands for it, and kbrl never runs such a candidate (not compiled, no trials).
struct SeedResult {
  bool format_ok = true, compiled = false, correct = false, cheated = false;
  int passed = 0, total = 5;
  std::optional<double> speedup{};
  int code_length = 0;
};
struct SeedConfig {
  double format_w, compile_w, correctness_w, speed_w, length_w;
  bool partial, sparse;
};

double seed_reward(const SeedResult& r, const SeedConfig& c) {
  const auto speed = [&] {
    if (!r.correct || !r.speedup || *r.speedup <= 0 || *r.speedup <= 1.0) return 0.0;
    return std::min(0.5 * std::log2(*r.speedup / 1.0), 1.0);
  };
  const auto length = [&] {
    if (r.code_length <= 500) return 1.0;
    if (r.code_length >= 8000) return 0.0;
    return 1.0 - static_cast<double>(r.code_length - 500) / (8000 - 500);
  };
  if (c.sparse) {
    if (!(r.correct && !r.cheated)) return 0.0;
    double base = 1.0;
    if (c.speed_w > 0) base += c.speed_w * speed();
    if (c.length_w > 0) base += c.length_w * length();
    return base;
  }
  const double format = r.format_ok ? 1.0 : -0.1;
  const double compile = r.cheated ? -1.0 : (r.compiled ? 1.0 : 0.0);
  double correctness = 0.0;
  if (r.compiled && r.total > 0)
    correctness = c.partial ? static_cast<double>(r.passed) / r.total : (r.passed == r.total ? 1.0 : 0.0);
  return c.format_w * format + c.compile_w * compile + c.correctness_w * correctness + c.speed_w * speed() +
         c.length_w * length();
}

// The same outcome as kbrl's evaluator and answer parser report it.
std::pair<core::EvalResult, core::Completion> as_kbrl(const SeedResult& r) {
  core::EvalResult e;
  e.format_ok = r.format_ok;
  e.compiled = r.compiled;
  e.correct = r.correct;
  e.trials_passed = r.passed;
  e.trials_total = r.compiled ? r.total : 0;
  e.speedup = r.correct ? r.speedup : std::nullopt;
  if (r.cheated) {
    e.static_ok = false;
    e.error_category = core::ErrorCategory::static_check;
  } else if (!r.compiled) {
    e.error_category = r.format_ok ? core::ErrorCategory::compile : core::ErrorCategory::format;
  } else if (!r.correct) {
    e.error_category = core::ErrorCategory::correctness;
  }
  core::Completion c;
  c.format_ok = r.format_ok;
  (r.format_ok ? c.kernel : c.text) = std::string(static_cast<std::size_t>(r.code_length), 'x');
  return {e, c};
}

}  // namespace

TEST_CASE("kernel_rl's presets give its reward exactly, outcome by outcome") {
  const std::map<std::string, SeedConfig> seeds = {
      {"default", {0.1, 0.2, 1.0, 0.0, 0.05, true, false}},
      {"stage1", {0.3, 0.5, 0.2, 0.0, 0.05, true, false}},
      {"stage2", {0.1, 0.2, 0.7, 0.0, 0.05, true, false}},
      {"stage3", {0.05, 0.1, 0.5, 0.35, 0.05, false, false}},
      {"sparse", {0.1, 0.2, 1.0, 0.5, 0.05, true, true}},
  };
  std::vector<SeedResult> outcomes;
  outcomes.push_back({.format_ok = false, .code_length = 300});                     // no kernel found
  outcomes.push_back({.format_ok = false, .code_length = 2400});                    // a long answer without one
  outcomes.push_back({.code_length = 1200});                                         // does not compile
  outcomes.push_back({.cheated = true, .code_length = 450});                         // only calls PyTorch
  outcomes.push_back({.compiled = true, .passed = 3, .code_length = 600});           // 3 of 5 trials
  outcomes.push_back({.compiled = true, .passed = 0, .code_length = 8000});          // wrong on every trial
  for (const double s : {0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 10.0})
    for (const int n : {200, 3750, 9000})
      outcomes.push_back({.compiled = true, .correct = true, .passed = 5, .speedup = s, .code_length = n});
  for (const auto& [name, seed] : seeds) {
    const RewardConfig c = RewardConfig::preset(name);
    for (const auto& r : outcomes) {
      const auto [eval, answer] = as_kbrl(r);
      const double want = seed_reward(r, seed);
      CAPTURE(name, r.format_ok, r.compiled, r.correct, r.cheated, r.passed, r.code_length, r.speedup.value_or(-1));
      CHECK(compute_reward(eval, answer, c).total == Approx(want).epsilon(1e-12).margin(1e-12));
    }
  }
  // Hand-computed, as a reader checks them: stage 3, correct at 2x, 3750 characters:
  // 0.05 + 0.1 + 0.5 + 0.35 * min(0.5 * log2(2), 1) + 0.05 * (1 - 3250 / 7500) = 0.8033...
  const auto [eval, answer] = as_kbrl({.compiled = true, .correct = true, .passed = 5, .speedup = 2.0, .code_length = 3750});
  CHECK(compute_reward(eval, answer, RewardConfig::preset("stage3")).total ==
        near(0.05 + 0.1 + 0.5 + 0.35 * 0.5 + 0.05 * (1.0 - 3250.0 / 7500.0)));
  // Sparse, correct at 10x (speed reward capped at 1), 200 characters: 1 + 0.5 + 0.05.
  const auto [fast, short_answer] = as_kbrl({.compiled = true, .correct = true, .passed = 5, .speedup = 10.0, .code_length = 200});
  CHECK(compute_reward(fast, short_answer, RewardConfig::preset("sparse")).total == near(1.55));
}

TEST_CASE("format, compile and code_length options and an unset static-check override read, validate and round-trip") {
  const auto c = RewardConfig::from_json_text(R"({
    "weights": {"format": 1, "compile": 1, "code_length": 1},
    "format": {"fail_value": -0.25},
    "compile": {"rejected_value": -2},
    "code_length": {"min_chars": 10, "max_chars": 20, "require_correct": false},
    "static_check_value": null
  })");
  CHECK(c.format.fail_value == -0.25);
  CHECK(c.compile.rejected_value == -2.0);
  CHECK(c.code_length.min_chars == 10);
  CHECK_FALSE(c.static_check_value.has_value());
  CHECK(RewardConfig::from_json(c.to_json()) == c);
  // No kernel (format -0.25), 15 characters of answer (code_length 0.5); a rejected kernel of
  // 5 characters: format 1, compile -2, code_length 1 (no override: the terms are computed).
  core::Completion none;
  none.text = std::string(15, 'y');
  CHECK(compute_reward(core::EvalResult{}, none, c).total == near(-0.25 + 0.0 + 0.5));
  core::EvalResult rejected;
  rejected.static_ok = false;
  core::Completion five;
  five.format_ok = true;
  five.kernel = "xxxxx";
  const auto b = compute_reward(rejected, five, c);
  CHECK_FALSE(b.zeroed_by_static_check);
  CHECK(b.total == near(1.0 - 2.0 + 1.0));

  CHECK(parse_error(R"({"preset": "kevin", "code_length": {"min_chars": 20, "max_chars": 20}})").field ==
        "code_length.max_chars");
  CHECK(parse_error(R"({"preset": "kevin", "code_length": {"min_chars": -1}})").field == "code_length.min_chars");
  CHECK(parse_error(R"({"preset": "kevin", "format": {"penalty": -1}})").field == "format.penalty");
  CHECK(parse_error(R"({"preset": "kevin", "compile": {"rejected_value": "low"}})").field == "compile.rejected_value");
}
