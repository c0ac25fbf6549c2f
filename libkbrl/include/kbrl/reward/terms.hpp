// The built-in reward terms, each a RewardTermFn returning its unweighted value, exposed so that
// user terms can build on them (e.g. scale the speed term by something of their own). The
// formulas are in docs/rewards.md; compute_reward adds them up with their weights.
#pragma once

#include <optional>

#include "kbrl/core/types.hpp"
#include "kbrl/reward/config.hpp"

namespace kbrl::reward {

// True when the static checker rejected the candidate or a runtime defense caught a reward hack:
// static_ok is false, a finding has severity error, or the error category is static_check or
// reward_hack. Such results earn config.static_check_value and nothing else.
bool is_static_check_failure(const core::EvalResult& eval) noexcept;

// eval.speedup, else ref_runtime.mean / runtime.mean when both were measured; nullopt when
// neither gives a finite positive number (a zero or missing timing is no evidence of speed).
std::optional<double> measured_speedup(const core::EvalResult& eval) noexcept;

// 1 if completion.format_ok, else 0.
double format_term(const core::EvalResult& eval, const core::Completion& completion,
                   const RewardConfig& config);
// 1 if eval.compiled, else 0.
double compile_term(const core::EvalResult& eval, const core::Completion& completion,
                    const RewardConfig& config);
// 1 if eval.correct; otherwise trials_passed / trials_total (clamped to [0, 1]) with
// correctness.partial_credit, else 0.
double correctness_term(const core::EvalResult& eval, const core::Completion& completion,
                        const RewardConfig& config);
// 0 when speed.require_correct and the kernel is not correct, when no speedup was measured, or
// when the speedup is below speed.min_speedup; otherwise formula(min(speedup, speed.cap)).
double speed_term(const core::EvalResult& eval, const core::Completion& completion,
                  const RewardConfig& config);
// In [-1, 0]: -1 for a truncated completion with length.penalize_truncated; otherwise
// -clamp((n - target) / (limit - target), 0, 1) for n tokens when the bounds are set, else 0.
double length_term(const core::EvalResult& eval, const core::Completion& completion,
                   const RewardConfig& config);
// In [0, 1]: 1 up to code_length.min_chars code points of the candidate's code (of the whole
// answer when none was found), 0 from max_chars on, linear between; 0 for a wrong or rejected
// kernel with code_length.require_correct.
double code_length_term(const core::EvalResult& eval, const core::Completion& completion,
                        const RewardConfig& config);
// 1 with a thinking block of at least thinking.min_chars code points; otherwise -1 when
// thinking.required, else 0.
double thinking_term(const core::EvalResult& eval, const core::Completion& completion,
                     const RewardConfig& config);

// The speed formula alone, on an already capped speedup s > 0.
double apply_speed_formula(SpeedFormula formula, double s) noexcept;

}  // namespace kbrl::reward
