// KernelBenchEnv and MultiTurnKernelBenchEnv on LocalEvaluator's CPU backend (real workers, real
// builds) with a bundled problem and its solutions: a correct answer gets a correct evaluation
// and the reward its config says; a wrong one gets feedback and another turn; an answer without
// a program never reaches the evaluator; multi-turn episodes stop at the first correct kernel,
// or go on without early_stop or below the required speedup. One process, one evaluator.
#include <kbrl/env/kernelbench_env.hpp>
#include <kbrl/eval/local_evaluator.hpp>

#include <filesystem>

#include "bundled_examples.hpp"
#include "catch.hpp"

using namespace kbrl;
using kbrl::testing::answer_with;
using kbrl::testing::cumsum_correct;
using kbrl::testing::cumsum_problem;
using kbrl::testing::cumsum_wrong;

namespace {

// Shared with tests/conformance's CPU run (same builds; CTest runs them one after the other).
eval::LocalEvaluator& evaluator() {
  static eval::LocalEvaluator ev([] {
    eval::LocalEvaluatorConfig c;
    c.platform = core::DevicePlatform::cpu;
    c.work_dir = KBRL_CPU_EVALUATOR_WORK;
    c.compile_workers = 2;
    c.compile_cache_dir = KBRL_TEST_COMPILE_CACHE;
    c.limits.address_space_bytes = 8ull << 30;
    return c;
  }());
  return ev;
}

int submitted() { return evaluator().stats().submitted; }

// Rewards chosen so that each outcome has a total of its own: format 0.25, compiled 0.5, correct 2.
reward::RewardConfig reward_config() {
  reward::RewardConfig r;
  r.name = "integration";
  r.weights = {{"format", 0.25}, {"compile", 0.5}, {"correctness", 2.0}};
  r.validate();
  return r;
}
constexpr double kCorrectReward = 2.75;
constexpr double kWrongReward = 0.75;  // a program that builds and runs with wrong outputs

env::EnvOptions options(int max_turns = 3) {
  env::EnvOptions o;
  o.prompt.language = core::KernelLanguage::cpp;
  o.reward = reward_config();
  o.eval.correctness_trials = 2;
  o.eval.timing_trials = 5;
  o.eval.warmup_runs = 1;
  o.eval.run_timeout_s = 120;
  o.max_turns = max_turns;
  return o;
}

core::Completion no_program() {
  core::Completion c;
  c.text = "<think>Scans are hard.</think>\nI would write a prefix sum kernel, but I am not sure how.";
  c.num_tokens = 20;
  return c;
}

}  // namespace

TEST_CASE("a correct answer gets a correct evaluation and the reward its config says") {
  env::KernelBenchEnv e(cumsum_problem(), options(), evaluator(), "int/single");
  const auto obs = e.initial_observation();
  REQUIRE(obs.messages.size() == 2);
  CHECK(obs.messages[1].content.find("class Model") != std::string::npos);
  const int before = submitted();
  auto f = e.step(answer_with(cumsum_correct(), "One row per task, a double accumulator."));
  CHECK(submitted() == before + 1);  // submitted by step itself
  const auto r = f.get();
  INFO(r.eval.error_message);
  CHECK(r.eval.correct);
  CHECK(r.eval.error_category == core::ErrorCategory::none);
  CHECK(r.eval.device == "cpu");
  CHECK(r.eval.request_id == "int/single/t0");
  CHECK(r.eval.problem_id == cumsum_problem().id);
  CHECK(r.eval.trials_passed == 2);
  REQUIRE(r.eval.speedup.has_value());
  CHECK(*r.eval.speedup > 0);
  CHECK(r.reward == Catch::Approx(kCorrectReward));
  CHECK(r.breakdown.total == r.reward);
  CHECK(r.done);
  CHECK_FALSE(r.next.has_value());
  CHECK(r.completion.thinking == "One row per task, a double accumulator.");
  CHECK(r.metrics.at("kernel/correct") == 1);
  CHECK(r.metrics.at("kernel/compiled") == 1);
  CHECK(r.metrics.at("kernel/speedup") == *r.eval.speedup);
  CHECK(r.metrics.at("turn") == 1);
}

