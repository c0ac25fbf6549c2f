#include "kbrl/train/data_processing.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kbrl/core/error.hpp"
#include "kbrl/reward/returns.hpp"

namespace kbrl::train {

Datum completion_datum(const std::vector<std::int64_t>& prompt, const std::vector<std::int64_t>& completion,
                       const std::vector<float>& completion_logprobs, float advantage) {
  if (prompt.empty() || completion.empty())
    throw core::InvalidArgument("completion_datum: prompt and completion must be non-empty");
  if (!completion_logprobs.empty() && completion_logprobs.size() != completion.size())
    throw core::InvalidArgument(fmt::format("completion_datum: completion_logprobs has {} values, completion {}",
                                            completion_logprobs.size(), completion.size()));
  std::vector<std::int64_t> all = prompt;
  all.insert(all.end(), completion.begin(), completion.end());
  Datum d;
  d.model_input.assign(all.begin(), all.end() - 1);
  d.target_tokens.assign(all.begin() + 1, all.end());
  const std::size_t p = prompt.size() - 1;  // predictions of prompt tokens
  d.weights.assign(d.model_input.size(), 0.0F);
  d.logprobs.assign(d.model_input.size(), 0.0F);
  d.advantages.assign(d.model_input.size(), 0.0F);
  for (std::size_t i = 0; i < completion.size(); ++i) {
    d.weights[p + i] = 1.0F;
    d.advantages[p + i] = advantage;
    if (!completion_logprobs.empty()) d.logprobs[p + i] = completion_logprobs[i];
  }
  return d;
}

std::vector<std::vector<double>> turn_advantages(const std::vector<std::vector<double>>& rewards,
                                                 const AdvantageOptions& options, const std::vector<bool>& solved) {
  if (!solved.empty() && solved.size() != rewards.size())
    throw core::InvalidArgument(fmt::format("turn_advantages: {} solved flags for {} rollouts", solved.size(), rewards.size()));
  if (!(options.negative_weight >= 0 && options.negative_weight <= 1))
    throw core::InvalidArgument(fmt::format("turn_advantages: negative_weight {} is outside [0, 1]", options.negative_weight));
  std::vector<std::vector<double>> returns;
  std::size_t turns = 0;
  for (std::size_t i = 0; i < rewards.size(); ++i) {
    returns.push_back(reward::episode_returns(rewards[i], !solved.empty() && solved[i], options.returns));
    turns = std::max(turns, rewards[i].size());
  }
  std::vector<std::vector<double>> adv(rewards.size());
  for (std::size_t i = 0; i < rewards.size(); ++i) adv[i].assign(rewards[i].size(), 0.0);
  for (std::size_t t = 0; t < turns; ++t) {
    double sum = 0, n = 0;
    const double* first = nullptr;
    bool all_equal = true;
    for (const auto& r : returns)
      if (t < r.size()) {
        sum += r[t], n += 1;
        if (first == nullptr) first = &r[t];
        else all_equal = all_equal && r[t] == *first;
      }
    // Equal returns carry no signal: their mean, computed in floating point, can differ from
    // the value itself in the last bit (three times 0.1 sums to 0.30000000000000004), and a
    // division by the standard deviation + eps would turn that residue into a nonzero advantage.
    if (n < 2 || all_equal) continue;
    const double mean = sum / n;
    double var = 0;
    for (const auto& r : returns)
      if (t < r.size()) var += (r[t] - mean) * (r[t] - mean);
    const double scale = options.std_normalize ? 1.0 / (std::sqrt(var / n) + options.eps) : 1.0;
    for (std::size_t i = 0; i < returns.size(); ++i)
      if (t < returns[i].size()) {
        const double a = (returns[i][t] - mean) * scale;
        adv[i][t] = a < 0 ? a * options.negative_weight : a;
      }
  }
  return adv;
}

bool constant_group(const std::vector<std::vector<double>>& rewards) {
  return std::all_of(rewards.begin(), rewards.end(), [&](const auto& r) { return r == rewards.front(); });
}

std::vector<std::vector<double>> group_rewards(const core::TrajectoryGroup& group) {
  std::vector<std::vector<double>> rewards;
  rewards.reserve(group.trajectories.size());
  for (const auto& trajectory : group.trajectories) {
    std::vector<double> r;
    r.reserve(trajectory.transitions.size());
    for (const auto& t : trajectory.transitions) r.push_back(t.reward);
    rewards.push_back(std::move(r));
  }
  return rewards;
}

std::vector<bool> group_solved(const core::TrajectoryGroup& group) {
  std::vector<bool> solved;
  solved.reserve(group.trajectories.size());
  for (const auto& trajectory : group.trajectories)
    solved.push_back(std::any_of(trajectory.transitions.begin(), trajectory.transitions.end(),
                                 [](const core::Transition& t) { return t.eval && t.eval->correct; }));
  return solved;
}

TrainingData assemble_training_data(const std::vector<core::TrajectoryGroup>& groups, const DataOptions& options) {
  TrainingData out;
  out.advantages.resize(groups.size());
  out.removed.assign(groups.size(), false);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto rewards = group_rewards(groups[g]);
    auto adv = turn_advantages(rewards, options.advantages, group_solved(groups[g]));
    const bool constant = constant_group(rewards);
    if (constant) ++out.constant_groups;
    const bool remove = constant && options.remove_constant_reward_groups;
    out.removed[g] = remove;
    if (remove) {
      for (auto& a : adv) std::fill(a.begin(), a.end(), 0.0);
    } else {
      ++out.groups_used;
      for (const auto& a : adv) out.used_advantages.insert(out.used_advantages.end(), a.begin(), a.end());
    }
    out.advantages[g] = std::move(adv);
  }
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (out.removed[g]) continue;
    const auto& trajectories = groups[g].trajectories;
    for (std::size_t i = 0; i < trajectories.size(); ++i) {
      const auto& transitions = trajectories[i].transitions;
      for (std::size_t t = 0; t < transitions.size(); ++t) {
        const auto& tr = transitions[t];
        if (tr.completion.tokens.empty()) continue;
        if (options.mask_truncated && tr.completion.truncated) {
          ++out.truncated_masked;
          continue;
        }
        const std::vector<std::int64_t> prompt(tr.prompt_tokens.begin(), tr.prompt_tokens.end());
        const std::vector<std::int64_t> completion(tr.completion.tokens.begin(), tr.completion.tokens.end());
        out.datums.push_back(
            completion_datum(prompt, completion, tr.logprobs, static_cast<float>(out.advantages[g][i][t])));
      }
    }
  }
  return out;
}

}  // namespace kbrl::train
