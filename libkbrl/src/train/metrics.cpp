#include "kbrl/train/metrics.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>
#include <numeric>

#include "kbrl/reward/terms.hpp"

namespace kbrl::train {

namespace {

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// A transition without an evaluation counts as one that failed everything.
const core::EvalResult& eval_of(const core::Transition& t) {
  static const core::EvalResult none;
  return t.eval ? *t.eval : none;
}

}  // namespace

void add_stats(boost::json::object& m, const std::string& prefix, const std::vector<double>& v) {
  if (v.empty()) return;
  const double mean = mean_of(v);
  double var = 0;
  for (const double x : v) var += (x - mean) * (x - mean);
  m[prefix + "mean"] = mean;
  m[prefix + "std"] = std::sqrt(var / static_cast<double>(v.size()));
  m[prefix + "min"] = *std::min_element(v.begin(), v.end());
  m[prefix + "max"] = *std::max_element(v.begin(), v.end());
}

std::vector<double> transition_rewards(const std::vector<core::TrajectoryGroup>& groups) {
  std::vector<double> out;
  for (const auto& g : groups)
    for (const auto& traj : g.trajectories)
      for (const auto& t : traj.transitions) out.push_back(t.reward);
  return out;
}

std::vector<double> correct_speedups(const std::vector<core::TrajectoryGroup>& groups) {
  std::vector<double> out;
  for (const auto& g : groups)
    for (const auto& traj : g.trajectories)
      for (const auto& t : traj.transitions) {
        const auto& e = eval_of(t);
        if (e.correct && e.speedup) out.push_back(*e.speedup);
      }
  return out;
}

void add_rollout_metrics(boost::json::object& m, const std::vector<core::TrajectoryGroup>& groups, bool multi_turn) {
  std::vector<double> format, compiled, correct, cheat, turns, success, prompt_tokens, completion_tokens, completed,
      best_trials;
  // retrieval/<name>: one value per episode whose first prompt had retrieved examples.
  static constexpr std::array<const char*, 5> kRetrieval{"examples", "excluded_exact", "excluded_near", "dropped",
                                                         "tokens"};
  std::array<std::vector<double>, kRetrieval.size()> retrieval;
  std::map<std::size_t, std::vector<double>> turn_correct, turn_compiled;
  // Per level: format, compile, correct.
  std::map<int, std::array<std::vector<double>, 3>> by_level;
  for (const auto& g : groups)
    for (const auto& traj : g.trajectories) {
      bool solved = false;
      double best = 0.0;  // the largest fraction of correctness trials any turn passed
      if (!traj.transitions.empty())
        for (std::size_t i = 0; i < kRetrieval.size(); ++i)
          if (const auto it = traj.transitions[0].metrics.find(fmt::format("retrieval/{}", kRetrieval[i]));
              it != traj.transitions[0].metrics.end())
            retrieval[i].push_back(it->second);
      for (std::size_t t = 0; t < traj.transitions.size(); ++t) {
        const auto& tr = traj.transitions[t];
        const auto& e = eval_of(tr);
        format.push_back(e.format_ok ? 1 : 0);
        compiled.push_back(e.compiled ? 1 : 0);
        correct.push_back(e.correct ? 1 : 0);
        cheat.push_back(reward::is_static_check_failure(e) ? 1 : 0);
        turn_correct[t].push_back(e.correct ? 1 : 0);
        turn_compiled[t].push_back(e.compiled ? 1 : 0);
        prompt_tokens.push_back(static_cast<double>(tr.prompt_tokens.size()));
        completion_tokens.push_back(static_cast<double>(tr.completion.tokens.size()));
        completed.push_back(tr.completion.truncated ? 0 : 1);
        if (g.level > 0) {
          auto& l = by_level[g.level];
          l[0].push_back(e.format_ok ? 1 : 0);
          l[1].push_back(e.compiled ? 1 : 0);
          l[2].push_back(e.correct ? 1 : 0);
        }
        solved = solved || e.correct;
        const double passed = e.correct                ? 1.0
                              : e.trials_total > 0 ? static_cast<double>(e.trials_passed) / e.trials_total
                                                   : 0.0;
        best = std::max(best, passed);
      }
      turns.push_back(static_cast<double>(traj.transitions.size()));
      success.push_back(solved ? 1 : 0);
      best_trials.push_back(best);
    }
  const auto speedups = correct_speedups(groups);
  m["kernel/format_rate"] = mean_of(format);
  m["kernel/compile_rate"] = mean_of(compiled);
  m["kernel/correct_rate"] = mean_of(correct);
  m["kernel/cheat_rate"] = mean_of(cheat);
  m["kernel/speedup_mean"] = mean_of(speedups);
  m["kernel/evaluations"] = static_cast<double>(format.size());
  for (const auto& [level, rates] : by_level) {
    m[fmt::format("kernel/level_{}/format_rate", level)] = mean_of(rates[0]);
    m[fmt::format("kernel/level_{}/compile_rate", level)] = mean_of(rates[1]);
    m[fmt::format("kernel/level_{}/correct_rate", level)] = mean_of(rates[2]);
  }
  if (multi_turn) {
    m["multiturn/success_rate"] = mean_of(success);
    m["multiturn/avg_turns"] = mean_of(turns);
    // The seeds' names: the rates over every turn, and the best any turn of a trajectory did.
    m["multiturn/compile_rate"] = mean_of(compiled);
    m["multiturn/correct_rate"] = mean_of(correct);
    m["multiturn/max_correct_per_trajectory"] = mean_of(best_trials);
    for (const auto& [t, v] : turn_correct) m[fmt::format("multiturn/turn_{}/correct_rate", t + 1)] = mean_of(v);
    for (const auto& [t, v] : turn_compiled) m[fmt::format("multiturn/turn_{}/compile_rate", t + 1)] = mean_of(v);
  }
  for (std::size_t i = 0; i < kRetrieval.size(); ++i)
    if (!retrieval[i].empty()) m[fmt::format("retrieval/{}", kRetrieval[i])] = mean_of(retrieval[i]);
  m["sampling/completed_fraction"] = mean_of(completed);
  m["tokens/prompt"] = std::accumulate(prompt_tokens.begin(), prompt_tokens.end(), 0.0);
  m["tokens/completion"] = std::accumulate(completion_tokens.begin(), completion_tokens.end(), 0.0);
  m["tokens/completion_mean"] = mean_of(completion_tokens);
}

std::vector<std::string> retrieval_notes(const std::vector<core::TrajectoryGroup>& groups, std::set<std::string>& noted) {
  std::vector<std::string> out;
  for (const auto& g : groups) {
    if (g.trajectories.empty() || g.trajectories[0].transitions.empty() || noted.count(g.problem_id) != 0) continue;
    const auto& m = g.trajectories[0].transitions[0].metrics;
    const auto value = [&](const char* name) {
      const auto it = m.find(fmt::format("retrieval/{}", name));
      return it == m.end() ? -1.0 : it->second;
    };
    if (value("examples") < 0) continue;
    noted.insert(g.problem_id);
    out.push_back(fmt::format("retrieval for {}: {:g} examples in the prompt ({:g} tokens), {:g} left out over the "
                              "token limits; leaks excluded: {:g} exact, {:g} near",
                              g.problem_id, value("examples"), value("tokens"), value("dropped"),
                              value("excluded_exact"), value("excluded_near")));
  }
  return out;
}

void add_held_out_metrics(boost::json::object& m, const std::vector<core::TrajectoryGroup>& groups) {
  std::vector<double> reward, correct, format;
  std::map<int, std::vector<double>> correct_by_level;
  std::size_t episodes = 0;
  for (const auto& g : groups)
    for (const auto& traj : g.trajectories) {
      ++episodes;
      bool solved = false, formatted = false;
      for (const auto& t : traj.transitions) {
        const auto& e = eval_of(t);
        solved = solved || e.correct;
        formatted = formatted || e.format_ok;
      }
      reward.push_back(traj.total_reward());
      correct.push_back(solved ? 1 : 0);
      format.push_back(formatted ? 1 : 0);
      if (g.level > 0) correct_by_level[g.level].push_back(solved ? 1 : 0);
    }
  m["eval/problems"] = static_cast<double>(episodes);
  m["eval/reward_mean"] = mean_of(reward);
  m["eval/correct_rate"] = mean_of(correct);
  m["eval/format_rate"] = mean_of(format);
  m["eval/speedup_mean"] = mean_of(correct_speedups(groups));
  for (const auto& [level, v] : correct_by_level) m[fmt::format("eval/level_{}/correct_rate", level)] = mean_of(v);
}

}  // namespace kbrl::train
