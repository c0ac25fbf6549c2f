#include "kbrl/conformance/env_suite.hpp"

#include <fmt/format.h>

#include <cmath>
#include <optional>
#include <set>

#include "checks.hpp"
#include "kbrl/core/error.hpp"

namespace kbrl::conformance {

namespace {

using detail::Checks;
using detail::Clock;

// What is wrong with an observation the policy is to answer (nothing: empty).
std::vector<std::string> observation_problems(const env::Observation& o) {
  static const std::set<std::string> roles = {"system", "user", "assistant", "tool"};
  std::vector<std::string> problems;
  if (o.messages.empty()) return {"it has no messages"};
  for (std::size_t i = 0; i < o.messages.size(); ++i)
    if (!roles.contains(o.messages[i].role))
      problems.push_back(fmt::format("message {} has the unknown role '{}'", i, o.messages[i].role));
  if (o.messages.back().role != "user")
    problems.push_back(fmt::format("it ends with a '{}' message, not the user's turn", o.messages.back().role));
  if (o.messages.back().content.empty()) problems.push_back("its last message is empty");
  return problems;
}

// One step as the suite saw it.
struct Step {
  std::optional<env::StepResult> result;
  std::string error;            // step() threw, or the future did not give a result
  bool step_threw = false;
  std::size_t submitted = 0;    // requests the evaluator received during step() (with the probe)
};

struct Episode {
  std::string label;  // "env 0 of the first group"
  std::vector<Step> steps;
  bool done = false;

  bool ok() const { return !steps.empty() && steps.back().error.empty(); }
};

class Runner {
 public:
  explicit Runner(const EnvSuiteOptions& o) : o_(o) {}

  std::size_t probe() const { return o_.submitted_requests ? o_.submitted_requests() : 0; }

  const core::Completion& answer(std::size_t turn) const { return o_.answers[turn % o_.answers.size()]; }

  // Calls step() and records what it did, without reading the future.
  std::future<env::StepResult> start(env::Env& e, const core::Completion& c, Step& s) const {
    const std::size_t before = probe();
    std::future<env::StepResult> f;
    try {
      f = e.step(c);
    } catch (...) {
      s.step_threw = true;
      s.error = "step() threw: " + detail::describe(std::current_exception());
    }
    s.submitted = probe() - before;
    return f;
  }

  void finish(std::future<env::StepResult>& f, Step& s) const {
    if (s.step_threw) return;
    auto outcome = detail::wait_for_value(f, Clock::now() + o_.result_timeout);
    if (outcome.value) s.result = std::move(outcome.value);
    else s.error = outcome.error;
  }

  // Plays `e` to its end (or max_steps, or an error), starting with an already started step.
  void play(env::Env& e, Episode& ep, std::optional<std::pair<std::future<env::StepResult>, Step>> first = {}) const {
    for (int k = static_cast<int>(ep.steps.size()); k < o_.max_steps; ++k) {
      Step s;
      std::future<env::StepResult> f;
      if (first) {
        f = std::move(first->first);
        s = std::move(first->second);
        first.reset();
      } else {
        f = start(e, answer(static_cast<std::size_t>(k)), s);
      }
      finish(f, s);
      ep.steps.push_back(std::move(s));
      if (!ep.steps.back().result) return;
      if (ep.steps.back().result->done) {
        ep.done = true;
        return;
      }
    }
  }

