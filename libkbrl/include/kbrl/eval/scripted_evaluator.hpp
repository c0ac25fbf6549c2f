// ScriptedEvaluator: an Evaluator whose results the caller chooses, for testing what sits on top
// of an evaluator (environments, rollouts, a training loop) without compiling or running
// anything. It keeps the Evaluator contract (one result per request, the request's ids echoed,
// safe from several threads, pending requests answered when it is destroyed), records every
// request it sees, and can hold results back to test code that must not wait on them.
#pragma once

#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/eval/evaluator.hpp"

namespace kbrl::eval {

// A result of `category` with the stage flags an evaluator sets for it: `none` is a correct,
// compiled kernel (with `speedup` and timings built from it); format failures have nothing
// set; compile and static-check failures stop before compiled; every later stage has compiled.
core::EvalResult scripted_result(core::ErrorCategory category, std::string message = {}, double speedup = 1.0);

class ScriptedEvaluator : public Evaluator {
 public:
  using Match = std::function<bool(const core::EvalRequest&)>;

  ScriptedEvaluator() = default;
  // Held requests are answered with an `internal` result, as LocalEvaluator answers its pending ones.
  ~ScriptedEvaluator() override;
  ScriptedEvaluator(const ScriptedEvaluator&) = delete;
  ScriptedEvaluator& operator=(const ScriptedEvaluator&) = delete;

  // Where a request's result comes from, first that applies: the first rule added with when()
  // that matches it; the next result queued with then(); the one set with otherwise(); else an
  // `internal` result saying that nothing was scripted for it. Whatever the source, request_id
  // and problem_id are the request's, and device is "scripted" unless the result names one.
  ScriptedEvaluator& when(Match match, core::EvalResult result);
  // when() for the requests whose candidate program contains `text`.
  ScriptedEvaluator& when_candidate_contains(std::string text, core::EvalResult result);
  ScriptedEvaluator& then(core::EvalResult result);
  ScriptedEvaluator& otherwise(core::EvalResult result);

  // While held, submit() returns futures that stay pending until release().
  void hold();
  // Answers every held request, in submission order, and stops holding.
  void release();

  std::future<core::EvalResult> submit(core::EvalRequest request) override;

  std::vector<core::EvalRequest> requests() const;  // every request seen, in submission order
  std::size_t submitted() const;
  std::size_t pending() const;  // held and not yet answered

 private:
  struct Rule {
    Match match;
    core::EvalResult result;
  };
  struct Held {
    std::promise<core::EvalResult> promise;
    core::EvalResult result;
  };
  core::EvalResult result_for_locked(const core::EvalRequest& request);

  mutable std::mutex mu_;
  std::vector<Rule> rules_;
  std::deque<core::EvalResult> queue_;
  std::vector<core::EvalResult> fallback_;  // zero or one
  std::vector<core::EvalRequest> seen_;
  std::vector<Held> held_;
  bool holding_ = false;
};

}  // namespace kbrl::eval
