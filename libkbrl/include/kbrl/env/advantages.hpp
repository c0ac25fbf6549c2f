// GRPO advantages. One turn: a rollout's reward minus its group's mean (optionally divided by
// the group's standard deviation). Several turns: each turn's discounted return
// R_t = r_t + gamma * R_{t+1} (or the max form) is normalized within the group among the
// rollouts that reached turn t, so every turn gets its own advantage. docs/environments.md has
// the formulas and a worked example.
#pragma once

#include <vector>

#include "kbrl/reward/returns.hpp"

namespace kbrl::env {

struct AdvantageOptions {
  double gamma = 0.4;  // multi-turn discount (ignored for one turn)
  reward::ReturnForm form = reward::ReturnForm::sum;
  bool std_normalize = false;  // divide by the group's (population) standard deviation + eps
  double eps = 1e-6;
};

// rewards[i][t]: rollout i's reward at turn t (rollouts may have different numbers of turns).
// Returns the same shape. A turn index reached by one rollout only gets 0.
std::vector<std::vector<double>> turn_advantages(const std::vector<std::vector<double>>& rewards,
                                                 const AdvantageOptions& options = {});

// Every rollout's reward sequence is the same: no learning signal in the group.
bool constant_group(const std::vector<std::vector<double>>& rewards);

}  // namespace kbrl::env
