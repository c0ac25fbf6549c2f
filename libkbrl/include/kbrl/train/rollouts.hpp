// Rollouts (tinker-cookbook's rollouts, no torch): a policy plays every env of a batch of groups
// to the end, and each group comes back as a core::TrajectoryGroup. The policy is seen through
// TokenCompleter (train/torch/policy.hpp's PolicyCompleter is the in-process one). A group's
// first turn is one prompt sampled group_size times; later turns differ per episode (each
// carries its own feedback). Each sampling call's evaluations are submitted as soon as it
// returns, so they run while the next call samples.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/env/env.hpp"

namespace kbrl::train {

// The policy as rollouts see it: conversations in, sampled transitions out.
class TokenCompleter {
 public:
  virtual ~TokenCompleter() = default;
  // n samples of each conversation, prompt-major (result[p * n + s] is sample s of conversation
  // p). Each Transition has observation, prompt_tokens, prompt_text, completion.text / tokens /
  // num_tokens / truncated and logprobs set. The same call (conversations, n, seed) must give the
  // same samples: a resumed run replays its steps' seeds.
  virtual std::vector<core::Transition> complete(const std::vector<std::vector<core::Message>>& conversations,
                                                 std::int64_t n, std::uint64_t seed) = 0;
};

struct RolloutOptions {
  // Groups sampled in one call (x group_size rows); a call's evaluations start when it returns.
  int groups_per_call = 4;
  // Call c of these rollouts (counted over turns) samples with seed + c.
  std::uint64_t seed = 0;
  // A progress bar of evaluated turns (envs x max_turns at most) drawn there; null: none.
  std::FILE* progress = nullptr;
  std::string progress_label = "rollouts";
  int max_turns = 1;
};

struct RolloutResult {
  std::vector<core::TrajectoryGroup> groups;  // one per builder; trajectories in make_envs order
  double sample_seconds = 0;                  // time spent in the completer
  double wait_seconds = 0;                    // time spent waiting for evaluations
};

// Plays every builder's envs to the end (an episode ends when a step says done or gives no next
// observation). Each Transition gets the env's parsed completion, its evaluation, reward,
// breakdown, done and metrics. Throws core::Error when the policy returns another number of
// samples than asked for.
RolloutResult do_group_rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders,
                                TokenCompleter& policy, const RolloutOptions& options);

}  // namespace kbrl::train
