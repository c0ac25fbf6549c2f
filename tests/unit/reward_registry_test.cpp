// User reward terms: registration rules, lookup, params and their checks, validation against an
// explicit registry or the default one, and user terms inside compute_reward.
#include <boost/json.hpp>

#include <cmath>
#include <fstream>
#include <sstream>
#include <functional>
#include <stdexcept>
#include <string>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/reward/config.hpp"
#include "kbrl/reward/registry.hpp"
#include "kbrl/reward/reward.hpp"
#include "kbrl/reward/terms.hpp"

#if defined(KBRL_CATCH3)
using Catch::Approx;  // Catch2 2.x declares Approx at global scope
#endif

namespace core = kbrl::core;
using namespace kbrl::reward;

namespace {

double constant_one(const core::EvalResult&, const core::Completion&, const RewardConfig&) {
  return 1.0;
}

std::string invalid_argument(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::InvalidArgument& e) {
    return e.what();
  } catch (const std::exception& e) {
    FAIL("expected an InvalidArgument, got: " << e.what());
  }
  FAIL("expected an InvalidArgument, nothing was thrown");
  return {};
}

core::ConfigError config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const core::ConfigError& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected a ConfigError, got: " << e.what());
  }
  FAIL("expected a ConfigError, nothing was thrown");
  return core::ConfigError("", "", "");
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

core::EvalResult correct_eval(double speedup) {
  core::EvalResult e;
  e.format_ok = e.compiled = e.correct = true;
  e.trials_passed = e.trials_total = 5;
  e.speedup = speedup;
  return e;
}

core::Completion with_kernel(const std::string& kernel) {
  core::Completion c;
  c.format_ok = true;
  c.kernel = kernel;
  return c;
}

}  // namespace

TEST_CASE("built-in and reserved names cannot be registered") {
  RewardRegistry r;
  for (const auto name : builtin_term_names()) {
    CAPTURE(name);
    CHECK(contains(invalid_argument([&] { r.register_term(std::string(name), constant_one); }),
                   "is reserved"));
  }
  for (const char* name : {"total", "unclipped", "clipped", "static_zeroed"}) {
    CAPTURE(name);
    CHECK(is_reserved_term_name(name));
    CHECK(contains(invalid_argument([&] { r.register_term(name, constant_one); }), "reserved"));
  }
  CHECK(r.user_names().empty());
}

TEST_CASE("registering a name twice is an error") {
  RewardRegistry r;
  r.register_term("bonus", constant_one);
  CHECK(invalid_argument([&] { r.register_term("bonus", constant_one); }) ==
        "reward term 'bonus' is already registered");
  CHECK(r.user_names() == std::vector<std::string>{"bonus"});
}

TEST_CASE("term names must be identifiers and functions non-empty") {
  RewardRegistry r;
  for (const char* name : {"", "1st", "has space", "dash-ed", "reward/x", "_lead"}) {
    CAPTURE(name);
    CHECK(contains(invalid_argument([&] { r.register_term(name, constant_one); }),
                   "not an identifier"));
  }
  CHECK(contains(invalid_argument([&] { r.register_term("empty", RewardTermFn{}); }),
                 "empty function"));
  CHECK_NOTHROW(r.register_term("Mixed_Case2", constant_one));
  CHECK(r.user_names() == std::vector<std::string>{"Mixed_Case2"});
}

