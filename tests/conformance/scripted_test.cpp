// The conformance suites on what needs no worker: ScriptedEvaluator (answering at once, from
// another thread, and holding its answers until destroyed), KernelBenchEnv and
// MultiTurnKernelBenchEnv on it. Then deliberately broken evaluators and envs, each of which the
// suites must report under the check that names its fault.
#include <kbrl/conformance/env_suite.hpp>
#include <kbrl/conformance/evaluator_suite.hpp>
#include <kbrl/core/error.hpp>
#include <kbrl/env/kernelbench_env.hpp>
#include <kbrl/eval/scripted_evaluator.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "conformance_catch.hpp"
#include "bundled_examples.hpp"

using namespace kbrl;
using kbrl::testing::answer_with;
using conformance::testing::require_all_passed;
using conformance::testing::require_caught;
using core::ErrorCategory;
namespace evc = conformance::evaluator_checks;
namespace envc = conformance::env_checks;

namespace {

core::EvalRequest base_request() {
  core::EvalRequest r;
  r.request_id = "scripted";
  r.problem = kbrl::testing::cumsum_problem();
  r.candidate_source = kbrl::testing::cumsum_correct();
  r.language = core::KernelLanguage::cpp;
  return r;
}

// Answers every standard candidate with the first category the suite accepts for it.
void script_standard_answers(eval::ScriptedEvaluator& ev) {
  for (const auto& c : conformance::standard_candidates(base_request().candidate_source))
    ev.when([source = c.source](const core::EvalRequest& r) { return r.candidate_source == source; },
            eval::scripted_result(c.categories.front()));
}

std::unique_ptr<eval::ScriptedEvaluator> scripted() {
  auto ev = std::make_unique<eval::ScriptedEvaluator>();
  script_standard_answers(*ev);
  return ev;
}

conformance::EvaluatorSuiteOptions suite_on(eval::Evaluator& ev, std::function<std::unique_ptr<eval::Evaluator>()> make = {}) {
  conformance::EvaluatorSuiteOptions o;
  o.evaluator = &ev;
  o.make_evaluator = std::move(make);
  o.base = base_request();
  o.result_timeout = std::chrono::seconds(5);
  return o;
}

// A factory whose evaluators hold every answer, so the destruction check destroys one with
// requests really pending.
std::unique_ptr<eval::Evaluator> held_scripted() {
  auto ev = scripted();
  ev->hold();
  return ev;
}

}  // namespace

TEST_CASE("the standard candidates keep the forward's kernel call and break it as named") {
  const auto cases = conformance::standard_candidates(base_request().candidate_source, 2.5);
  std::vector<std::string> names;
  for (const auto& c : cases) names.push_back(c.name);
  CHECK(names == std::vector<std::string>{"correct", "empty", "no_model_new", "syntax_error", "raises", "wrong_output",
                                          "crash", "hang"});
  for (const auto& c : cases) {
    INFO(c.name << ":\n" << c.source);
    if (c.name == "correct" || c.name == "empty" || c.name == "no_model_new" || c.name == "syntax_error") continue;
    // The original forward, renamed, is still there and called from the new one.
    CHECK(c.source.find("def _kbrl_conformance_forward(self, x):") != std::string::npos);
    CHECK(c.source.find("self._kbrl_conformance_forward(*args, **kwargs)") != std::string::npos);
    CHECK(c.source.find("    def forward(self, *args, **kwargs):\n        ") != std::string::npos);
  }
  CHECK(cases[2].source.find("ModelNew") == std::string::npos);
  CHECK(cases[7].run_timeout_s == 2.5);
  CHECK_THROWS_AS(conformance::standard_candidates("import torch\nclass Model2:\n    pass\n"), core::InvalidArgument);
  CHECK_THROWS_AS(conformance::standard_candidates("class ModelNew:\n    def __init__(self):\n        pass\n"),
                  core::InvalidArgument);
}

TEST_CASE("ScriptedEvaluator conforms to the Evaluator contract") {
  auto ev = scripted();
  const auto report = conformance::run_evaluator_suite(suite_on(*ev, held_scripted));
  require_all_passed(report, conformance::evaluator_check_names());
  CHECK(ev->submitted() > 10);
}