TEST_CASE("a wrong answer gets feedback and another turn, and a correct one then ends the episode") {
  env::MultiTurnKernelBenchEnv e(cumsum_problem(), options(3), evaluator(), "int/multi");
  const std::string secret = "SECRET_REASONING_MARKER";
  const auto first = e.step(answer_with(cumsum_wrong(), secret)).get();
  INFO(first.eval.error_message);
  CHECK(first.eval.error_category == core::ErrorCategory::correctness);
  CHECK(first.eval.compiled);
  CHECK(first.reward == Catch::Approx(kWrongReward));
  CHECK(first.metrics.at("kernel/correct") == 0);
  CHECK_FALSE(first.done);
  REQUIRE(first.next.has_value());
  const auto& m = first.next->messages;
  REQUIRE(m.size() == 4);  // system, task, the earlier answer, the feedback
  CHECK(m[2].role == "assistant");
  CHECK(m[2].content.find("exclusive_cumsum_v1") != std::string::npos);
  CHECK(m[2].content.find(secret) == std::string::npos);  // thinking removed
  CHECK(m[3].role == "user");
  CHECK(m[3].content.find("Attempt 1 of 3: wrong outputs.") != std::string::npos);
  CHECK(m[3].content.find("Correctness trials passed: ") != std::string::npos);
  CHECK(first.eval.error_message.find("values differ") != std::string::npos);
  CHECK(m[3].content.find("Mismatch:\n```") != std::string::npos);  // the evaluator's words, cleaned
  CHECK(m[3].content.find("values differ") != std::string::npos);

  const auto second = e.step(answer_with(cumsum_correct())).get();
  INFO(second.eval.error_message);
  CHECK(second.eval.correct);
  CHECK(second.eval.request_id == "int/multi/t1");
  CHECK(second.reward == Catch::Approx(kCorrectReward));
  CHECK(second.metrics.at("turn") == 2);
  CHECK(second.done);  // early stop at the first correct kernel
  CHECK_THROWS_AS(e.step(answer_with(cumsum_correct())), core::InvalidArgument);
}

TEST_CASE("an answer without a program never reaches the evaluator") {
  const int before = submitted();
  env::KernelBenchEnv single(cumsum_problem(), options(), evaluator(), "int/format");
  const auto r = single.step(no_program()).get();
  CHECK(r.eval.error_category == core::ErrorCategory::format);
  CHECK(r.reward == 0.0);
  CHECK(r.done);

  // A program without ModelNew is no answer either.
  env::MultiTurnKernelBenchEnv multi(cumsum_problem(), options(2), evaluator(), "int/format-multi");
  std::string renamed = cumsum_correct();
  renamed.replace(renamed.find("class ModelNew"), 14, "class ModelOld");
  const auto m = multi.step(answer_with(renamed)).get();
  CHECK(m.eval.error_category == core::ErrorCategory::format);
  CHECK(m.reward == 0.0);
  CHECK(m.metrics.at("kernel/format_ok") == 0);
  CHECK_FALSE(m.done);
  REQUIRE(m.next.has_value());
  CHECK(m.next->messages.back().content.find("no program found (format)") != std::string::npos);
  CHECK(submitted() == before);
}

TEST_CASE("multi-turn episodes stop early at a correct kernel only as configured") {
  SECTION("early_stop: done at the first correct kernel") {
    env::MultiTurnKernelBenchEnv e(cumsum_problem(), options(3), evaluator(), "int/stop");
    const auto r = e.step(answer_with(cumsum_correct())).get();
    INFO(r.eval.error_message);
    CHECK(r.eval.correct);
    CHECK(r.done);
  }
  SECTION("without early_stop a correct kernel gets feedback until max_turns") {
    auto o = options(2);
    o.early_stop = false;
    env::MultiTurnKernelBenchEnv e(cumsum_problem(), o, evaluator(), "int/no-stop");
    const auto first = e.step(answer_with(cumsum_correct())).get();
    INFO(first.eval.error_message);
    CHECK(first.eval.correct);
    CHECK_FALSE(first.done);
    REQUIRE(first.next.has_value());
    const auto& feedback = first.next->messages.back().content;
    CHECK(feedback.find("Attempt 1 of 2: correct.") != std::string::npos);
    CHECK(feedback.find("speedup") != std::string::npos);
    const auto second = e.step(answer_with(cumsum_correct())).get();
    CHECK(second.done);  // max_turns
  }
  SECTION("a correct kernel below early_stop_min_speedup does not stop the episode") {
    auto o = options(2);
    o.early_stop_min_speedup = 1e6;
    env::MultiTurnKernelBenchEnv e(cumsum_problem(), o, evaluator(), "int/too-slow");
    const auto first = e.step(answer_with(cumsum_correct())).get();
    INFO(first.eval.error_message);
    CHECK(first.eval.correct);
    CHECK_FALSE(first.done);
    REQUIRE(first.next.has_value());
    CHECK(first.next->messages.back().content.find("not yet 1000000.00x faster") != std::string::npos);
  }
}
