// What a step's trajectories say, as the metrics of metrics.jsonl (docs/training-runs.md lists
// every key): reward statistics, kernel rates, multi-turn success, token counts, and the
// held-out evaluation's eval/* numbers. No torch.
#pragma once

#include <boost/json/object.hpp>

#include <set>
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
// evaluated turn), and kernel/level_<L>/format_rate, compile_rate, correct_rate for each
// KernelBench level present; with multi_turn also multiturn/success_rate, avg_turns,
// compile_rate and correct_rate (every turn), max_correct_per_trajectory (the mean over
// trajectories of the largest fraction of correctness trials a turn passed, 1 when correct),
// turn_<k>/correct_rate and turn_<k>/compile_rate; sampling/completed_fraction (completions that
// ended on a stop sequence, not at the token limit); tokens/prompt, completion, completion_mean;
// with retrieved examples in the prompts, retrieval/examples, excluded_exact, excluded_near,
// dropped and tokens: means over the episodes' first prompts (env.hpp's StepResult::metrics).
void add_rollout_metrics(boost::json::object& metrics, const std::vector<core::TrajectoryGroup>& groups,
                         bool multi_turn);

// The run log's line for each group of the step whose problem is not in `noted` yet (and is then
// added) and whose prompt had retrieved examples: what the prompt showed and left out, from its
// first transition's retrieval/* metrics. A problem's prompt is the same at every step, so once per
// problem and process.
std::vector<std::string> retrieval_notes(const std::vector<core::TrajectoryGroup>& groups, std::set<std::string>& noted);

// eval/problems, reward_mean (of each episode's total), correct_rate and format_rate (an episode
// counts when any of its turns was), speedup_mean (of the correct turns), and
// eval/level_<L>/correct_rate for each KernelBench level present.
void add_held_out_metrics(boost::json::object& metrics, const std::vector<core::TrajectoryGroup>& groups);

}  // namespace kbrl::train
