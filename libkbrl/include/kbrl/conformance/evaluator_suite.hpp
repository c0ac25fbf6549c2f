// The Evaluator conformance suite: the contract of eval::Evaluator (evaluator.hpp) as checks
// that any implementation can run, a user's remote or batched evaluator included. Give it one
// problem with a correct candidate; it derives the bad candidates (syntax error, no ModelNew,
// raising, wrong outputs, a crash, a hang) and reports which checks pass. docs/conformance.md.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/conformance/report.hpp"
#include "kbrl/core/types.hpp"
#include "kbrl/eval/evaluator.hpp"

namespace kbrl::conformance {

// The checks, by name (Report uses these strings).
namespace evaluator_checks {
inline constexpr std::string_view submit_never_throws = "submit_never_throws";
inline constexpr std::string_view one_result_per_request = "one_result_per_request";
inline constexpr std::string_view request_ids_echoed = "request_ids_echoed";
inline constexpr std::string_view error_categories = "error_categories";
inline constexpr std::string_view results_coherent = "results_coherent";
inline constexpr std::string_view evaluate_keeps_order = "evaluate_keeps_order";
inline constexpr std::string_view concurrent_submit = "concurrent_submit";
inline constexpr std::string_view destruction_answers_pending = "destruction_answers_pending";
}  // namespace evaluator_checks
std::vector<std::string_view> evaluator_check_names();

// One candidate the suite submits and the error categories its result may carry ({none}: it
// must be correct).
struct CandidateCase {
  std::string name;
  std::string source;
  std::vector<core::ErrorCategory> categories;
  std::optional<double> run_timeout_s;  // replaces the request's run_timeout_s (the hang's is short)
};

// From one correct program for the problem (a top-level `class ModelNew` with a forward method):
//   correct       the program itself                                  -> none (correct)
//   empty         no program at all                                   -> format
//   no_model_new  the class renamed                                   -> format
//   syntax_error  the program with a line Python cannot parse         -> compile
//   raises        forward raises RuntimeError                         -> runtime
//   wrong_output  forward's outputs plus one                          -> correctness
//   crash         forward dies by SIGSEGV (faulthandler._sigsegv)     -> crash
//   hang          forward loops forever, run_timeout_s = hang_timeout_s -> timeout
// The derived programs keep the original forward on the forward path (renamed and called
// through self), so a static checker sees the same kernel calls as in the correct one.
// Throws core::InvalidArgument when the program has no class ModelNew or no forward in it.
std::vector<CandidateCase> standard_candidates(const std::string& correct_source, double hang_timeout_s = 5.0);

struct EvaluatorSuiteOptions {
  // The evaluator under test, used by every check but the destruction one. Null: one is made
  // with make_evaluator and kept for the whole run.
  eval::Evaluator* evaluator = nullptr;
  // A fresh evaluator that the destruction check destroys with requests pending; without it
  // that check is skipped.
  std::function<std::unique_ptr<eval::Evaluator>()> make_evaluator;
  // Problem, language, precision and options of every request; candidate_source is a correct
  // program for the problem and request_id the prefix of the suite's request ids.
  core::EvalRequest base;
  std::vector<CandidateCase> candidates;  // empty: standard_candidates(base.candidate_source)
  // The candidates (by name) that evaluate_keeps_order, concurrent_submit and the destruction
  // check submit again. Empty: every one without a run_timeout_s of its own (not the hang). An
  // evaluator that takes seconds per candidate can name the cheap ones here.
  std::vector<std::string> repeated_cases;
  int threads = 4;                        // concurrent_submit: threads submitting at once...
  int requests_per_thread = 2;            // ...this many requests each
  // How long the suite waits for one batch of results before it counts them as lost.
  std::chrono::milliseconds result_timeout = std::chrono::minutes(10);
};

// Checks, in this order:
//   submit_never_throws          submit() of every candidate, bad ones included, returns a future
//   one_result_per_request       every future becomes ready and holds a result, not an exception
//   request_ids_echoed           each result carries its request's request_id and problem id
//   error_categories             each candidate's result has one of its categories (correct iff none)
//   results_coherent             stage flags agree with the category; a failure has a message
//   evaluate_keeps_order         evaluate() returns the results in request order
//   concurrent_submit            submit() from several threads at once: every request answered, ids right
//   destruction_answers_pending  destroying an evaluator with requests pending still answers them
// The candidates are submitted together and read afterwards, so an evaluator that blocks in
// submit() until its result is ready still passes (the contract allows it) but runs them one by one.
Report run_evaluator_suite(const EvaluatorSuiteOptions& options);

}  // namespace kbrl::conformance
