// Rollouts (tinker-cookbook's rollouts, no torch): a policy plays every env of a batch of groups
// to the end, and each group comes back as a core::TrajectoryGroup. The policy is seen through
// TokenCompleter (train/torch/policy.hpp's PolicyCompleter is the in-process one). A group's
// first turn is one prompt sampled group_size times; later turns differ per episode (each
// carries its own feedback). Each sampling call's evaluations are submitted as soon as it
// returns, so they run while the next call samples. start_group_rollouts stops after the last
// turn's sampling (its evaluations in flight), so an asynchronous loop can sample the next batch
// while finish_group_rollouts waits for them on another thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
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
  // num_tokens / truncated and logprobs set. prompt_keys (one per conversation) key each
  // conversation's draws: a conversation sampled with the same (seed, key) must give the same
  // samples whatever else shares the call, so a resumed run replays its steps and a group's
  // samples do not depend on how many ranks share the batch.
  virtual std::vector<core::Transition> complete(const std::vector<std::vector<core::Message>>& conversations,
                                                 std::int64_t n, std::uint64_t seed,
                                                 const std::vector<std::uint64_t>& prompt_keys) = 0;
};

struct RolloutOptions {
  // Groups sampled in one call (x group_size rows); a call's evaluations start when it returns.
  int groups_per_call = 4;
  // Turn t samples with seed + t; a group's first-turn prompt is keyed by its group key, a later
  // turn's by group key * 4096 + the episode's index in its group.
  std::uint64_t seed = 0;
  // One per builder: where its group sits in the whole batch (empty: 0, 1, ...). A rank sampling
  // its share of a batch passes the global indices, so each group draws what it draws alone.
  std::vector<std::uint64_t> group_keys;
  // A progress bar of evaluated turns (envs x max_turns at most) drawn there; null: none.
  std::FILE* progress = nullptr;
  std::string progress_label = "rollouts";
  // Turns the envs play at most: start_group_rollouts returns after sampling turn max_turns (or
  // when every episode is done), leaving that turn's evaluations in flight.
  int max_turns = 1;
};

struct RolloutResult {
  std::vector<core::TrajectoryGroup> groups;  // one per builder; trajectories in make_envs order
  double sample_seconds = 0;                  // time spent in the completer
  double wait_seconds = 0;                    // time spent waiting for evaluations
  // When the first evaluation was submitted (the evaluation phase's start, for timelines).
  std::optional<std::chrono::steady_clock::time_point> first_submission;
};

// Plays every builder's envs to the end (an episode ends when a step says done or gives no next
// observation). Each Transition gets the env's parsed completion, its evaluation, reward,
// breakdown, done and metrics. Throws core::Error when the policy returns another number of
// samples than asked for.
RolloutResult do_group_rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders,
                                TokenCompleter& policy, const RolloutOptions& options);

// do_group_rollouts in two halves: start plays every turn but the last one's evaluations (it
// samples, and waits for earlier turns' evaluations when there are later turns to sample), finish
// waits for those. If an env goes on past options.max_turns, finish samples on with `policy`, so
// the policy must then be free to use from finish's thread. The builders and the policy must
// outlive the PendingRollouts.
class PendingRollouts {
 public:
  struct State;
  explicit PendingRollouts(std::unique_ptr<State> state);
  PendingRollouts(PendingRollouts&&) noexcept;
  PendingRollouts& operator=(PendingRollouts&&) noexcept;
  ~PendingRollouts();
  double sample_seconds() const;  // so far

 private:
  friend RolloutResult finish_group_rollouts(PendingRollouts pending);
  std::unique_ptr<State> state_;
};
PendingRollouts start_group_rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders,
                                     TokenCompleter& policy, const RolloutOptions& options);
RolloutResult finish_group_rollouts(PendingRollouts pending);

}  // namespace kbrl::train
