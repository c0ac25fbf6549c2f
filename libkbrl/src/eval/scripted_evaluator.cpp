#include "kbrl/eval/scripted_evaluator.hpp"

#include <fmt/format.h>

#include <utility>

namespace kbrl::eval {

core::EvalResult scripted_result(core::ErrorCategory category, std::string message, double speedup) {
  using core::ErrorCategory;
  core::EvalResult e;
  e.error_category = category;
  e.error_message = std::move(message);
  e.format_ok = category != ErrorCategory::format;
  e.static_ok = category != ErrorCategory::static_check;
  e.compiled = category != ErrorCategory::format && category != ErrorCategory::static_check &&
               category != ErrorCategory::compile && category != ErrorCategory::internal;
  if (category == ErrorCategory::none) {
    e.correct = e.correct_on_problem_inputs = true;
    e.trials_passed = e.trials_total = 5;
    const double ms = 1.0 / speedup;
    e.runtime = core::TimingStats{ms, ms, 0, ms, ms, 10};
    e.ref_runtime = core::TimingStats{1.0, 1.0, 0, 1.0, 1.0, 10};
    e.speedup = speedup;
  } else if (e.error_message.empty()) {
    e.error_message = fmt::format("scripted {} failure", core::to_string(category));
  }
  if (category == ErrorCategory::correctness) {
    e.trials_total = 5;
    e.max_abs_error = 1.0;
  }
  return e;
}

ScriptedEvaluator::~ScriptedEvaluator() {
  std::lock_guard lock(mu_);
  for (auto& h : held_) {
    core::EvalResult e = scripted_result(core::ErrorCategory::internal,
                                         "the evaluator was destroyed with this request pending");
    e.request_id = h.result.request_id;
    e.problem_id = h.result.problem_id;
    e.device = h.result.device;
    h.promise.set_value(std::move(e));
  }
}

ScriptedEvaluator& ScriptedEvaluator::when(Match match, core::EvalResult result) {
  std::lock_guard lock(mu_);
  rules_.push_back({std::move(match), std::move(result)});
  return *this;
}

ScriptedEvaluator& ScriptedEvaluator::when_candidate_contains(std::string text, core::EvalResult result) {
  return when([text = std::move(text)](const core::EvalRequest& r) { return r.candidate_source.find(text) != std::string::npos; },
              std::move(result));
}

ScriptedEvaluator& ScriptedEvaluator::then(core::EvalResult result) {
  std::lock_guard lock(mu_);
  queue_.push_back(std::move(result));
  return *this;
}

ScriptedEvaluator& ScriptedEvaluator::otherwise(core::EvalResult result) {
  std::lock_guard lock(mu_);
  fallback_.assign(1, std::move(result));
  return *this;
}

void ScriptedEvaluator::hold() {
  std::lock_guard lock(mu_);
  holding_ = true;
}

void ScriptedEvaluator::release() {
  std::vector<Held> answer;
  {
    std::lock_guard lock(mu_);
    holding_ = false;
    answer.swap(held_);
  }
  // Outside the lock: a continuation that runs on set_value may submit again.
  for (auto& h : answer) h.promise.set_value(std::move(h.result));
}

core::EvalResult ScriptedEvaluator::result_for_locked(const core::EvalRequest& request) {
  core::EvalResult e;
  bool found = false;
  for (const auto& rule : rules_) {
    if (rule.match(request)) {
      e = rule.result;
      found = true;
      break;
    }
  }
  if (!found && !queue_.empty()) {
    e = std::move(queue_.front());
    queue_.pop_front();
    found = true;
  }
  if (!found && !fallback_.empty()) {
    e = fallback_.front();
    found = true;
  }
  if (!found)
    e = scripted_result(core::ErrorCategory::internal,
                        fmt::format("ScriptedEvaluator: no result scripted for request '{}'", request.request_id));
  e.request_id = request.request_id;
  e.problem_id = request.problem.id;
  if (e.device.empty()) e.device = "scripted";
  return e;
}

std::future<core::EvalResult> ScriptedEvaluator::submit(core::EvalRequest request) {
  std::promise<core::EvalResult> promise;
  auto future = promise.get_future();
  std::lock_guard lock(mu_);
  core::EvalResult e = result_for_locked(request);
  seen_.push_back(std::move(request));
  if (holding_) held_.push_back({std::move(promise), std::move(e)});
  else promise.set_value(std::move(e));
  return future;
}

std::vector<core::EvalRequest> ScriptedEvaluator::requests() const {
  std::lock_guard lock(mu_);
  return seen_;
}

std::size_t ScriptedEvaluator::submitted() const {
  std::lock_guard lock(mu_);
  return seen_.size();
}

std::size_t ScriptedEvaluator::pending() const {
  std::lock_guard lock(mu_);
  return held_.size();
}

}  // namespace kbrl::eval