 private:
  const EnvSuiteOptions& o_;
};

// Expects step() on a finished or busy env to throw core::InvalidArgument; `what` says which.
void expect_refused(Checks& checks, env::Env& e, const core::Completion& c, const std::string& what, const Runner& runner) {
  const std::size_t before = runner.probe();
  try {
    [[maybe_unused]] auto refused = e.step(c);
    checks.fail(what + ": step() returned a future instead of throwing core::InvalidArgument");
  } catch (const core::InvalidArgument&) {
  } catch (...) {
    checks.fail(fmt::format("{}: step() threw something other than core::InvalidArgument: {}", what,
                            detail::describe(std::current_exception())));
  }
  checks.expect(runner.probe() == before, what + ": the refused step submitted an evaluation");
}

void check_steps(Checks& checks, const Episode& ep, const EnvSuiteOptions& o, const std::string& problem_id) {
  for (std::size_t k = 0; k < ep.steps.size(); ++k) {
    if (!ep.steps[k].result) continue;
    const auto& r = *ep.steps[k].result;
    const std::string where = fmt::format("{}, step {}", ep.label, k + 1);
    checks.expect(std::isfinite(r.reward), fmt::format("{}: reward {} is not finite", where, r.reward));
    checks.expect(r.reward == r.breakdown.total,
                  fmt::format("{}: reward {} is not breakdown.total {}", where, r.reward, r.breakdown.total));
    for (const auto& key : o.required_metrics)
      checks.expect(r.metrics.contains(key), fmt::format("{}: metric '{}' missing", where, key));
    for (const auto& [key, value] : r.metrics)
      checks.expect(std::isfinite(value), fmt::format("{}: metric '{}' = {} is not finite", where, key, value));
    if (const auto t = r.metrics.find("turn"); t != r.metrics.end())
      checks.expect(t->second == static_cast<double>(k + 1), fmt::format("{}: metric turn = {}", where, t->second));
    if (r.done) {
      checks.expect(!r.next.has_value(), where + ": done, yet it has a next observation");
    } else if (checks.expect(r.next.has_value(), where + ": not done, yet it has no next observation")) {
      for (const auto& p : observation_problems(*r.next)) checks.fail(where + ": next observation: " + p);
    }
    checks.expect(r.eval.problem_id == problem_id,
                  fmt::format("{}: eval.problem_id '{}', the group's problem is '{}'", where, r.eval.problem_id, problem_id));
    checks.expect(!r.eval.request_id.empty(), where + ": eval.request_id is empty");
  }
}

std::vector<std::string> request_ids(const Episode& ep) {
  std::vector<std::string> ids;
  for (const auto& s : ep.steps)
    if (s.result) ids.push_back(s.result->eval.request_id);
  return ids;
}

}  // namespace

std::vector<std::string_view> env_check_names() {
  using namespace env_checks;
  return {group_makes_envs,       initial_observation_well_formed, step_returns_a_future, step_submits_before_returning,
          answer_without_program_is_a_result, episodes_end, step_results_well_formed, step_after_done_throws,
          step_before_read_throws, envs_are_independent};
}

std::vector<std::string> kernelbench_step_metrics() {
  return {"kernel/format_ok", "kernel/compiled", "kernel/correct", "kernel/cheat", "turn"};
}

core::Completion completion_of(std::string text) {
  core::Completion c;
  c.text = std::move(text);
  return c;
}

Report run_env_suite(const EnvSuiteOptions& o) {
  namespace names = env_checks;
  Report report;
  Checks checks(report);
  const Runner runner(o);

  std::unique_ptr<env::EnvGroupBuilder> group;
  std::vector<std::unique_ptr<env::Env>> envs;
  std::string setup_error;
  try {
    if (!o.make_group) throw core::InvalidArgument("make_group is not set");
    if (o.answers.empty()) throw core::InvalidArgument("answers is empty");
    if (o.max_steps < 1) throw core::InvalidArgument("max_steps must be at least 1");
    group = o.make_group();
    if (!group) throw core::InvalidArgument("make_group returned null");
    envs = group->make_envs();
  } catch (...) {
    setup_error = detail::describe(std::current_exception());
  }
  if (!setup_error.empty()) {
    for (auto name : env_check_names()) report.failures.push_back({std::string(name), "suite set-up: " + setup_error});
    return report;
  }
  const std::string problem_id = group->problem().id;

  checks.run(names::group_makes_envs, [&] {
    checks.expect(!envs.empty(), "make_envs() returned no env");
    std::set<const env::Env*> distinct;
    for (std::size_t i = 0; i < envs.size(); ++i) {
      checks.expect(envs[i] != nullptr, fmt::format("make_envs() returned null as env {}", i));
      if (envs[i]) checks.expect(distinct.insert(envs[i].get()).second, fmt::format("env {} is an env given before", i));
    }
    checks.expect(!problem_id.empty(), "problem().id is empty");
    for (const auto& tag : group->logging_tags()) checks.expect(!tag.empty(), "logging_tags() has an empty tag");
  });
  // The checks below play episodes on envs that exist.
  if (envs.empty() || envs.front() == nullptr) {
    for (auto name : env_check_names())
      if (name != names::group_makes_envs) report.skipped.push_back({std::string(name), "make_envs() gave no usable env"});
    return report;
  }
  std::erase(envs, nullptr);

  std::optional<env::Observation> first_observation;
  checks.run(names::initial_observation_well_formed, [&] {
    for (std::size_t i = 0; i < envs.size(); ++i) {
      const auto obs = envs[i]->initial_observation();
      for (const auto& p : observation_problems(obs)) checks.fail(fmt::format("env {}: {}", i, p));
      if (!first_observation) first_observation = obs;
      else
        checks.expect(obs.messages == first_observation->messages,
                      fmt::format("env {} shows another conversation than env 0 of the same group", i));
    }
  });

  // Env 0 plays its episode alone.
  Episode first{"env 0 of the group", {}, false};
  runner.play(*envs[0], first);

  checks.run(names::step_returns_a_future, [&] {
    const Step& s = first.steps.front();
    if (!s.error.empty()) checks.fail("first step of env 0: " + s.error);
  });

  // Env 1 (or an env of a second make_envs() when the group has one) steps twice before reading.
  std::vector<std::unique_ptr<env::Env>> spare;
  env::Env* second_env = envs.size() > 1 ? envs[1].get() : nullptr;
  std::string second_source = "env 1 of the group";
  if (second_env == nullptr) {
    spare = group->make_envs();
    second_source = "env 0 of a second make_envs()";
    if (!spare.empty()) second_env = spare.front().get();
  }
  Episode second{second_source, {}, false};
  checks.run(names::step_before_read_throws, [&] {
    if (second_env == nullptr) return checks.skip("no second env to play");
    Step s;
    auto f = runner.start(*second_env, runner.answer(0), s);
    if (s.step_threw) {
      second.steps.push_back(std::move(s));
      return checks.fail(second.label + ": the first step threw: " + second.steps.back().error);
    }
    expect_refused(checks, *second_env, runner.answer(1), second.label + ", a step before the first one's result was read",
                   runner);
    runner.play(*second_env, second, std::make_pair(std::move(f), std::move(s)));
    checks.expect(second.ok(), second.label + ": after the refused step the episode did not go on: " +
                                   (second.steps.empty() ? std::string("no step") : second.steps.back().error));
  });

  checks.run(names::step_submits_before_returning, [&] {
    if (!o.submitted_requests) return checks.skip("no submitted_requests probe given");
    for (const Episode* ep : {&first, &second})
      for (std::size_t k = 0; k < ep->steps.size(); ++k) {
        const Step& s = ep->steps[k];
        if (!s.result || s.result->eval.error_category == core::ErrorCategory::format) continue;
        checks.expect(s.submitted >= 1, fmt::format("{}, step {}: step() returned before submitting its evaluation "
                                                    "(evaluated, yet nothing was submitted during step())",
                                                    ep->label, k + 1));
      }
  });

  checks.run(names::step_after_done_throws, [&] {
    if (!first.done) return checks.skip("env 0's episode did not end (see episodes_end)");
    expect_refused(checks, *envs[0], runner.answer(0), "env 0 after its episode ended", runner);
  });

  // A second make_envs() of the same group: fresh episodes, whatever became of the first ones.
  Episode third{"env 0 of another make_envs()", {}, false};
  checks.run(names::envs_are_independent, [&] {
    std::vector<std::unique_ptr<env::Env>> again = group->make_envs();
    if (!checks.expect(!again.empty() && again.front() != nullptr, "a second make_envs() gave no env")) return;
    checks.expect(again.front().get() != envs[0].get(), "a second make_envs() gave env 0 of the first call again");
    if (first_observation)
      checks.expect(again.front()->initial_observation().messages == first_observation->messages,
                    "a second make_envs() shows another conversation");
    Step s;
    auto f = runner.start(*again.front(), runner.answer(0), s);
    runner.finish(f, s);
    third.steps.push_back(std::move(s));
    if (!third.steps.back().error.empty())
      checks.fail(fmt::format("{} (after env 0 of the first call {}): {}", third.label,
                              first.done ? "had ended" : "had stepped", third.steps.back().error));
    if (second_env != nullptr && envs.size() > 1) {
      if (!second.steps.empty() && second.steps.front().step_threw)
        checks.fail("env 1 of the group refused its first step once env 0 had stepped: " + second.steps.front().error);
      std::set<std::string> ids;
      for (const auto& id : request_ids(first)) ids.insert(id);
      for (const auto& id : request_ids(second))
        checks.expect(!ids.contains(id), fmt::format("env 0 and env 1 of the group both used request id '{}'", id));
    }
  });

  Episode formatless{"an env answered without a program", {}, false};
  checks.run(names::answer_without_program_is_a_result, [&] {
    std::vector<std::unique_ptr<env::Env>> fresh = group->make_envs();
    if (!checks.expect(!fresh.empty() && fresh.front() != nullptr, "make_envs() gave no env")) return;
    Step s;
    auto f = runner.start(*fresh.front(), o.answer_without_program, s);
    runner.finish(f, s);
    formatless.steps.push_back(std::move(s));
    const Step& st = formatless.steps.back();
    if (!st.error.empty()) return checks.fail(st.error);
    checks.expect(st.result->eval.error_category == core::ErrorCategory::format,
                  fmt::format("the result's error category is {}, not format",
                              core::to_string(st.result->eval.error_category)));
    if (o.submitted_requests) checks.expect(st.submitted == 0, "an answer without a program was submitted for evaluation");
  });

  checks.run(names::episodes_end, [&] {
    for (const Episode* ep : {&first, &second}) {
      if (ep->steps.empty()) continue;
      if (!ep->ok()) checks.fail(fmt::format("{}: step {}: {}", ep->label, ep->steps.size(), ep->steps.back().error));
      else if (!ep->done) checks.fail(fmt::format("{}: not done after {} steps (max_steps)", ep->label, ep->steps.size()));
    }
  });

  checks.run(names::step_results_well_formed, [&] {
    for (const Episode* ep : {&first, &second, &third, &formatless}) check_steps(checks, *ep, o, problem_id);
    // Ids are unique within one make_envs(); a second call may start over (a new batch does).
    std::set<std::string> ids;
    std::vector<const Episode*> same_call = {&first};
    if (spare.empty()) same_call.push_back(&second);
    for (const Episode* ep : same_call)
      for (const auto& id : request_ids(*ep))
        checks.expect(ids.insert(id).second, fmt::format("request id '{}' used twice within one make_envs()", id));
  });
  return report;
}

}  // namespace kbrl::conformance
