#include "kbrl/conformance/evaluator_suite.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <latch>
#include <regex>
#include <thread>

#include "checks.hpp"
#include "kbrl/core/error.hpp"

namespace kbrl::conformance {

namespace {

using core::ErrorCategory;
using detail::Checks;
using detail::Clock;
using detail::Outcome;

// The method the derived candidates rename the original forward to; they call it through self,
// which keeps the kernel calls on what a static checker counts as the forward path.
constexpr std::string_view kInner = "_kbrl_conformance_forward";

std::size_t line_end(const std::string& s, std::size_t pos) {
  const auto nl = s.find('\n', pos);
  return nl == std::string::npos ? s.size() : nl;
}

bool blank_or_comment(std::string_view line) {
  const auto first = line.find_first_not_of(" \t\r");
  return first == std::string_view::npos || line[first] == '#';
}

// `correct` with ModelNew.forward renamed to kInner and a new forward, whose body is `body`
// (lines without indentation), put first in the class.
std::string wrap_forward(const std::string& correct, const std::vector<std::string>& body) {
  static const std::regex header(R"((^|\n)class[ \t]+ModelNew\b[^\n]*:[ \t]*(#[^\n]*)?(\n|$))");
  std::smatch m;
  if (!std::regex_search(correct, m, header))
    throw core::InvalidArgument("standard_candidates: the correct program has no top-level `class ModelNew ...:` line");
  const std::size_t body_start = static_cast<std::size_t>(m.position(0) + m.length(0));
  // The class body's indentation: that of its first line with code.
  std::string indent;
  std::size_t pos = body_start;
  while (pos < correct.size()) {
    const std::size_t end = line_end(correct, pos);
    const std::string_view line(correct.data() + pos, end - pos);
    if (!blank_or_comment(line)) {
      indent = std::string(line.substr(0, line.find_first_not_of(" \t")));
      break;
    }
    pos = end + 1;
  }
  if (indent.empty()) throw core::InvalidArgument("standard_candidates: class ModelNew has no indented body");
  // Its forward: a `def forward(` at the body's indentation before the class ends (the first
  // line with code that is indented less).
  std::size_t forward = std::string::npos;
  for (pos = body_start; pos < correct.size();) {
    const std::size_t end = line_end(correct, pos);
    const std::string_view line(correct.data() + pos, end - pos);
    if (!blank_or_comment(line)) {
      if (line.substr(0, indent.size()) != indent) break;
      if (line.substr(indent.size()).starts_with("def forward(")) {
        forward = pos + indent.size() + 4;  // at "forward("
        break;
      }
    }
    pos = end + 1;
  }
  if (forward == std::string::npos)
    throw core::InvalidArgument("standard_candidates: class ModelNew of the correct program defines no forward method");
  std::string out = correct;
  out.replace(forward, 7, kInner);
  std::string method = indent + "def forward(self, *args, **kwargs):\n";
  for (const auto& line : body) method += indent + indent + line + "\n";
  method += "\n";
  out.insert(body_start, method);
  return out;
}

std::string call_inner() { return fmt::format("return self.{}(*args, **kwargs)", kInner); }

std::string category_names(const std::vector<ErrorCategory>& categories) {
  std::string s;
  for (auto c : categories) s += (s.empty() ? "" : " or ") + std::string(core::to_string(c));
  return s;
}

// The request the suite sends for one case.
core::EvalRequest request_for(const EvaluatorSuiteOptions& o, const CandidateCase& c, std::string id) {
  core::EvalRequest r = o.base;
  r.request_id = std::move(id);
  r.candidate_source = c.source;
  if (c.run_timeout_s) r.options.run_timeout_s = *c.run_timeout_s;
  return r;
}

std::string prefix_of(const EvaluatorSuiteOptions& o) {
  return o.base.request_id.empty() ? std::string("conformance") : o.base.request_id;
}

// One submitted request and what came of it.
struct Submission {
  const CandidateCase* candidate = nullptr;
  core::EvalRequest request;
  std::future<core::EvalResult> future;
  std::string submit_error;  // submit() threw
  Outcome<core::EvalResult> outcome;
};

void submit_one(eval::Evaluator& ev, Submission& s) {
  try {
    s.future = ev.submit(s.request);
  } catch (...) {
    s.submit_error = detail::describe(std::current_exception());
  }
}

void wait_all(std::vector<Submission>& subs, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  for (auto& s : subs)
    if (s.submit_error.empty()) s.outcome = detail::wait_for_value(s.future, deadline);
}

// The ids an answered submission came back with.
void check_ids(Checks& checks, const Submission& s) {
  const auto& r = *s.outcome.value;
  checks.expect(r.request_id == s.request.request_id,
                fmt::format("request '{}' came back as request '{}'", s.request.request_id, r.request_id));
  checks.expect(r.problem_id == s.request.problem.id,
                fmt::format("request '{}': problem_id '{}', expected '{}'", s.request.request_id, r.problem_id,
                            s.request.problem.id));
}

void check_category(Checks& checks, const Submission& s) {
  const auto& r = *s.outcome.value;
  const auto& accepted = s.candidate->categories;
  if (std::find(accepted.begin(), accepted.end(), r.error_category) == accepted.end())
    checks.fail(fmt::format("{} candidate ('{}'): error category {}, expected {}{}", s.candidate->name,
                            s.request.request_id, core::to_string(r.error_category), category_names(accepted),
                            r.error_message.empty() ? "" : " (message: " + r.error_message.substr(0, 300) + ")"));
}

void check_coherent(Checks& checks, const Submission& s) {
  const auto& r = *s.outcome.value;
  const std::string who = fmt::format("{} candidate ('{}', {})", s.candidate->name, s.request.request_id,
                                      core::to_string(r.error_category));
  checks.expect(r.correct == (r.error_category == ErrorCategory::none),
                who + ": correct must be true exactly when the error category is none");
  if (r.correct)
    checks.expect(r.format_ok && r.compiled && r.static_ok, who + ": a correct result must be format_ok, static_ok and compiled");
  if (r.error_category == ErrorCategory::format)
    checks.expect(!r.format_ok && !r.compiled, who + ": a format failure can be neither format_ok nor compiled");
  if (r.error_category == ErrorCategory::compile || r.error_category == ErrorCategory::static_check)
    checks.expect(!r.compiled, who + ": a build or static-check failure cannot be compiled");
  if (r.error_category != ErrorCategory::none)
    checks.expect(!r.error_message.empty(), who + ": a failed evaluation must say why (error_message is empty)");
  checks.expect(r.trials_passed >= 0 && r.trials_passed <= std::max(r.trials_total, 0),
                fmt::format("{}: trials_passed {} of {}", who, r.trials_passed, r.trials_total));
}

// The cases the checks that submit many requests use: those named, else the quick ones (not the hang).
std::vector<const CandidateCase*> repeated_cases(const std::vector<CandidateCase>& cases,
                                                 const std::vector<std::string>& named) {
  std::vector<const CandidateCase*> out;
  for (const auto& name : named) {
    const auto it = std::find_if(cases.begin(), cases.end(), [&](const CandidateCase& c) { return c.name == name; });
    if (it == cases.end()) throw core::InvalidArgument(fmt::format("repeated_cases: no candidate is named '{}'", name));
    out.push_back(&*it);
  }
  if (!out.empty()) return out;
  for (const auto& c : cases)
    if (!c.run_timeout_s) out.push_back(&c);
  if (out.empty())
    for (const auto& c : cases) out.push_back(&c);
  return out;
}

}  // namespace

std::vector<std::string_view> evaluator_check_names() {
  using namespace evaluator_checks;
  return {submit_never_throws, one_result_per_request, request_ids_echoed,  error_categories,
          results_coherent,    evaluate_keeps_order,   concurrent_submit,   destruction_answers_pending};
}

std::vector<CandidateCase> standard_candidates(const std::string& correct_source, double hang_timeout_s) {
  static const std::regex model_new(R"(\bModelNew\b)");
  const std::string inner = call_inner();
  std::vector<CandidateCase> cases;
  cases.push_back({"correct", correct_source, {ErrorCategory::none}, std::nullopt});
  cases.push_back({"empty", "", {ErrorCategory::format}, std::nullopt});
  cases.push_back({"no_model_new", std::regex_replace(correct_source, model_new, "ModelOld"), {ErrorCategory::format}, std::nullopt});
  cases.push_back({"syntax_error", correct_source + "\n\ndef _kbrl_conformance_unparsable(:\n    pass\n",
                   {ErrorCategory::compile}, std::nullopt});
  cases.push_back({"raises",
                   wrap_forward(correct_source, {"raise RuntimeError(\"kbrl conformance: this candidate raises on purpose\")", inner}),
                   {ErrorCategory::runtime}, std::nullopt});
  cases.push_back({"wrong_output",
                   wrap_forward(correct_source, {fmt::format("out = self.{}(*args, **kwargs)", kInner),
                                                 "if isinstance(out, (tuple, list)):",
                                                 "    return type(out)(o + 1 for o in out)", "return out + 1"}),
                   {ErrorCategory::correctness}, std::nullopt});
  // faulthandler._sigsegv is CPython's own way to die by SIGSEGV (for its tests); unlike
  // os.abort or ctypes, no static-check rule is about it, so the crash reaches the run stage.
  cases.push_back({"crash", wrap_forward(correct_source, {"import faulthandler", "faulthandler._sigsegv()", inner}),
                   {ErrorCategory::crash}, std::nullopt});
  cases.push_back({"hang", wrap_forward(correct_source, {"while True:", "    pass", inner}), {ErrorCategory::timeout},
                   hang_timeout_s});
  return cases;
}

Report run_evaluator_suite(const EvaluatorSuiteOptions& options) {
  namespace names = evaluator_checks;
  Report report;
  Checks checks(report);
  const std::string prefix = prefix_of(options);

  std::unique_ptr<eval::Evaluator> owned;
  eval::Evaluator* ev = options.evaluator;
  std::vector<CandidateCase> cases = options.candidates;
  std::vector<const CandidateCase*> quick;
  std::string setup_error;
  try {
    if (cases.empty()) cases = standard_candidates(options.base.candidate_source);
    quick = repeated_cases(cases, options.repeated_cases);
    if (ev == nullptr) {
      if (!options.make_evaluator) throw core::InvalidArgument("neither evaluator nor make_evaluator is set");
      owned = options.make_evaluator();
      ev = owned.get();
      if (ev == nullptr) throw core::InvalidArgument("make_evaluator returned null");
    }
  } catch (...) {
    setup_error = detail::describe(std::current_exception());
  }
  if (!setup_error.empty()) {
    for (auto name : evaluator_check_names()) report.failures.push_back({std::string(name), "suite set-up: " + setup_error});
    return report;
  }

  // Every candidate at once, read afterwards.
  std::vector<Submission> subs(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    subs[i].candidate = &cases[i];
    subs[i].request = request_for(options, cases[i], fmt::format("{}/{}", prefix, cases[i].name));
    submit_one(*ev, subs[i]);
  }
  wait_all(subs, options.result_timeout);
  auto answered = [](const Submission& s) { return s.outcome.value.has_value(); };

  checks.run(names::submit_never_throws, [&] {
    for (const auto& s : subs)
      if (!s.submit_error.empty())
        checks.fail(fmt::format("submit() threw for the {} candidate ('{}'): {}", s.candidate->name, s.request.request_id,
                                s.submit_error));
  });
  checks.run(names::one_result_per_request, [&] {
    for (const auto& s : subs)
      if (s.submit_error.empty() && !answered(s))
        checks.fail(fmt::format("the {} candidate ('{}'): {}", s.candidate->name, s.request.request_id, s.outcome.error));
  });
  checks.run(names::request_ids_echoed, [&] {
    for (const auto& s : subs)
      if (answered(s)) check_ids(checks, s);
  });
  checks.run(names::error_categories, [&] {
    for (const auto& s : subs)
      if (answered(s)) check_category(checks, s);
  });
  checks.run(names::results_coherent, [&] {
    for (const auto& s : subs)
      if (answered(s)) check_coherent(checks, s);
  });

  checks.run(names::evaluate_keeps_order, [&] {
    // Reversed, so that an evaluator answering in its own order (e.g. failures first) shows.
    std::vector<core::EvalRequest> requests;
    for (auto it = quick.rbegin(); it != quick.rend(); ++it)
      requests.push_back(request_for(options, **it, fmt::format("{}/order/{}-{}", prefix, requests.size(), (*it)->name)));
    // evaluate() waits for every result without a deadline: after an evaluator that lost results
    // in the first batch it could wait forever, so it is not called then.
    const bool lost = std::any_of(subs.begin(), subs.end(), [](const Submission& s) { return s.outcome.timed_out; });
    if (lost) return checks.skip("results of the first batch never came (see one_result_per_request)");
    std::optional<std::vector<core::EvalResult>> answer;
    try {
      answer = ev->evaluate(requests);
    } catch (...) {
      return checks.fail("evaluate() threw: " + detail::describe(std::current_exception()));
    }
    const auto& results = *answer;
    if (!checks.expect(results.size() == requests.size(),
                       fmt::format("evaluate() of {} requests returned {} results", requests.size(), results.size())))
      return;
    for (std::size_t i = 0; i < results.size(); ++i)
      checks.expect(results[i].request_id == requests[i].request_id,
                    fmt::format("evaluate(): result {} is request '{}', expected '{}'", i, results[i].request_id,
                                requests[i].request_id));
  });

  checks.run(names::concurrent_submit, [&] {
    const int threads = std::max(1, options.threads), per_thread = std::max(1, options.requests_per_thread);
    std::vector<std::vector<Submission>> by_thread(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t)
      for (int k = 0; k < per_thread; ++k) {
        Submission s;
        s.candidate = quick[static_cast<std::size_t>(t + k) % quick.size()];
        s.request = request_for(options, *s.candidate, fmt::format("{}/thread{}/{}-{}", prefix, t, k, s.candidate->name));
        by_thread[static_cast<std::size_t>(t)].push_back(std::move(s));
      }
    std::latch start(threads);
    std::vector<std::thread> pool;
    for (auto& mine : by_thread)
      pool.emplace_back([&] {
        start.arrive_and_wait();  // every thread calls submit at the same moment
        for (auto& s : mine) submit_one(*ev, s);
      });
    for (auto& t : pool) t.join();
    for (auto& mine : by_thread) {
      wait_all(mine, options.result_timeout);
      for (const auto& s : mine) {
        if (!s.submit_error.empty()) checks.fail(fmt::format("'{}': submit() threw: {}", s.request.request_id, s.submit_error));
        else if (!answered(s)) checks.fail(fmt::format("'{}': {}", s.request.request_id, s.outcome.error));
        else {
          check_ids(checks, s);
          check_category(checks, s);
        }
      }
    }
  });

  checks.run(names::destruction_answers_pending, [&] {
    if (!options.make_evaluator) return checks.skip("no make_evaluator given");
    std::unique_ptr<eval::Evaluator> doomed = options.make_evaluator();
    if (!checks.expect(doomed != nullptr, "make_evaluator returned null")) return;
    std::vector<Submission> pending(std::min<std::size_t>(quick.size(), 3));
    for (std::size_t i = 0; i < pending.size(); ++i) {
      pending[i].candidate = quick[i];
      pending[i].request = request_for(options, *quick[i], fmt::format("{}/destroyed/{}", prefix, quick[i]->name));
      submit_one(*doomed, pending[i]);
    }
    doomed.reset();
    wait_all(pending, options.result_timeout);
    for (const auto& s : pending) {
      if (!s.submit_error.empty()) checks.fail(fmt::format("'{}': submit() threw: {}", s.request.request_id, s.submit_error));
      else if (!answered(s))
        checks.fail(fmt::format("'{}' was pending when the evaluator was destroyed: {}", s.request.request_id, s.outcome.error));
      else check_ids(checks, s);
    }
  });
  return report;
}

}  // namespace kbrl::conformance
