// The Env conformance suite: the contract of env::Env and env::EnvGroupBuilder (env.hpp) as
// checks that any implementation can run, a user's environment included. Give it a way to make
// a group and the answers to step with; it plays episodes and reports which checks pass.
// docs/conformance.md.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/conformance/report.hpp"
#include "kbrl/core/types.hpp"
#include "kbrl/env/env.hpp"

namespace kbrl::conformance {

namespace env_checks {
inline constexpr std::string_view group_makes_envs = "group_makes_envs";
inline constexpr std::string_view initial_observation_well_formed = "initial_observation_well_formed";
inline constexpr std::string_view step_returns_a_future = "step_returns_a_future";
inline constexpr std::string_view step_submits_before_returning = "step_submits_before_returning";
inline constexpr std::string_view answer_without_program_is_a_result = "answer_without_program_is_a_result";
inline constexpr std::string_view episodes_end = "episodes_end";
inline constexpr std::string_view step_results_well_formed = "step_results_well_formed";
inline constexpr std::string_view step_after_done_throws = "step_after_done_throws";
inline constexpr std::string_view step_before_read_throws = "step_before_read_throws";
inline constexpr std::string_view envs_are_independent = "envs_are_independent";
}  // namespace env_checks
std::vector<std::string_view> env_check_names();

// The metrics every KernelBench step reports (env.hpp): kernel/format_ok, kernel/compiled,
// kernel/correct, kernel/cheat and turn.
std::vector<std::string> kernelbench_step_metrics();

// A completion as a policy hands it to step(): the text, with no tokens.
core::Completion completion_of(std::string text);

struct EnvSuiteOptions {
  // A fresh group builder (with its own envs); called a few times.
  std::function<std::unique_ptr<env::EnvGroupBuilder>()> make_group;
  // What the suite answers, in turn at every step of an episode (from the first again when an
  // episode runs longer). Each should hold a program; its verdict may be anything. To see
  // multi-turn episodes continue, give answers that are not accepted.
  std::vector<core::Completion> answers;
  // An answer with no program in it: it must come back as a `format` result, never a throw.
  core::Completion answer_without_program = completion_of("I am not able to write this kernel.");
  int max_steps = 16;  // an episode not done after this many steps fails episodes_end
  std::vector<std::string> required_metrics = kernelbench_step_metrics();
  // Optional: how many requests the envs' evaluator has received so far (ScriptedEvaluator::
  // submitted(), LocalEvaluator::stats().submitted). With it the suite checks that step()
  // submits before it returns and that an answer without a program is never submitted.
  std::function<std::size_t()> submitted_requests;
  std::chrono::milliseconds result_timeout = std::chrono::minutes(10);  // per step result
};

// Checks:
//   group_makes_envs                   make_envs() gives at least one env, no null, each a new
//                                      object; problem() has an id; logging tags are not empty
//   initial_observation_well_formed    messages with known roles, ending with a user message, the
//                                      same for every env of a group (one problem)
//   step_returns_a_future              step() returns a future that becomes ready with a result
//   step_submits_before_returning      (with submitted_requests) the evaluation is submitted by
//                                      step() itself, so a driver that steps many envs and then
//                                      reads the futures has them all running at once
//   answer_without_program_is_a_result neither step() nor the future throws; category format,
//                                      nothing submitted
//   episodes_end                       every episode is done within max_steps
//   step_results_well_formed           reward finite and equal to breakdown.total; required
//                                      metrics present, all finite, `turn` counting from 1; next
//                                      observation exactly when not done, well formed; eval's
//                                      problem_id the group's problem, request ids unique
//   step_after_done_throws             core::InvalidArgument
//   step_before_read_throws            core::InvalidArgument, and the episode goes on after it
//   envs_are_independent               the envs of a group (and of a second make_envs()) play
//                                      their own episodes: one done does not end another, and
//                                      their request ids differ
Report run_env_suite(const EnvSuiteOptions& options);

}  // namespace kbrl::conformance