TEST_CASE("ScriptedEvaluator answering from another thread conforms to the Evaluator contract") {
  auto ev = scripted();
  ev->hold();
  std::atomic<bool> stop{false};
  std::thread answerer([&] {
    while (!stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ev->release();
      ev->hold();
    }
  });
  const auto report = conformance::run_evaluator_suite(suite_on(*ev, held_scripted));
  stop = true;
  answerer.join();
  require_all_passed(report, conformance::evaluator_check_names());
}

TEST_CASE("ScriptedEvaluator answers from rules, then its queue, then its fallback, and records requests") {
  eval::ScriptedEvaluator ev;
  ev.when_candidate_contains("CRASH", eval::scripted_result(ErrorCategory::crash))
      .then(eval::scripted_result(ErrorCategory::compile))
      .then(eval::scripted_result(ErrorCategory::none, {}, 2.0));
  auto r = base_request();
  const auto nothing = ev.evaluate({r})[0];
  CHECK(nothing.error_category == ErrorCategory::compile);
  r.request_id = "second";
  r.candidate_source = "CRASH";
  auto crash = ev.submit(r).get();
  CHECK(crash.error_category == ErrorCategory::crash);
  CHECK(crash.request_id == "second");
  CHECK(crash.problem_id == r.problem.id);
  CHECK(crash.device == "scripted");
  r.candidate_source = "fine";
  const auto correct = ev.submit(r).get();
  CHECK(correct.correct);
  CHECK(correct.speedup == 2.0);
  const auto unscripted = ev.submit(r).get();
  CHECK(unscripted.error_category == ErrorCategory::internal);
  CHECK(unscripted.error_message.find("no result scripted for request 'second'") != std::string::npos);
  ev.otherwise(eval::scripted_result(ErrorCategory::timeout));
  CHECK(ev.submit(r).get().error_category == ErrorCategory::timeout);
  CHECK(ev.submitted() == 5);
  CHECK(ev.requests()[1].candidate_source == "CRASH");

  ev.hold();
  auto held = ev.submit(r);
  CHECK(ev.pending() == 1);
  CHECK(held.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);
  ev.release();
  CHECK(held.get().error_category == ErrorCategory::timeout);
  CHECK(ev.pending() == 0);
}

TEST_CASE("the Evaluator suite reports a set-up it cannot run as failures of every check") {
  auto ev = scripted();
  auto options = suite_on(*ev);
  options.repeated_cases = {"correct", "no_such_case"};
  const auto report = conformance::run_evaluator_suite(options);
  CHECK(report.failed_checks().size() == conformance::evaluator_check_names().size());
  CHECK(report.summary().find("no candidate is named 'no_such_case'") != std::string::npos);
  CHECK(ev->submitted() == 0);

  options.repeated_cases = {"correct"};
  options.base.candidate_source = "print('no model here')\n";
  CHECK_FALSE(conformance::run_evaluator_suite(options).ok());
}

// ---- The suites catch broken evaluators.

namespace {

// Loses every third result: the promise dies unanswered (a worker's reply dropped on the floor).
class DroppingEvaluator : public eval::Evaluator {
 public:
  std::future<core::EvalResult> submit(core::EvalRequest r) override {
    if (++count_ % 3 == 0) return std::promise<core::EvalResult>().get_future();
    return inner_->submit(std::move(r));
  }

 private:
  std::unique_ptr<eval::ScriptedEvaluator> inner_ = scripted();
  std::atomic<int> count_{0};
};

// Throws from submit() for a program without ModelNew, as if a bad kernel were bad input.
class ThrowingEvaluator : public eval::Evaluator {
 public:
  std::future<core::EvalResult> submit(core::EvalRequest r) override {
    if (r.candidate_source.find("class ModelNew") == std::string::npos)
      throw core::InvalidArgument(r.request_id + ": the candidate defines no ModelNew");
    return inner_->submit(std::move(r));
  }

 private:
  std::unique_ptr<eval::ScriptedEvaluator> inner_ = scripted();
};

// Puts an exception into the future of a candidate that crashes.
class FutureThrowingEvaluator : public eval::Evaluator {
 public:
  std::future<core::EvalResult> submit(core::EvalRequest r) override {
    auto f = inner_->submit(std::move(r));
    const auto result = f.get();
    std::promise<core::EvalResult> p;
    if (result.error_category == ErrorCategory::crash)
      p.set_exception(std::make_exception_ptr(std::runtime_error("worker died")));
    else p.set_value(result);
    return p.get_future();
  }