TEST_CASE("lookup finds built-in and user terms") {
  RewardRegistry r;
  r.register_term("zeta", constant_one);
  r.register_term("alpha", constant_one);
  CHECK(r.contains("speed"));
  CHECK(r.contains("alpha"));
  CHECK_FALSE(r.contains("beta"));
  CHECK(r.is_user_term("alpha"));
  CHECK_FALSE(r.is_user_term("speed"));
  CHECK(r.names() == std::vector<std::string>{"format", "compile", "correctness", "speed",
                                              "length", "code_length", "thinking", "alpha", "zeta"});
  CHECK(r.user_names() == std::vector<std::string>{"alpha", "zeta"});

  RewardConfig c;
  c.weights["speed"] = 1.0;
  const auto e = correct_eval(3.0);
  CHECK(r.lookup("speed")(e, with_kernel(""), c) == speed_term(e, with_kernel(""), c));
  CHECK(r.lookup("alpha")(e, with_kernel(""), c) == 1.0);
  CHECK(invalid_argument([&] { (void)r.lookup("beta"); }) ==
        "unknown reward term 'beta' (known terms: format, compile, correctness, speed, length, "
        "code_length, thinking, alpha, zeta)");
}

TEST_CASE("user terms are weighted and summed with built-in ones") {
  RewardRegistry r;
  r.register_term("shared_memory", [](const core::EvalResult&, const core::Completion& c,
                                      const RewardConfig&) {
    return c.kernel.find("__shared__") != std::string::npos ? 1.0 : 0.0;
  });
  const auto c = RewardConfig::from_json_text(
      R"({"preset": "kevin", "weights": {"shared_memory": 0.25}})", "test", r);
  const auto e = correct_eval(2.0);
  const auto with = compute_reward(e, with_kernel("__shared__ float tile[32];"), c, r);
  CHECK(with.total == Approx(2.55).epsilon(1e-12));
  CHECK(with.terms.at("shared_memory") == 0.25);
  CHECK(with.values.at("shared_memory") == 1.0);
  const auto without = compute_reward(e, with_kernel("float x;"), c, r);
  CHECK(without.total == 2.3);
  CHECK(without.terms.at("shared_memory") == 0.0);
  // Static-check failures override user terms too.
  auto hacked = e;
  hacked.static_ok = false;
  CHECK(compute_reward(hacked, with_kernel("__shared__"), c, r).total == 0.0);
}

TEST_CASE("a config naming a user term validates only against a registry that has it") {
  RewardRegistry mine;
  mine.register_term("only_in_mine", constant_one);
  const std::string text = R"({"preset": "kevin", "weights": {"only_in_mine": 1}})";
  CHECK_NOTHROW(RewardConfig::from_json_text(text, "test", mine));
  const auto e = config_error([&] { (void)RewardConfig::from_json_text(text); });
  CHECK(e.field() == "weights.only_in_mine");
  CHECK(contains(e.what(), "unknown reward term 'only_in_mine'"));
  // compute_reward also refuses a term its registry does not know.
  const auto c = RewardConfig::from_json_text(text, "test", mine);
  CHECK(contains(invalid_argument([&] {
                   (void)compute_reward(correct_eval(1.0), with_kernel(""), c);
                 }),
                 "unknown reward term 'only_in_mine'"));
}

TEST_CASE("the default registry serves configs read without an explicit one") {
  default_registry().register_term("registry_test_global", constant_one);
  CHECK(default_registry().is_user_term("registry_test_global"));
  const auto c = RewardConfig::from_json_text(
      R"({"weights": {"registry_test_global": 2, "compile": 1}})");
  CHECK(compute_reward(correct_eval(1.0), with_kernel(""), c).total == 3.0);
  CHECK(boost::json::value_to<RewardConfig>(c.to_json()) == c);
}

