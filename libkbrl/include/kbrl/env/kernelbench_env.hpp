// The KernelBench environments. KernelBenchEnv: one answer per episode. MultiTurnKernelBenchEnv
// (Kevin-style refinement): up to max_turns answers; after a failed or slow attempt the next
// prompt holds the earlier answers with their kernels truncated and their thinking removed (or
// kept and truncated: EnvOptions::keep_thinking), and
// a feedback message with the error category, a cleaned excerpt of the error, the trials
// passed, the speedup and advice for that kind of failure. docs/environments.md shows one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kbrl/env/env.hpp"
#include "kbrl/env/feedback.hpp"
#include "kbrl/eval/evaluator.hpp"
#include "kbrl/prompt/task_prompt.hpp"
#include "kbrl/reward/config.hpp"
#include "kbrl/reward/registry.hpp"

namespace kbrl::env {

struct EnvOptions {
  prompt::PromptOptions prompt;  // its language and precision are the requests' too
  core::EvalOptions eval;
  reward::RewardConfig reward = reward::RewardConfig::preset("default");
  const reward::RewardRegistry* registry = nullptr;  // null: reward::default_registry()
  // Multi-turn only (KernelBenchEnv is one turn whatever these say).
  int max_turns = 4;
  bool early_stop = true;               // end the episode at the first correct kernel...
  double early_stop_min_speedup = 0.0;  // ...that is at least this fast (0: any correct one)
  int kernel_excerpt_chars = 4000;      // an earlier kernel longer than this keeps its head and tail
  int error_excerpt_chars = 1500;       // the cleaned error text in feedback (kbrl/env/feedback.hpp)
  // Earlier answers keep their <think> block in later prompts, cut to thinking_excerpt_chars
  // (head and tail), as the seeds' multi-turn flow does; off: the thinking is removed.
  bool keep_thinking = false;
  int thinking_excerpt_chars = 2000;
};

// The multi-turn episode's rules, for MultiTurnKernelBenchEnv and for whatever replays an
// episode from saved answers and results (kbrl-eval generations --turns):
// whether the episode ends after attempt `turn` (0-based) with result `e` (the last turn, or
// early_stop and a correct kernel at least early_stop_min_speedup fast)...
bool episode_ends(const core::EvalResult& e, int turn, const EnvOptions& options);
// ...and, when it does not, the next prompt: `history` (system, task, earlier pairs) gains the
// answer as later prompts show it (earlier_answer) and the feedback on it (feedback_message).
void add_attempt(std::vector<core::Message>& history, const core::Completion& completion, const core::EvalResult& e,
                 int turn, const EnvOptions& options);

class KernelBenchEnv : public Env {
 public:
  // `evaluator` must outlive the env and every future it returns. request_prefix makes request
  // ids traceable: "<prefix>/t<turn>".
  KernelBenchEnv(core::Problem problem, EnvOptions options, eval::Evaluator& evaluator, std::string request_prefix);
  Observation initial_observation() override;
  std::future<StepResult> step(core::Completion sampled) override;

 protected:
  // Parses, evaluates (or fails format without evaluating) and rewards one answer.
  std::future<StepResult> evaluate(core::Completion sampled, int turn);

  core::Problem problem_;
  EnvOptions options_;
  eval::Evaluator& evaluator_;
  std::string prefix_;
  int turn_ = 0;
  bool done_ = false;
};

class MultiTurnKernelBenchEnv : public KernelBenchEnv {
 public:
  MultiTurnKernelBenchEnv(core::Problem problem, EnvOptions options, eval::Evaluator& evaluator,
                          std::string request_prefix);
  std::future<StepResult> step(core::Completion sampled) override;

 private:
  std::vector<core::Message> history_;  // system, task, then (answer, feedback) pairs
};

// G envs over one problem; multi_turn picks the class.
class KernelBenchGroupBuilder : public EnvGroupBuilder {
 public:
  KernelBenchGroupBuilder(core::Problem problem, EnvOptions options, eval::Evaluator& evaluator, int group_size,
                          bool multi_turn, std::string request_prefix);
  std::vector<std::unique_ptr<Env>> make_envs() override;
  const core::Problem& problem() const override { return problem_; }
  std::vector<std::string> logging_tags() const override;

 private:
  core::Problem problem_;
  EnvOptions options_;
  eval::Evaluator& evaluator_;
  int group_size_;
  bool multi_turn_;
  std::string prefix_;
};

}  // namespace kbrl::env
