// What a step's trajectories say, as the metrics of metrics.jsonl (docs/training-runs.md lists
// every key): reward statistics, kernel rates, multi-turn success, token counts, and the
// held-out evaluation's eval/* numbers. No torch.
#pragma once

#include <boost/json/object.hpp>

#include <string>
#include <vector>

#include "kbrl/core/types.hpp"

namespace kbrl::train {

// <prefix>mean, std (population), min, max of `values`; nothing for an empty list.
void add_stats(boost::json::object& metrics, const std::string& prefix, const std::vector<double>& values);

// Every transition's reward, group by group, trajectory by trajectory, turn by turn.
std::vector<double> transition_rewards(const std::vector<core::TrajectoryGroup>& groups);
// The speedups of the correct kernels among the transitions, in the same order.
std::vector<double> correct_speedups(const std::vector<core::TrajectoryGroup>& groups);

// kernel/format_rate, compile_rate, correct_rate, cheat_rate, speedup_mean, evaluations (per
// evaluated turn); with multi_turn also multiturn/success_rate, avg_turns and
// turn_<k>/correct_rate; tokens/prompt, completion, completion_mean.
void add_rollout_metrics(boost::json::object& metrics, const std::vector<core::TrajectoryGroup>& groups,
                         bool multi_turn);

// eval/problems, reward_mean (of each episode's total), correct_rate and format_rate (an episode
// counts when any of its turns was), speedup_mean (of the correct turns).
void add_held_out_metrics(boost::json::object& metrics, const std::vector<core::TrajectoryGroup>& groups);

}  // namespace kbrl::train