TEST_CASE("user terms read their params from the config") {
  RewardRegistry r;
  r.register_term("scaled", [](const core::EvalResult& e, const core::Completion&,
                               const RewardConfig& c) {
    const double alpha = c.param_number("scaled", "alpha", 1.0);
    const bool invert = c.param_bool("scaled", "invert", false);
    const std::string mode = c.param_string("scaled", "mode", "compiled");
    const bool hit = mode == "compiled" ? e.compiled : e.correct;
    return alpha * ((hit != invert) ? 1.0 : 0.0);
  });
  const auto e = correct_eval(1.0);
  const auto comp = with_kernel("");

  auto c = RewardConfig::from_json_text(R"({"weights": {"scaled": 1}})", "test", r);
  CHECK(c.params_for("scaled") == nullptr);
  CHECK(compute_reward(e, comp, c, r).total == 1.0);  // every fallback

  c = RewardConfig::from_json_text(
      R"({"weights": {"scaled": 2}, "params": {"scaled": {"alpha": 0.25, "invert": true}}})",
      "test", r);
  REQUIRE(c.params_for("scaled") != nullptr);
  CHECK(c.param_number("scaled", "alpha", 1.0) == 0.25);
  CHECK(compute_reward(e, comp, c, r).total == 0.0);  // inverted hit
  auto miss = e;
  miss.compiled = false;
  CHECK(compute_reward(miss, comp, c, r).total == 0.5);  // 2 * 0.25

  c = RewardConfig::from_json_text(
      R"({"weights": {"scaled": 1}, "params": {"scaled": {"alpha": 3, "mode": "correct"}}})",
      "test", r);
  CHECK(compute_reward(miss, comp, c, r).total == 3.0);  // integer JSON numbers are numbers too

  c = RewardConfig::from_json_text(
      R"({"weights": {"scaled": 1}, "params": {"scaled": {"alpha": "big"}}})", "test", r);
  const auto e1 = config_error([&] { (void)compute_reward(e, comp, c, r); });
  CHECK(e1.field() == "params.scaled.alpha");
  CHECK(contains(e1.what(), "expected a number, got \"big\""));
  c.params["scaled"] = boost::json::object{{"invert", "yes"}};
  CHECK(config_error([&] { (void)c.param_bool("scaled", "invert", false); }).field() ==
        "params.scaled.invert");
  c.params["scaled"] = boost::json::object{{"mode", 1}};
  CHECK(config_error([&] { (void)c.param_string("scaled", "mode", ""); }).field() ==
        "params.scaled.mode");
}

TEST_CASE("params survive a JSON round trip") {
  RewardRegistry r;
  r.register_term("t", constant_one);
  const auto c = RewardConfig::from_json_text(
      R"({"weights": {"t": 1}, "params": {"t": {"a": 1, "b": [2, 3], "c": {"d": "e"}}}})", "test",
      r);
  CHECK(c.params.at("t") == boost::json::parse(R"({"a": 1, "b": [2, 3], "c": {"d": "e"}})"));
  CHECK(RewardConfig::from_json(c.to_json(), "test", r) == c);
  CHECK(c.param_number("t", "a", 0.0) == 1.0);
  CHECK(c.param_number("t", "missing", 7.0) == 7.0);
  CHECK(c.param_number("other", "a", 9.0) == 9.0);
}

TEST_CASE("param checks run at validation and name the term") {
  RewardRegistry r;
  r.register_term("bounded", constant_one, [](const boost::json::object& p) {
    for (const auto& kv : p)
      if (kv.key() != "alpha") throw std::runtime_error("unknown option '" + std::string(kv.key()) + "'");
    const auto* a = p.if_contains("alpha");
    if (a == nullptr) throw std::runtime_error("alpha is required");
    if (!a->is_number() || a->to_number<double>() < 0 || a->to_number<double>() > 1)
      throw std::runtime_error("alpha must be a number in [0, 1]");
  });

  CHECK_NOTHROW(RewardConfig::from_json_text(
      R"({"weights": {"bounded": 1}, "params": {"bounded": {"alpha": 0.5}}})", "test", r));

  auto e = config_error([&] {
    (void)RewardConfig::from_json_text(
        R"({"weights": {"bounded": 1}, "params": {"bounded": {"alpha": 2}}})", "test", r);
  });
  CHECK(e.field() == "params.bounded");
  CHECK(std::string(e.what()) == "test: field 'params.bounded': alpha must be a number in [0, 1]");

  e = config_error([&] {
    (void)RewardConfig::from_json_text(
        R"({"weights": {"bounded": 1}, "params": {"bounded": {"alpha": 0.5, "beta": 1}}})",
        "test", r);
  });
  CHECK(contains(e.what(), "unknown option 'beta'"));

  // The check runs for a weighted term even when the config gives it no params.
  e = config_error(
      [&] { (void)RewardConfig::from_json_text(R"({"weights": {"bounded": 1}})", "test", r); });
  CHECK(e.field() == "params.bounded");
  CHECK(contains(e.what(), "alpha is required"));

  // ... but not for one switched off.
  CHECK_NOTHROW(RewardConfig::from_json_text(R"({"weights": {"bounded": 0, "format": 1}})",
                                             "test", r));
  CHECK(contains(invalid_argument([&] { r.check_params("speed", {}); }), "built-in term"));
  CHECK(contains(invalid_argument([&] { r.check_params("nope", {}); }), "unknown reward term"));
}

