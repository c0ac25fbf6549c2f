// RewardConfig: names, accessors, validation and presets. JSON reading and writing is in
// config_json.cpp.
#include "kbrl/reward/config.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cmath>

#include "kbrl/core/error.hpp"

namespace kbrl::reward {

namespace {

constexpr std::array<std::pair<std::string_view, SpeedFormula>, 4> kFormulas{{
    {"speedup", SpeedFormula::speedup},
    {"speedup_minus_one", SpeedFormula::speedup_minus_one},
    {"log_speedup", SpeedFormula::log_speedup},
    {"indicator", SpeedFormula::indicator},
}};

constexpr std::array<std::string_view, 10> kPresets{"default",     "stage1",      "stage2",      "stage3",
                                                    "sparse",      "kevin",       "kbrl_stage1", "kbrl_stage2",
                                                    "kbrl_stage3", "kbrl_sparse"};

// kernel_rl's speed reward with weight `speed`: 0.5 * log2(speedup) for correct kernels faster
// than the reference, at most 1; the same as log2 of the speedup capped at 4, with the 0.5 folded
// into the weight.
void kernel_rl_speed(RewardConfig& c, double speed) {
  c.weights["speed"] = speed * 0.5;
  c.speed.formula = SpeedFormula::log_speedup;
  c.speed.cap = 4.0;
  c.speed.min_speedup = 1.0;
}

// The Python kernel_rl project's reward (its training/reward.py): format, compile, correctness,
// speed and code-length terms with the given weights, its format penalty (-0.1) and cheating
// penalty (-1, on the compile term; kbrl's static checker and runtime defenses stand for its
// cheating check, and a rejected candidate still earns its format and length terms), and its
// speed reward (kernel_rl_speed).
void kernel_rl_preset(RewardConfig& c, double format, double compile, double correctness, double speed,
                      bool partial_credit) {
  c.weights = {{"format", format}, {"compile", compile}, {"correctness", correctness}, {"code_length", 0.05}};
  if (speed != 0.0) kernel_rl_speed(c, speed);
  c.correctness.partial_credit = partial_credit;
  c.format.fail_value = -0.1;
  c.compile.rejected_value = -1.0;
  c.static_check_value = std::nullopt;
}

std::string describe_user_terms(const RewardRegistry& registry) {
  const auto users = registry.user_names();
  return fmt::format("built-in: {}; registered: {}", fmt::join(builtin_term_names(), ", "),
                     users.empty() ? std::string("none") : fmt::format("{}", fmt::join(users, ", ")));
}

const boost::json::value* find_param(const RewardConfig& c, std::string_view term,
                                     std::string_view key) {
  const boost::json::object* o = c.params_for(term);
  return o == nullptr ? nullptr : o->if_contains(key);
}

[[noreturn]] void bad_param(std::string_view term, std::string_view key, std::string_view want,
                            const boost::json::value& got) {
  throw core::ConfigError("reward config", fmt::format("params.{}.{}", term, key),
                          fmt::format("expected {}, got {}", want, boost::json::serialize(got)));
}

}  // namespace

std::string_view to_string(SpeedFormula f) noexcept {
  for (const auto& [name, value] : kFormulas)
    if (value == f) return name;
  return "?";
}

SpeedFormula parse_speed_formula(std::string_view name) {
  for (const auto& [n, value] : kFormulas)
    if (n == name) return value;
  std::vector<std::string_view> names;
  for (const auto& entry : kFormulas) names.push_back(entry.first);
  throw core::InvalidArgument(
      fmt::format("unknown speed formula '{}' (accepted: {})", name, fmt::join(names, ", ")));
}

double RewardConfig::weight(std::string_view term) const noexcept {
  const auto it = weights.find(term);
  return it == weights.end() ? 0.0 : it->second;
}

const boost::json::object* RewardConfig::params_for(std::string_view term) const noexcept {
  const auto it = params.find(term);
  return it == params.end() ? nullptr : &it->second;
}

double RewardConfig::param_number(std::string_view term, std::string_view key,
                                  double fallback) const {
  const boost::json::value* v = find_param(*this, term, key);
  if (v == nullptr) return fallback;
  if (v->is_double()) return v->get_double();
  if (v->is_int64()) return static_cast<double>(v->get_int64());
  if (v->is_uint64()) return static_cast<double>(v->get_uint64());
  bad_param(term, key, "a number", *v);
}

bool RewardConfig::param_bool(std::string_view term, std::string_view key, bool fallback) const {
  const boost::json::value* v = find_param(*this, term, key);
  if (v == nullptr) return fallback;
  if (!v->is_bool()) bad_param(term, key, "true or false", *v);
  return v->get_bool();
}

std::string RewardConfig::param_string(std::string_view term, std::string_view key,
                                       std::string_view fallback) const {
  const boost::json::value* v = find_param(*this, term, key);
  if (v == nullptr) return std::string(fallback);
  if (!v->is_string()) bad_param(term, key, "a string", *v);
  return std::string(v->get_string());
}

void RewardConfig::validate(const RewardRegistry& registry, std::string_view where) const {
  auto fail = [&](const std::string& field, const std::string& what) {
    throw core::ConfigError(std::string(where), field, what);
  };

  bool any_weight = false;
  for (const auto& [term, w] : weights) {
    const std::string field = "weights." + term;
    if (!registry.contains(term))
      fail(field, fmt::format("unknown reward term '{}' ({})", term, describe_user_terms(registry)));
    if (!std::isfinite(w)) fail(field, fmt::format("weight must be a finite number (got {})", w));
    if (w != 0.0) any_weight = true;
  }
  if (!any_weight)
    fail("weights", "no reward term has a nonzero weight, so every reward would be 0");

  if (speed.cap && !(std::isfinite(*speed.cap) && *speed.cap >= 1.0))
    fail("speed.cap", fmt::format("must be a number >= 1 (got {}): a cap below 1 would score "
                                  "every kernel as slower than the reference",
                                  *speed.cap));
  if (speed.min_speedup && !(std::isfinite(*speed.min_speedup) && *speed.min_speedup >= 0.0))
    fail("speed.min_speedup", fmt::format("must be a number >= 0 (got {})", *speed.min_speedup));
  if (speed.cap && speed.min_speedup && *speed.cap < *speed.min_speedup)
    fail("speed.cap", fmt::format("cap {} is below min_speedup {}: no speedup could earn reward",
                                  *speed.cap, *speed.min_speedup));

  if (length.target_tokens.has_value() != length.limit_tokens.has_value())
    fail(length.target_tokens ? "length.limit_tokens" : "length.target_tokens",
         "set both target_tokens and limit_tokens, or neither");
  if (length.target_tokens && *length.target_tokens < 0)
    fail("length.target_tokens", fmt::format("must be >= 0 (got {})", *length.target_tokens));
  if (length.target_tokens && *length.limit_tokens <= *length.target_tokens)
    fail("length.limit_tokens", fmt::format("must be greater than target_tokens ({} <= {})",
                                            *length.limit_tokens, *length.target_tokens));
  if (weight("length") != 0.0 && !length.target_tokens && !length.penalize_truncated)
    fail("weights.length",
         "the length term has a weight but nothing to penalize: set length.target_tokens and "
         "length.limit_tokens, or length.penalize_truncated");

  if (thinking.min_chars < 0)
    fail("thinking.min_chars", fmt::format("must be >= 0 (got {})", thinking.min_chars));

  if (static_check_value && !std::isfinite(*static_check_value))
    fail("static_check_value", fmt::format("must be a finite number or null (got {})", *static_check_value));
  if (!std::isfinite(format.fail_value))
    fail("format.fail_value", fmt::format("must be a finite number (got {})", format.fail_value));
  if (!std::isfinite(compile.rejected_value))
    fail("compile.rejected_value", fmt::format("must be a finite number (got {})", compile.rejected_value));
  if (code_length.min_chars < 0)
    fail("code_length.min_chars", fmt::format("must be >= 0 (got {})", code_length.min_chars));
  if (code_length.max_chars <= code_length.min_chars)
    fail("code_length.max_chars", fmt::format("must be greater than min_chars ({} <= {})", code_length.max_chars,
                                              code_length.min_chars));

  if (clip.min && !std::isfinite(*clip.min))
    fail("clip.min", fmt::format("must be a finite number (got {})", *clip.min));
  if (clip.max && !std::isfinite(*clip.max))
    fail("clip.max", fmt::format("must be a finite number (got {})", *clip.max));
  if (clip.min && clip.max && *clip.min > *clip.max)
    fail("clip", fmt::format("min {} is greater than max {}", *clip.min, *clip.max));

  if (!(multi_turn.gamma >= 0.0 && multi_turn.gamma <= 1.0))
    fail("multi_turn.gamma", fmt::format("must be in [0, 1] (got {})", multi_turn.gamma));
  if (!(std::isfinite(multi_turn.success_bonus) && multi_turn.success_bonus >= 0.0))
    fail("multi_turn.success_bonus", fmt::format("must be a finite number, at least 0 (got {})", multi_turn.success_bonus));
  if (!std::isfinite(multi_turn.failure_penalty))
    fail("multi_turn.failure_penalty", fmt::format("must be a finite number (got {})", multi_turn.failure_penalty));

  for (const auto& [term, object] : params) {
    const std::string field = "params." + term;
    if (is_builtin_term(term))
      fail(field, fmt::format("'{}' is a built-in term: its options go in the \"{}\" section",
                              term, term));
    if (!registry.is_user_term(term))
      fail(field, fmt::format("params for unknown reward term '{}' ({})", term,
                              describe_user_terms(registry)));
    try {
      registry.check_params(term, object);
    } catch (const core::InvalidArgument& e) {
      fail(field, e.what());
    }
  }
  // A weighted user term without params still gets its check: the check may require a key.
  static const boost::json::object kNoParams;
  for (const auto& [term, w] : weights) {
    if (w == 0.0 || is_builtin_term(term) || params.contains(term)) continue;
    try {
      registry.check_params(term, kNoParams);
    } catch (const core::InvalidArgument& e) {
      fail("params." + term, e.what());
    }
  }
}

std::vector<std::string> RewardConfig::preset_names() {
  return {kPresets.begin(), kPresets.end()};
}

RewardConfig RewardConfig::preset(std::string_view name) {
  RewardConfig c;
  c.name = std::string(name);
  if (name == "default") {  // kernel_rl's RewardConfig() and its run config's weights
    kernel_rl_preset(c, 0.1, 0.2, 1.0, 0.0, true);
  } else if (name == "stage1") {  // kernel_rl's get_stage1_config()
    kernel_rl_preset(c, 0.3, 0.5, 0.2, 0.0, true);
  } else if (name == "stage2") {  // get_stage2_config()
    kernel_rl_preset(c, 0.1, 0.2, 0.7, 0.0, true);
  } else if (name == "stage3") {  // get_stage3_config()
    kernel_rl_preset(c, 0.05, 0.1, 0.5, 0.35, false);
  } else if (name == "sparse") {
    // get_sparse_config(): a correct kernel that passed the checks earns 1 + 0.5 * speed reward +
    // 0.05 * length reward; anything else 0.
    c.weights = {{"correctness", 1.0}, {"code_length", 0.05}};
    kernel_rl_speed(c, 0.5);
    c.code_length.require_correct = true;
  } else if (name == "kbrl_stage1") {
    // Learning to answer with a kernel that builds: format and compile carry 80% of the reward,
    // and partial correctness keeps a gradient towards the next stage.
    c.weights = {{"format", 0.4}, {"compile", 0.4}, {"correctness", 0.2}};
    c.correctness.partial_credit = true;
  } else if (name == "kbrl_stage2") {
    // Kernels build; now make them right.
    c.weights = {{"format", 0.1}, {"compile", 0.2}, {"correctness", 0.7}};
    c.correctness.partial_credit = true;
  } else if (name == "kbrl_stage3") {
    // Correct kernels are the entry ticket; speed dominates. log2 keeps a 10x outlier from
    // drowning the group's advantages, and min_speedup 1 keeps a slow correct kernel (0.3)
    // above a wrong one (0).
    c.weights = {{"correctness", 0.3}, {"speed", 1.0}};
    c.speed.formula = SpeedFormula::log_speedup;
    c.speed.cap = 10.0;
    c.speed.min_speedup = 1.0;
  } else if (name == "kevin") {
    // Kevin-32B: 0.3 * 1[correct] + speedup * 1[correct], discounted sum with gamma 0.4.
    c.weights = {{"correctness", 0.3}, {"speed", 1.0}};
    c.speed.formula = SpeedFormula::speedup;
  } else if (name == "kbrl_sparse") {
    // 1 only for a correct kernel faster than the reference.
    c.weights = {{"speed", 1.0}};
    c.speed.formula = SpeedFormula::indicator;
  } else {
    throw core::InvalidArgument(fmt::format("unknown reward preset '{}' (valid presets: {})", name,
                                            fmt::join(kPresets, ", ")));
  }
  return c;
}

}  // namespace kbrl::reward
