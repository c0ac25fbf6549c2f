// What the reward of one evaluation is made of: named terms with weights, the options of the
// built-in terms, the static-check override and clipping of the total. Presets name the usual
// training stages, and JSON overrides apply on top of one. Formulas: docs/rewards.md.
#pragma once

#include <boost/json/value.hpp>
#include <boost/json/value_from.hpp>
#include <boost/json/value_to.hpp>
#include <boost/json/object.hpp>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/reward/registry.hpp"
#include "kbrl/reward/returns.hpp"

namespace kbrl::reward {

// How a (capped) speedup s becomes the speed term's value.
enum class SpeedFormula {
  speedup,            // s            (Kevin-32B: correct kernels earn their raw speedup)
  speedup_minus_one,  // s - 1        (0 at parity, negative when slower)
  log_speedup,        // log2(s)      (+1 per doubling, symmetric for slowdowns)
  indicator,          // 1 if s > 1 else 0 (faster than the reference at all)
};
std::string_view to_string(SpeedFormula f) noexcept;
// Throws core::InvalidArgument listing the accepted names.
SpeedFormula parse_speed_formula(std::string_view name);

struct FormatOptions {
  // The format term's value when no candidate was found (kernel_rl's format penalty: -0.1).
  double fail_value = 0.0;
  friend bool operator==(const FormatOptions&, const FormatOptions&) = default;
};

struct CompileOptions {
  // With static_check_value unset (no override), the compile term's value for a candidate the
  // static checker or a runtime defense rejected (kernel_rl's cheating penalty: -1).
  double rejected_value = 0.0;
  friend bool operator==(const CompileOptions&, const CompileOptions&) = default;
};

struct CorrectnessOptions {
  // When not fully correct, score trials_passed / trials_total instead of 0.
  bool partial_credit = false;
  friend bool operator==(const CorrectnessOptions&, const CorrectnessOptions&) = default;
};

struct SpeedOptions {
  SpeedFormula formula = SpeedFormula::speedup;
  // Speedups above the cap count as the cap: bounds the reward against timing noise on tiny
  // problems and against exploits that fake a huge speedup. Must be >= 1.
  std::optional<double> cap;
  // Speedups below this earn a speed term of 0 (the formula is not applied).
  std::optional<double> min_speedup;
  // Only fully correct kernels earn a speed term (a fast wrong kernel is worth nothing).
  bool require_correct = true;
  friend bool operator==(const SpeedOptions&, const SpeedOptions&) = default;
};

struct LengthOptions {
  // Completions up to target_tokens cost nothing; the penalty then grows linearly to -1 at
  // limit_tokens and stays there. Set both or neither (limit_tokens > target_tokens).
  std::optional<int> target_tokens;
  std::optional<int> limit_tokens;
  // A completion cut off by the token limit scores -1 whatever its length.
  bool penalize_truncated = false;
  friend bool operator==(const LengthOptions&, const LengthOptions&) = default;
};

struct CodeLengthOptions {
  // The candidate's code (code points): 1 up to min_chars, 0 from max_chars on, linear between
  // (kernel_rl's tie-break between otherwise equal answers: 500 and 8000).
  int min_chars = 500;
  int max_chars = 8000;
  // Only fully correct kernels earn it.
  bool require_correct = false;
  friend bool operator==(const CodeLengthOptions&, const CodeLengthOptions&) = default;
};

struct ThinkingOptions {
  // A thinking block shorter than this (Unicode code points, surrounding whitespace excluded)
  // counts as missing.
  int min_chars = 0;
  // A missing block scores -1 instead of 0.
  bool required = false;
  friend bool operator==(const ThinkingOptions&, const ThinkingOptions&) = default;
};

struct ClipOptions {
  std::optional<double> min;
  std::optional<double> max;
  friend bool operator==(const ClipOptions&, const ClipOptions&) = default;
};

// How per-turn rewards of a multi-turn episode become returns (see returns.hpp,
// episode_returns): discounted, then kernel_rl's episode shaping (MultiTurnRewardConfig).
struct MultiTurnOptions {
  double gamma = 0.4;
  ReturnForm form = ReturnForm::sum;
  double success_bonus = 0.0;    // >= 0: added to the last turn's return of an episode that solved its problem
  double failure_penalty = 0.0;  // added to the last turn's return of one that did not
  bool normalize_returns = false;  // z-score the returns within each episode of two turns or more
  friend bool operator==(const MultiTurnOptions&, const MultiTurnOptions&) = default;
};

struct RewardConfig {
  // Free-form label for logs; presets set it to their name.
  std::string name;
  // term name -> weight. Terms absent or with weight 0 are not computed at all.
  std::map<std::string, double, std::less<>> weights;
  FormatOptions format;
  CompileOptions compile;
  CorrectnessOptions correctness;
  SpeedOptions speed;
  LengthOptions length;
  CodeLengthOptions code_length;
  ThinkingOptions thinking;
  // The total when the static checker rejected the candidate (or a runtime defense caught a
  // reward hack): replaces every term and is not clipped. Unset: the terms are computed, the
  // compile term is compile.rejected_value and correctness and speed are 0.
  std::optional<double> static_check_value = 0.0;
  ClipOptions clip;
  MultiTurnOptions multi_turn;
  // Options of user terms: term name -> JSON object, read by the term through param_*().
  std::map<std::string, boost::json::object, std::less<>> params;

