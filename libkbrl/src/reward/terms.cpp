#include "kbrl/reward/terms.hpp"

#include <algorithm>
#include <cmath>
#include <string_view>

namespace kbrl::reward {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

// Code points of UTF-8 text without its leading and trailing whitespace: a thinking block of
// 200 CJK characters is as long as one of 200 ASCII characters.
int trimmed_code_points(std::string_view text) {
  std::size_t begin = 0;
  std::size_t end = text.size();
  while (begin < end && is_space(text[begin])) ++begin;
  while (end > begin && is_space(text[end - 1])) --end;
  int count = 0;
  for (std::size_t i = begin; i < end; ++i)
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++count;
  return count;
}

}  // namespace

bool is_static_check_failure(const core::EvalResult& eval) noexcept {
  if (!eval.static_ok) return true;
  if (eval.error_category == core::ErrorCategory::static_check ||
      eval.error_category == core::ErrorCategory::reward_hack)
    return true;
  // A result whose static_ok flag disagrees with its own findings is treated as rejected: a
  // bookkeeping slip must not let a flagged kernel earn reward.
  return std::any_of(eval.static_findings.begin(), eval.static_findings.end(),
                     [](const core::StaticFinding& f) { return f.severity == core::Severity::error; });
}

std::optional<double> measured_speedup(const core::EvalResult& eval) noexcept {
  auto usable = [](double s) { return std::isfinite(s) && s > 0.0; };
  if (eval.speedup) {
    if (usable(*eval.speedup)) return *eval.speedup;
    return std::nullopt;
  }
  if (eval.runtime && eval.ref_runtime && eval.runtime->mean_ms > 0.0) {
    const double s = eval.ref_runtime->mean_ms / eval.runtime->mean_ms;
    if (usable(s)) return s;
  }
  return std::nullopt;
}

double apply_speed_formula(SpeedFormula formula, double s) noexcept {
  switch (formula) {
    case SpeedFormula::speedup: return s;
    case SpeedFormula::speedup_minus_one: return s - 1.0;
    case SpeedFormula::log_speedup: return std::log2(s);
    case SpeedFormula::indicator: return s > 1.0 ? 1.0 : 0.0;
  }
  return 0.0;
}

double format_term(const core::EvalResult&, const core::Completion& completion,
                   const RewardConfig& config) {
  return completion.format_ok ? 1.0 : config.format.fail_value;
}

// A rejected candidate reaches the terms only when static_check_value is unset: it then earns
// compile.rejected_value on the compile term and nothing for correctness or speed.
double compile_term(const core::EvalResult& eval, const core::Completion&, const RewardConfig& config) {
  if (is_static_check_failure(eval)) return config.compile.rejected_value;
  return eval.compiled ? 1.0 : 0.0;
}

double correctness_term(const core::EvalResult& eval, const core::Completion&,
                        const RewardConfig& config) {
  if (is_static_check_failure(eval)) return 0.0;
  if (eval.correct) return 1.0;
  if (!config.correctness.partial_credit || eval.trials_total <= 0) return 0.0;
  const double fraction =
      static_cast<double>(eval.trials_passed) / static_cast<double>(eval.trials_total);
  return std::clamp(fraction, 0.0, 1.0);
}

double speed_term(const core::EvalResult& eval, const core::Completion&,
                  const RewardConfig& config) {
  const SpeedOptions& o = config.speed;
  if (is_static_check_failure(eval)) return 0.0;
  if (o.require_correct && !eval.correct) return 0.0;
  const std::optional<double> measured = measured_speedup(eval);
  if (!measured) return 0.0;
  double s = *measured;
  if (o.min_speedup && s < *o.min_speedup) return 0.0;
  if (o.cap) s = std::min(s, *o.cap);
  return apply_speed_formula(o.formula, s);
}

double length_term(const core::EvalResult&, const core::Completion& completion,
                   const RewardConfig& config) {
  const LengthOptions& o = config.length;
  if (o.penalize_truncated && completion.truncated) return -1.0;
  if (!o.target_tokens || !o.limit_tokens) return 0.0;
  const int n = completion.num_tokens > 0 ? completion.num_tokens
                                          : static_cast<int>(completion.tokens.size());
  const double over = static_cast<double>(n - *o.target_tokens) /
                      static_cast<double>(*o.limit_tokens - *o.target_tokens);
  if (over <= 0.0) return 0.0;  // not -0.0, which would print as "-0" in logs
  return -std::min(over, 1.0);
}

double code_length_term(const core::EvalResult& eval, const core::Completion& completion,
                        const RewardConfig& config) {
  const CodeLengthOptions& o = config.code_length;
  if (o.require_correct && (!eval.correct || is_static_check_failure(eval))) return 0.0;
  // The candidate's code; without one, the whole answer (what kernel_rl measures then).
  const int n = trimmed_code_points(completion.kernel.empty() ? completion.text : completion.kernel);
  if (n <= o.min_chars) return 1.0;
  if (n >= o.max_chars) return 0.0;
  return 1.0 - static_cast<double>(n - o.min_chars) / static_cast<double>(o.max_chars - o.min_chars);
}

double thinking_term(const core::EvalResult&, const core::Completion& completion,
                     const RewardConfig& config) {
  const ThinkingOptions& o = config.thinking;
  const bool present =
      completion.has_thinking && trimmed_code_points(completion.thinking) >= o.min_chars;
  if (present) return 1.0;
  return o.required ? -1.0 : 0.0;
}

}  // namespace kbrl::reward