 private:
  std::unique_ptr<eval::ScriptedEvaluator> inner_ = scripted();
};

// Keeps its promises and lets them die when destroyed, instead of answering them.
class ForgetfulEvaluator : public eval::Evaluator {
 public:
  std::future<core::EvalResult> submit(core::EvalRequest) override {
    std::lock_guard lock(mu_);
    pending_.emplace_back();
    return pending_.back().get_future();
  }

 private:
  std::mutex mu_;
  std::vector<std::promise<core::EvalResult>> pending_;
};

// Never answers at all.
class SilentEvaluator : public eval::Evaluator {
 public:
  std::future<core::EvalResult> submit(core::EvalRequest) override {
    std::lock_guard lock(mu_);
    pending_.emplace_back();
    return pending_.back().get_future();
  }
  ~SilentEvaluator() override {
    for (auto& p : pending_) p.set_value(eval::scripted_result(ErrorCategory::internal));
  }

 private:
  std::mutex mu_;
  std::vector<std::promise<core::EvalResult>> pending_;
};

// Forwards to a ScriptedEvaluator, then changes its answers with `edit`.
class EditingEvaluator : public eval::Evaluator {
 public:
  explicit EditingEvaluator(std::function<void(core::EvalResult&)> edit) : edit_(std::move(edit)) {}
  std::future<core::EvalResult> submit(core::EvalRequest r) override {
    auto result = inner_->submit(std::move(r)).get();
    edit_(result);
    std::promise<core::EvalResult> p;
    p.set_value(std::move(result));
    return p.get_future();
  }

 private:
  std::unique_ptr<eval::ScriptedEvaluator> inner_ = scripted();
  std::function<void(core::EvalResult&)> edit_;
};

}  // namespace

TEST_CASE("the Evaluator suite catches an evaluator that drops a result") {
  DroppingEvaluator ev;
  const auto report = conformance::run_evaluator_suite(suite_on(ev, held_scripted));
  require_caught(report, evc::one_result_per_request);
  require_caught(report, evc::evaluate_keeps_order);  // evaluate() meets the broken promise
  require_caught(report, evc::concurrent_submit);
}

TEST_CASE("the Evaluator suite catches an evaluator that throws on a bad kernel") {
  ThrowingEvaluator ev;
  const auto report = conformance::run_evaluator_suite(suite_on(ev, held_scripted));
  require_caught(report, evc::submit_never_throws);
  CHECK(report.passed_check(evc::request_ids_echoed));  // the others were answered as they should be

  FutureThrowingEvaluator late;
  const auto late_report = conformance::run_evaluator_suite(suite_on(late, held_scripted));
  require_caught(late_report, evc::one_result_per_request);
  CHECK(late_report.passed_check(evc::submit_never_throws));
}

TEST_CASE("the Evaluator suite catches an evaluator that leaves futures unanswered at destruction") {
  auto ev = scripted();
  const auto report = conformance::run_evaluator_suite(suite_on(*ev, [] { return std::make_unique<ForgetfulEvaluator>(); }));
  require_caught(report, evc::destruction_answers_pending);
  CHECK(report.failures.size() == 3);  // one per pending request, nothing else
}

TEST_CASE("the Evaluator suite reports an evaluator that never answers, without hanging") {
  SilentEvaluator ev;
  auto options = suite_on(ev, held_scripted);
  options.result_timeout = std::chrono::milliseconds(200);
  const auto report = conformance::run_evaluator_suite(options);
  require_caught(report, evc::one_result_per_request);
  require_caught(report, evc::concurrent_submit);
  CHECK(report.skipped_check(evc::evaluate_keeps_order));
}

TEST_CASE("the Evaluator suite catches wrong ids, wrong categories and incoherent results") {
  EditingEvaluator wrong_id([](core::EvalResult& r) { r.request_id = "someone-else"; });
  require_caught(conformance::run_evaluator_suite(suite_on(wrong_id)), evc::request_ids_echoed);

  EditingEvaluator crash_as_runtime([](core::EvalResult& r) {
    if (r.error_category == ErrorCategory::crash) r.error_category = ErrorCategory::runtime;
  });
  const auto miscategorized = conformance::run_evaluator_suite(suite_on(crash_as_runtime));
  require_caught(miscategorized, evc::error_categories);
  CHECK(miscategorized.passed_check(evc::results_coherent));

  EditingEvaluator no_message([](core::EvalResult& r) { r.error_message.clear(); });
  require_caught(conformance::run_evaluator_suite(suite_on(no_message)), evc::results_coherent);

  EditingEvaluator correct_and_failed([](core::EvalResult& r) { r.correct = true; });
  require_caught(conformance::run_evaluator_suite(suite_on(correct_and_failed)), evc::results_coherent);
}

