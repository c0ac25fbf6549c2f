// The conformance suites on LocalEvaluator's CPU backend with real workers and real builds:
// the Evaluator suite on a bundled problem and its solution from examples/solutions (the bad
// candidates derived from it are built and run for real: a crash, a hang, wrong outputs, ...),
// and the Env suite on KernelBenchEnv and MultiTurnKernelBenchEnv over the same evaluator.
// Registered with CTest as one test (one process, one evaluator, each extension built once).
#include <kbrl/conformance/env_suite.hpp>
#include <kbrl/conformance/evaluator_suite.hpp>
#include <kbrl/env/kernelbench_env.hpp>
#include <kbrl/eval/local_evaluator.hpp>

#include <filesystem>

#include "conformance_catch.hpp"
#include "bundled_examples.hpp"

using namespace kbrl;
using kbrl::testing::answer_with;
using conformance::testing::require_all_passed;

namespace {

// `work_dir`: the evaluator's builds, logs and baselines. tests/integration's
// env_local_evaluator shares the shared one (CTest runs the two one after the other, see
// RESOURCE_LOCK), so each extension is built once for both.
eval::LocalEvaluatorConfig cpu_config(const std::filesystem::path& work_dir) {
  eval::LocalEvaluatorConfig c;
  c.platform = core::DevicePlatform::cpu;
  c.work_dir = work_dir;
  c.compile_workers = 2;
  // The precompiled headers of the integration tests' evaluators (about 0.75 GB each, built once).
  c.compile_cache_dir = KBRL_TEST_COMPILE_CACHE;
  c.limits.address_space_bytes = 8ull << 30;
  return c;  // static checks on, as users run it
}

// One evaluator for the whole binary: each derived candidate is built once.
eval::LocalEvaluator& shared_evaluator() {
  static eval::LocalEvaluator ev(cpu_config(KBRL_CPU_EVALUATOR_WORK));
  return ev;
}

core::EvalOptions quick_options() {
  core::EvalOptions o;
  o.correctness_trials = 2;
  o.measure_performance = false;
  o.run_timeout_s = 120;
  o.compile_timeout_s = 600;
  return o;
}

}  // namespace

TEST_CASE("LocalEvaluator on the CPU conforms to the Evaluator contract") {
  conformance::EvaluatorSuiteOptions o;
  o.evaluator = &shared_evaluator();
  o.make_evaluator = [] {
    const auto dir = std::filesystem::path(KBRL_TEST_TMP) / "destroyed";
    std::filesystem::remove_all(dir);
    return std::make_unique<eval::LocalEvaluator>(cpu_config(dir));
  };
  o.base.request_id = "cpu";
  o.base.problem = kbrl::testing::cumsum_problem();
  o.base.candidate_source = kbrl::testing::cumsum_correct();
  o.base.language = core::KernelLanguage::cpp;
  o.base.options = quick_options();
  // The hang is stopped by the worker's stage timeout: short, since the reference takes milliseconds.
  o.candidates = conformance::standard_candidates(o.base.candidate_source, 5.0);
  // Each derived program is a build of its own (about 10 s on two cores); the checks that
  // submit again use those that cost no run.
  o.repeated_cases = {"correct", "empty", "no_model_new", "syntax_error"};
  const auto report = conformance::run_evaluator_suite(o);
  require_all_passed(report, conformance::evaluator_check_names());
}

namespace {

conformance::EnvSuiteOptions env_suite(bool multi_turn, std::vector<core::Completion> answers) {
  env::EnvOptions options;
  options.prompt.language = core::KernelLanguage::cpp;
  options.eval = quick_options();
  options.max_turns = 2;
  conformance::EnvSuiteOptions o;
  o.make_group = [options, multi_turn] {
    return std::make_unique<env::KernelBenchGroupBuilder>(kbrl::testing::cumsum_problem(), options,
                                                          shared_evaluator(), 2, multi_turn, "cpu");
  };
  o.answers = std::move(answers);
  o.submitted_requests = [] { return static_cast<std::size_t>(shared_evaluator().stats().submitted); };
  return o;
}

}  // namespace

TEST_CASE("KernelBenchEnv on the CPU evaluator conforms to the Env contract") {
  const auto report = conformance::run_env_suite(env_suite(false, {answer_with(kbrl::testing::cumsum_correct())}));
  require_all_passed(report, conformance::env_check_names());
}

TEST_CASE("MultiTurnKernelBenchEnv on the CPU evaluator conforms to the Env contract") {
  // Wrong outputs at every turn: episodes run to max_turns with feedback in between.
  const auto report = conformance::run_env_suite(env_suite(true, {answer_with(kbrl::testing::cumsum_wrong())}));
  require_all_passed(report, conformance::env_check_names());
}