  double weight(std::string_view term) const noexcept;  // 0 when absent
  // The term's params object, or nullptr when it has none.
  const boost::json::object* params_for(std::string_view term) const noexcept;
  // params[term][key], or `fallback` when absent; a value of the wrong type throws
  // core::ConfigError naming "params.<term>.<key>".
  double param_number(std::string_view term, std::string_view key, double fallback) const;
  bool param_bool(std::string_view term, std::string_view key, bool fallback) const;
  std::string param_string(std::string_view term, std::string_view key,
                           std::string_view fallback) const;

  // Throws core::ConfigError (naming `where` and the field) on: an unknown term name, a
  // non-finite weight, no nonzero weight at all, speed.cap < 1, a negative min_speedup,
  // cap < min_speedup, bad length bounds, a weighted length term with nothing to penalize,
  // clip.min > clip.max, gamma outside [0, 1], params for unknown or built-in terms, or params
  // the term's RewardParamCheck rejects.
  void validate(const RewardRegistry& registry = default_registry(),
                std::string_view where = "reward config") const;

  // The Python projects' presets under their names (default, stage1, stage2, stage3, sparse:
  // kernel_rl; kevin: Kevin-32B) and kbrl's own (kbrl_stage1, kbrl_stage2, kbrl_stage3,
  // kbrl_sparse); docs/rewards.md. Unknown names throw core::InvalidArgument listing them.
  static RewardConfig preset(std::string_view name);
  static std::vector<std::string> preset_names();

  // Strict reading: unknown keys, wrong types and bad values throw core::ConfigError naming
  // `where` and the field. A string is shorthand for {"preset": <string>}. The result is
  // validated against `registry`.
  static RewardConfig from_json(const boost::json::value& jv,
                                std::string_view where = "reward config",
                                const RewardRegistry& registry = default_registry());
  static RewardConfig from_json_text(std::string_view text,
                                     std::string_view where = "reward config",
                                     const RewardRegistry& registry = default_registry());
  static RewardConfig load(const std::filesystem::path& path,
                           const RewardRegistry& registry = default_registry());
  // Every field written out (no "preset" key), so from_json(to_json()) == *this.
  boost::json::value to_json() const;

  friend bool operator==(const RewardConfig&, const RewardConfig&) = default;
};

// Boost.JSON mapping: value_from(config) is config.to_json(); value_to<RewardConfig> is
// RewardConfig::from_json against the default registry.
void tag_invoke(boost::json::value_from_tag, boost::json::value& jv, const RewardConfig& c);
RewardConfig tag_invoke(boost::json::value_to_tag<RewardConfig>, const boost::json::value& jv);

}  // namespace kbrl::reward