TEST_CASE("a user term with weight zero is never called") {
  RewardRegistry r;
  int calls = 0;
  r.register_term("counted", [&calls](const core::EvalResult&, const core::Completion&,
                                      const RewardConfig&) {
    ++calls;
    return 1.0;
  });
  RewardConfig c;
  c.weights = {{"compile", 1.0}, {"counted", 0.0}};
  (void)compute_reward(correct_eval(1.0), with_kernel(""), c, r);
  CHECK(calls == 0);
  c.weights["counted"] = 0.5;
  CHECK(compute_reward(correct_eval(1.0), with_kernel(""), c, r).total == 1.5);
  CHECK(calls == 1);
}

TEST_CASE("a user term returning a non-finite value is an error naming it") {
  RewardRegistry r;
  r.register_term("broken", [](const core::EvalResult&, const core::Completion&,
                               const RewardConfig&) { return std::nan(""); });
  RewardConfig c;
  c.weights["broken"] = 1.0;
  try {
    (void)compute_reward(correct_eval(1.0), with_kernel(""), c, r);
    FAIL("no error");
  } catch (const core::Error& e) {
    CHECK(contains(e.what(), "reward term 'broken' returned a non-finite value"));
  }
}

TEST_CASE("the JSON example in docs/rewards.md is a valid config") {
  std::ifstream in(std::string(KBRL_SOURCE_DIR) + "/docs/rewards.md");
  REQUIRE(in);
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const auto begin = text.find("```json\n");
  REQUIRE(begin != std::string::npos);
  const auto end = text.find("```", begin + 8);
  REQUIRE(end != std::string::npos);

  RewardRegistry r;
  r.register_term("shared_memory", constant_one, [](const boost::json::object& p) {
    for (const auto& kv : p)
      if (kv.key() != "require_sync") throw std::runtime_error("unknown option");
  });
  const auto c = RewardConfig::from_json_text(text.substr(begin + 8, end - begin - 8), "docs", r);
  CHECK(c.name == "stage3-tiled");
  CHECK(c.weight("correctness") == 0.3);  // from the preset
  CHECK(c.weight("length") == 0.2);
  CHECK(c.speed.cap == 8.0);
  CHECK(c.clip.max == 5.0);
  CHECK(c.param_bool("shared_memory", "require_sync", false));
  // A correct 16x kernel of 5000 tokens: 0.05 format + 0.3 correct + log2(min(16, 8)) speed
  // + 0.1 shared memory = 3.45, below the clip at 5.
  core::Completion comp = with_kernel("__shared__");
  comp.num_tokens = 5000;
  CHECK(compute_reward(correct_eval(16.0), comp, c, r).total == Approx(3.45).epsilon(1e-12));
  // 7000 tokens: length costs 0.2 * 0.5.
  comp.num_tokens = 7000;
  CHECK(compute_reward(correct_eval(16.0), comp, c, r).total == Approx(3.35).epsilon(1e-12));
}