// ---- The environments on ScriptedEvaluator.

namespace {

env::EnvOptions env_options(int max_turns = 3) {
  env::EnvOptions o;
  o.prompt.language = core::KernelLanguage::cpp;
  o.max_turns = max_turns;
  return o;
}

// Scripted by program: the correct solution is correct, the wrong one has wrong outputs.
std::unique_ptr<eval::ScriptedEvaluator> scripted_for_envs() {
  auto ev = std::make_unique<eval::ScriptedEvaluator>();
  ev->when_candidate_contains("exclusive_cumsum_v0", eval::scripted_result(ErrorCategory::none, {}, 1.5))
      .when_candidate_contains("exclusive_cumsum_v1",
                               eval::scripted_result(ErrorCategory::correctness, "output 0: values differ"));
  return ev;
}

conformance::EnvSuiteOptions env_suite_on(const eval::ScriptedEvaluator& ev,
                                          std::function<std::unique_ptr<env::EnvGroupBuilder>()> make_group,
                                          std::vector<core::Completion> answers) {
  conformance::EnvSuiteOptions o;
  o.make_group = std::move(make_group);
  o.answers = std::move(answers);
  o.submitted_requests = [&ev] { return ev.submitted(); };
  o.result_timeout = std::chrono::seconds(5);
  return o;
}

core::Completion correct_answer() { return answer_with(kbrl::testing::cumsum_correct()); }
core::Completion wrong_answer() { return answer_with(kbrl::testing::cumsum_wrong()); }

std::function<std::unique_ptr<env::EnvGroupBuilder>()> kernelbench_group(eval::Evaluator& ev, bool multi_turn,
                                                                         int group_size = 2, env::EnvOptions o = env_options()) {
  return [&ev, multi_turn, group_size, o] {
    return std::make_unique<env::KernelBenchGroupBuilder>(kbrl::testing::cumsum_problem(), o, ev, group_size,
                                                          multi_turn, "b0");
  };
}

}  // namespace

TEST_CASE("KernelBenchEnv on ScriptedEvaluator conforms to the Env contract") {
  auto ev = scripted_for_envs();
  for (const auto& answers : {std::vector{correct_answer()}, std::vector{wrong_answer()}}) {
    const auto report = conformance::run_env_suite(env_suite_on(*ev, kernelbench_group(*ev, false), answers));
    require_all_passed(report, conformance::env_check_names());
  }
  SECTION("with a group of one") {
    const auto report =
        conformance::run_env_suite(env_suite_on(*ev, kernelbench_group(*ev, false, 1), {correct_answer()}));
    require_all_passed(report, conformance::env_check_names());
  }
}

TEST_CASE("MultiTurnKernelBenchEnv on ScriptedEvaluator conforms to the Env contract") {
  auto ev = scripted_for_envs();
  // Wrong answers until max_turns; wrong then correct (early stop at the second turn); correct at once.
  for (const auto& answers : {std::vector{wrong_answer()}, std::vector{wrong_answer(), correct_answer()},
                              std::vector{correct_answer()}}) {
    const std::size_t before = ev->submitted();
    const auto report = conformance::run_env_suite(env_suite_on(*ev, kernelbench_group(*ev, true), answers));
    require_all_passed(report, conformance::env_check_names());
    CHECK(ev->submitted() > before);
  }
}

// ---- The suite catches broken envs.

namespace {

// A group builder over any env type.
class Group : public env::EnvGroupBuilder {
 public:
  using Make = std::function<std::unique_ptr<env::Env>(int index)>;
  Group(Make make, int size) : problem_(kbrl::testing::cumsum_problem()), make_(std::move(make)), size_(size) {}
  std::vector<std::unique_ptr<env::Env>> make_envs() override {
    std::vector<std::unique_ptr<env::Env>> envs;
    for (int i = 0; i < size_; ++i) envs.push_back(make_(i));
    return envs;
  }
  const core::Problem& problem() const override { return problem_; }
  std::vector<std::string> logging_tags() const override { return {"level1"}; }

