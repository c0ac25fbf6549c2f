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

// Later turns key each episode's prompt by its group's key and its index in the group.
constexpr std::uint64_t kMaxGroupSize = 4096;

// An env in play: where it stands, and the trajectory its transitions are appended to.
struct Episode {
  std::unique_ptr<env::Env> env;
  env::Observation observation;
  core::Trajectory* trajectory = nullptr;
  std::size_t group = 0;
  std::size_t index = 0;  // in its group
  bool done = false;
};

}  // namespace

struct PendingRollouts::State {
  const std::vector<std::unique_ptr<env::EnvGroupBuilder>>* builders = nullptr;
  TokenCompleter* policy = nullptr;
  RolloutOptions options;
  RolloutResult out;
  std::vector<Episode> episodes;
  std::optional<log::Progress> progress;
  int turn = 0;
  std::vector<std::pair<Episode*, std::future<env::StepResult>>> pending;

  std::uint64_t group_key(std::size_t g) const { return options.group_keys.empty() ? g : options.group_keys[g]; }

  // Samples turn `turn` of every episode still in play, submitting each call's evaluations as
  // soon as it returns. False when no episode is left.
  bool sample_turn() {
    const auto& bs = *builders;
    const auto chunk = static_cast<std::size_t>(std::max(1, options.groups_per_call));
    // The first turn of a group is one prompt sampled once per episode; later turns differ per
    // episode (each carries its own feedback).
    const bool shared = turn == 0;
    for (std::size_t g0 = 0; g0 < bs.size(); g0 += chunk) {
      std::vector<std::vector<Episode*>> members;  // per prompt: the episodes it serves
      std::vector<std::uint64_t> keys;
      for (std::size_t g = g0; g < std::min(bs.size(), g0 + chunk); ++g) {
        std::vector<Episode*> active;
        for (auto& e : episodes)
          if (e.group == g && !e.done) active.push_back(&e);
        if (active.empty()) continue;
        if (shared) {
          members.push_back(active);
          keys.push_back(group_key(g));
        } else {
          for (auto* e : active) {
            members.push_back({e});
            keys.push_back(group_key(g) * kMaxGroupSize + e->index);
          }
        }
      }
      if (members.empty()) continue;
      std::vector<std::vector<core::Message>> conversations;
      std::size_t n = 1;
      for (const auto& m : members) {
        conversations.push_back(m.front()->observation.messages);
        n = std::max(n, m.size());
      }
      const auto t = Clock::now();
      auto sampled = policy->complete(conversations, static_cast<std::int64_t>(n),
                                      options.seed + static_cast<std::uint64_t>(turn), keys);
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
        if (!out.first_submission) out.first_submission = Clock::now();
        auto future = e->env->step(tr.completion);
        e->trajectory->transitions.push_back(std::move(tr));
        pending.emplace_back(e, std::move(future));
      }
    }
    return !pending.empty();
  }

  // Waits for the evaluations of the turn sampled last; the next turn follows.
  void wait_turn() {
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
    pending.clear();
    out.wait_seconds += seconds_since(t);
    ++turn;
  }
};

PendingRollouts::PendingRollouts(std::unique_ptr<State> state) : state_(std::move(state)) {}
PendingRollouts::PendingRollouts(PendingRollouts&&) noexcept = default;
PendingRollouts& PendingRollouts::operator=(PendingRollouts&&) noexcept = default;
PendingRollouts::~PendingRollouts() = default;
double PendingRollouts::sample_seconds() const { return state_ ? state_->out.sample_seconds : 0.0; }

PendingRollouts start_group_rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders,
                                     TokenCompleter& policy, const RolloutOptions& options) {
  if (!options.group_keys.empty() && options.group_keys.size() != builders.size())
    throw core::InvalidArgument(fmt::format("rollouts: group_keys has {} entries for {} builders",
                                            options.group_keys.size(), builders.size()));
  auto s = std::make_unique<PendingRollouts::State>();
  s->builders = &builders;
  s->policy = &policy;
  s->options = options;
  s->out.groups.resize(builders.size());
  for (std::size_t g = 0; g < builders.size(); ++g) {
    auto envs = builders[g]->make_envs();
    if (envs.size() > kMaxGroupSize)
      throw core::InvalidArgument(fmt::format("rollouts: a group of {} envs (at most {})", envs.size(), kMaxGroupSize));
    auto& group = s->out.groups[g];
    group.problem_id = builders[g]->problem().id;
    group.level = builders[g]->problem().level;
    // Sized before any pointer into it is taken.
    group.trajectories.resize(envs.size());
    for (std::size_t i = 0; i < envs.size(); ++i) {
      group.trajectories[i].problem_id = group.problem_id;
      Episode e;
      e.observation = envs[i]->initial_observation();
      e.env = std::move(envs[i]);
      e.trajectory = &group.trajectories[i];
      e.group = g;
      e.index = i;
      s->episodes.push_back(std::move(e));
    }
  }
  if (options.progress != nullptr)
    s->progress.emplace(options.progress_label,
                        static_cast<long>(s->episodes.size()) * std::max(1, options.max_turns), options.progress);
  // Every turn but the last waits here: the next turn's prompts carry its feedback.
  while (s->sample_turn() && s->turn + 1 < std::max(1, options.max_turns)) s->wait_turn();
  return PendingRollouts(std::move(s));
}

RolloutResult finish_group_rollouts(PendingRollouts pending) {
  auto& s = *pending.state_;
  while (!s.pending.empty()) {
    s.wait_turn();
    s.sample_turn();  // only for envs that go on past max_turns
  }
  if (s.progress) s.progress->finish();
  return std::move(s.out);
}

RolloutResult do_group_rollouts(const std::vector<std::unique_ptr<env::EnvGroupBuilder>>& builders,
                                TokenCompleter& policy, const RolloutOptions& options) {
  return finish_group_rollouts(start_group_rollouts(builders, policy, options));
}

}  // namespace kbrl::train
