// RL environments over kernel problems, in the vocabulary of tinker-cookbook: an Env is one
// episode (no reset) that shows the policy a conversation and scores its answers; an
// EnvGroupBuilder makes the G episodes of one problem that GRPO compares with each other.
// Env::step submits the evaluation before it returns, so a driver that steps many envs and then
// waits on the futures evaluates them all at once without threads of its own. docs/environments.md;
// kbrl/conformance/env_suite.hpp checks this contract for any implementation (docs/conformance.md).
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/reward/reward.hpp"

namespace kbrl::eval {
class Evaluator;
}

namespace kbrl::env {

struct Observation {
  std::vector<core::Message> messages;  // the conversation the policy answers (system, user, ...)
};

struct StepResult {
  double reward = 0;  // this turn's reward (breakdown.total)
  reward::RewardBreakdown breakdown;
  core::Completion completion;  // parsed, with the sampled tokens, count and truncation as given
  core::EvalResult eval;        // an answer without a program never reaches the evaluator: format
  bool done = false;
  std::optional<Observation> next;  // the feedback turn's conversation, when !done
  // kernel/format_ok, kernel/compiled, kernel/correct, kernel/cheat (0/1), kernel/speedup (when
  // correct), turn (1-based); on the first turn of a prompt with retrieved examples also
  // retrieval/examples, excluded_exact, excluded_near, dropped and tokens (prompt::RetrievedExamples).
  std::map<std::string, double> metrics;
};

class Env {
 public:
  virtual ~Env() = default;
  virtual Observation initial_observation() = 0;
  // Parses `sampled` (text, tokens, num_tokens, truncated set by the policy), submits its
  // evaluation and returns; the future yields the reward and what comes next. Never throws for
  // a bad answer. Calling step again before the previous future is read, or after done, throws
  // core::InvalidArgument.
  virtual std::future<StepResult> step(core::Completion sampled) = 0;
};

class EnvGroupBuilder {
 public:
  virtual ~EnvGroupBuilder() = default;
  virtual std::vector<std::unique_ptr<Env>> make_envs() = 0;
  virtual const core::Problem& problem() const = 0;
  virtual std::vector<std::string> logging_tags() const = 0;  // e.g. {"level1"}
};

// Where a training loop gets its groups from (tinker-cookbook's RLDataset): numbered batches of
// group builders and the held-out problems. batch(i) must depend only on i (and the dataset's
// own settings, such as a seed): a resumed run asks again for the batch it was at and must get
// the same problems. The envs submit their evaluations to the evaluator passed in, which must
// outlive them and every future they return; a dataset whose envs need no evaluator ignores it.
class RlDataset {
 public:
  virtual ~RlDataset() = default;
  // Full batches per epoch; a loop runs epochs * this many steps (batch indices run on across
  // epochs).
  virtual std::int64_t batches_per_epoch() const = 0;
  virtual std::vector<std::unique_ptr<EnvGroupBuilder>> batch(std::int64_t index, eval::Evaluator& evaluator) const = 0;
  // The held-out problems, group_size envs each (empty: nothing held out).
  virtual std::vector<std::unique_ptr<EnvGroupBuilder>> eval_builders(int group_size,
                                                                      eval::Evaluator& evaluator) const = 0;
};

}  // namespace kbrl::env