 private:
  core::Problem problem_;
  Make make_;
  int size_;
};

template <class E>
std::function<std::unique_ptr<env::EnvGroupBuilder>()> group_of(eval::Evaluator& ev, int size = 2, env::EnvOptions o = env_options()) {
  return [&ev, size, o] {
    return std::make_unique<Group>(
        [&ev, o](int i) { return std::make_unique<E>(kbrl::testing::cumsum_problem(), o, ev, "s" + std::to_string(i)); },
        size);
  };
}

// Forgets that its episode ended.
class StepAfterDoneEnv : public env::KernelBenchEnv {
 public:
  using KernelBenchEnv::KernelBenchEnv;
  std::future<env::StepResult> step(core::Completion c) override {
    done_ = false;
    return KernelBenchEnv::step(std::move(c));
  }
};

// Treats an answer without a program as bad input.
class ThrowingOnBadAnswerEnv : public env::KernelBenchEnv {
 public:
  using KernelBenchEnv::KernelBenchEnv;
  std::future<env::StepResult> step(core::Completion c) override {
    if (c.text.find("<KERNEL>") == std::string::npos) throw core::InvalidArgument("no <KERNEL> block in the answer");
    return KernelBenchEnv::step(std::move(c));
  }
};

// Reports no turn metric.
class NoTurnMetricEnv : public env::KernelBenchEnv {
 public:
  using KernelBenchEnv::KernelBenchEnv;
  std::future<env::StepResult> step(core::Completion c) override {
    return std::async(std::launch::deferred, [f = KernelBenchEnv::step(std::move(c))]() mutable {
      auto r = f.get();
      r.metrics.erase("turn");
      return r;
    });
  }
};

// Submits only when its future is read, so a batch of envs is evaluated one at a time.
class LazyEnv : public env::Env {
 public:
  LazyEnv(core::Problem p, env::EnvOptions o, eval::Evaluator& ev, std::string prefix)
      : inner_(std::move(p), std::move(o), ev, std::move(prefix)) {}
  env::Observation initial_observation() override { return inner_.initial_observation(); }
  std::future<env::StepResult> step(core::Completion c) override {
    return std::async(std::launch::deferred, [this, c = std::move(c)] { return inner_.step(c).get(); });
  }

 private:
  env::KernelBenchEnv inner_;
};

}  // namespace

TEST_CASE("the Env suite catches an env that allows a step after done") {
  auto ev = scripted_for_envs();
  const auto report = conformance::run_env_suite(env_suite_on(*ev, group_of<StepAfterDoneEnv>(*ev), {correct_answer()}));
  require_caught(report, envc::step_after_done_throws);
}

TEST_CASE("the Env suite catches an env that throws on an answer without a program") {
  auto ev = scripted_for_envs();
  const auto report = conformance::run_env_suite(env_suite_on(*ev, group_of<ThrowingOnBadAnswerEnv>(*ev), {correct_answer()}));
  require_caught(report, envc::answer_without_program_is_a_result);
  CHECK(report.passed_check(envc::step_after_done_throws));
}

TEST_CASE("the Env suite catches missing metrics, endless episodes, lazy submission and shared request ids") {
  auto ev = scripted_for_envs();
  require_caught(conformance::run_env_suite(env_suite_on(*ev, group_of<NoTurnMetricEnv>(*ev), {correct_answer()})),
                 envc::step_results_well_formed);

  auto endless = env_suite_on(*ev, group_of<env::MultiTurnKernelBenchEnv>(*ev, 2, env_options(100)), {wrong_answer()});
  endless.max_steps = 4;
  require_caught(conformance::run_env_suite(endless), envc::episodes_end);

  require_caught(conformance::run_env_suite(env_suite_on(*ev, group_of<LazyEnv>(*ev), {correct_answer()})),
                 envc::step_submits_before_returning);

  // Every env of the group under one request prefix: their evaluations cannot be told apart.
  auto same_ids = [&ev] {
    return std::make_unique<Group>(
        [&ev](int) {
          return std::make_unique<env::KernelBenchEnv>(kbrl::testing::cumsum_problem(), env_options(), *ev, "s");
        },
        2);
  };
  const auto report = conformance::run_env_suite(env_suite_on(*ev, same_ids, {correct_answer()}));
  require_caught(report, envc::envs_are_independent);
  require_caught(report, envc::step_results_well_formed);
}
