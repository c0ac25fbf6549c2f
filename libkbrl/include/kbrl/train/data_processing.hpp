// From trajectories to training data (tinker-cookbook's data_processing, no torch): GRPO
// advantages per group and per turn, constant groups, and the datums the TrainingClient trains
// on. One turn: a rollout's reward minus its group's mean (optionally divided by the group's
// standard deviation). Several turns: each turn's return (reward.multi_turn: gamma and form) is
// normalized within the group among the rollouts that reached that turn. docs/environments.md
// has the formulas and a worked example; docs/training.md the datums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/reward/config.hpp"

namespace kbrl::train {

// One training sequence. model_input[t] predicts target_tokens[t] (usually the next token), and
// every per-token vector has model_input's length. weights: 0 for prompt tokens (empty: all 1).
// logprobs (log q of the sampler) and advantages: needed by the RL losses, per token so that
// each turn of a multi-turn episode can carry its own advantage.
struct Datum {
  std::vector<std::int64_t> model_input;
  std::vector<std::int64_t> target_tokens;
  std::vector<float> weights;
  std::vector<float> logprobs;
  std::vector<float> advantages;
};

// A prompt and its completion as a Datum: weights 0 on the prompt's predictions, 1 on the
// completion's, sampler logprobs and one advantage on the completion's tokens. Throws
// core::InvalidArgument for an empty prompt or completion, or logprobs of another length.
Datum completion_datum(const std::vector<std::int64_t>& prompt, const std::vector<std::int64_t>& completion,
                       const std::vector<float>& completion_logprobs = {}, float advantage = 0);

struct AdvantageOptions {
  // How a multi-turn episode's per-turn rewards become returns: the run's reward.multi_turn
  // (ignored for one turn).
  reward::MultiTurnOptions returns;
  bool std_normalize = false;  // divide by the group's (population) standard deviation + eps
  // Negative advantages (rollouts worse than their group's mean) are multiplied by this, after
  // any normalization: 1 is plain GRPO; below 1 the update leans on the better rollouts, which
  // sharpens the policy toward them (raising pass@1 sooner, at some cost in diversity); 0
  // reinforces only the rollouts above the mean.
  double negative_weight = 1.0;
  double eps = 1e-6;
};

// rewards[i][t]: rollout i's reward at turn t (rollouts may have different numbers of turns);
// solved[i]: whether rollout i solved its problem (empty: none did), for the episode shaping of
// reward::episode_returns. Each rollout's returns (reward::episode_returns) are compared with
// the group's at the same turn. Returns the same shape. A turn index reached by one rollout only
// gets 0, and so does a turn whose returns are all equal: exactly 0, not the rounding residue of
// subtracting their mean (which std normalization would blow up to about 1e-11).
std::vector<std::vector<double>> turn_advantages(const std::vector<std::vector<double>>& rewards,
                                                 const AdvantageOptions& options = {},
                                                 const std::vector<bool>& solved = {});

// Every rollout's reward sequence is the same: no learning signal in the group.
bool constant_group(const std::vector<std::vector<double>>& rewards);

// rewards[i][t] of a group's trajectories: transition t's reward of trajectory i.
std::vector<std::vector<double>> group_rewards(const core::TrajectoryGroup& group);
// Whether each of a group's trajectories solved its problem: a turn's kernel was correct.
std::vector<bool> group_solved(const core::TrajectoryGroup& group);

struct DataOptions {
  AdvantageOptions advantages;
  // Groups whose rewards are all equal train nothing (their datums are left out).
  bool remove_constant_reward_groups = true;
  // Completions cut at max_tokens (completion.truncated) train nothing (DAPO's overlong
  // filtering): their rewards still count in their group's advantages, but their tokens, which
  // after a wrong turn are often noise the update would push up or down, are left out.
  bool mask_truncated = false;
};

// A batch of groups turned into datums, with what the logs report about it.
struct TrainingData {
  std::vector<Datum> datums;  // group by group, trajectory by trajectory, turn by turn
  // advantages[g][i][t]: of group g's trajectory i at turn t (0 in a removed group).
  std::vector<std::vector<std::vector<double>>> advantages;
  std::vector<bool> removed;          // per group: constant and left out
  std::size_t constant_groups = 0;
  std::size_t groups_used = 0;        // groups with datums in the batch
  std::size_t truncated_masked = 0;   // transitions left out by mask_truncated
  std::vector<double> used_advantages;  // the advantages of the groups used, in datum order
};

// Advantages per group and per turn, then one completion_datum per transition that sampled
// tokens (prompt_tokens + completion.tokens, the sampler's logprobs, its turn's advantage).
TrainingData assemble_training_data(const std::vector<core::TrajectoryGroup>& groups, const DataOptions& options);

}  // namespace kbrl::train
