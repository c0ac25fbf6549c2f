#include "kbrl/train/rollouts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <optional>
#include <utility>

#include "kbrl/core/error.hpp"
#include "kbrl/log/progress.hpp"

namespace kbrl::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// An env in play: where it stands, and the trajectory its transitions are appended to.
struct Episode {
  std::unique_ptr<env::Env> env;
  env::Observation observation;
  core::Trajectory* trajectory = nullptr;
  std::size_t group = 0;
  bool done = false;
};

}  // namespace

RolloutResult do_group_rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders,
                                TokenCompleter& policy, const RolloutOptions& options) {
  RolloutResult out;
  out.groups.resize(builders.size());
  std::vector<Episode> episodes;
  for (std::size_t g = 0; g < builders.size(); ++g) {
    auto envs = builders[g]->make_envs();
    auto& group = out.groups[g];
    group.problem_id = builders[g]->problem().id;
    // Sized before any pointer into it is taken.
    group.trajectories.resize(envs.size());
    for (std::size_t s = 0; s < envs.size(); ++s) {
      group.trajectories[s].problem_id = group.problem_id;
      Episode e;
      e.observation = envs[s]->initial_observation();
      e.env = std::move(envs[s]);
      e.trajectory = &group.trajectories[s];
      e.group = g;
      episodes.push_back(std::move(e));
    }
  }

  std::optional<log::Progress> progress;
  if (options.progress != nullptr)
    progress.emplace(options.progress_label,
                     static_cast<long>(episodes.size()) * std::max(1, options.max_turns), options.progress);

  std::uint64_t call = 0;
  const auto chunk = static_cast<std::size_t>(std::max(1, options.groups_per_call));
  for (int turn = 0;; ++turn) {
    std::vector<std::pair<Episode*, std::future<env::StepResult>>> pending;
    for (std::size_t g0 = 0; g0 < builders.size(); g0 += chunk) {
      // The first turn of a group is one prompt sampled once per episode; later turns differ
      // per episode (each carries its own feedback).
      const bool shared = turn == 0;
      std::vector<std::vector<Episode*>> members;  // per prompt: the episodes it serves
      for (std::size_t g = g0; g < std::min(builders.size(), g0 + chunk); ++g) {
        std::vector<Episode*> active;
        for (auto& e : episodes)
          if (e.group == g && !e.done) active.push_back(&e);
        if (active.empty()) continue;
        if (shared) members.push_back(active);
        else
          for (auto* e : active) members.push_back({e});
      }
      if (members.empty()) continue;
      std::vector<std::vector<core::Message>> conversations;
      std::size_t n = 1;
      for (const auto& m : members) {
        conversations.push_back(m.front()->observation.messages);
        n = std::max(n, m.size());
      }
      const auto t = Clock::now();
      auto sampled = policy.complete(conversations, static_cast<std::int64_t>(n), options.seed + call++);
      out.sample_seconds += seconds_since(t);
      if (sampled.size() != conversations.size() * n)
        throw core::Error(fmt::format("rollouts: the policy returned {} samples for {} conversations x {}",
                                      sampled.size(), conversations.size(), n));
      for (std::size_t k = 0; k < sampled.size(); ++k) {
        // Groups of different sizes share a call: a smaller group's extra samples are unused.
        const auto& m = members[k / n];
        if (k % n >= m.size()) continue;
        Episode* e = m[k % n];
        core::Transition tr = std::move(sampled[k]);
        // Submits the evaluation now: it runs while the next chunk samples.
        auto future = e->env->step(tr.completion);
        e->trajectory->transitions.push_back(std::move(tr));
        pending.emplace_back(e, std::move(future));
      }
    }
    if (pending.empty()) break;
    const auto t = Clock::now();
    for (auto& [e, future] : pending) {
      env::StepResult res = future.get();
      e->done = res.done || !res.next.has_value();
      if (!e->done) e->observation = std::move(*res.next);
      core::Transition& tr = e->trajectory->transitions.back();
      const bool correct = res.eval.correct;
      tr.completion = std::move(res.completion);
      tr.eval = std::move(res.eval);
      tr.reward = res.reward;
      tr.breakdown = std::move(res.breakdown);
      tr.done = res.done;
      tr.metrics = std::move(res.metrics);
      if (progress) progress->advance(1, fmt::format("turn {}{}", turn + 1, correct ? ", correct" : ""));
    }
    out.wait_seconds += seconds_since(t);
  }
  if (progress) progress->finish();
  return out;
}

}  // namespace kbrl::train
