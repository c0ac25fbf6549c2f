// The environments with a scripted evaluator (results chosen by the test, requests recorded):
// single and multi-turn episodes, the feedback prompt, advantages on hand-computed numbers, and
// the dataset's batches. tests/integration/env_local_evaluator.cpp runs real evaluations.
#include <future>
#include <set>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/env/advantages.hpp"
#include "kbrl/env/dataset.hpp"
#include "kbrl/env/kernelbench_env.hpp"

using namespace kbrl;

namespace {

class ScriptedEvaluator : public eval::Evaluator {
 public:
  std::vector<core::EvalResult> script;
  std::vector<core::EvalRequest> seen;
  std::future<core::EvalResult> submit(core::EvalRequest r) override {
    core::EvalResult e = script.at(seen.size());
    e.request_id = r.request_id;
    e.problem_id = r.problem.id;
    seen.push_back(std::move(r));
    std::promise<core::EvalResult> p;
    p.set_value(std::move(e));
    return p.get_future();
  }
};

core::Problem problem(const std::string& id = "bundled/1_Add") {
  core::Problem p;
  p.id = id;
  p.name = "Add";
  p.source = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a, b):\n        return a + b\n"
             "def get_inputs():\n    return [torch.randn(4), torch.randn(4)]\ndef get_init_inputs():\n    return []\n";
  return p;
}

core::Completion answer(const std::string& body, const std::string& thinking = "I will add them.") {
  core::Completion c;
  c.text = "<think>" + thinking + "</think>\n<KERNEL>\nimport torch\nclass ModelNew(torch.nn.Module):\n" + body +
           "\n</KERNEL>";
  c.num_tokens = 40;
  return c;
}

core::EvalResult wrong() {
  core::EvalResult e;
  e.format_ok = true;
  e.compiled = true;
  e.trials_passed = 2;
  e.trials_total = 5;
  e.max_abs_error = 0.5;
  e.error_category = core::ErrorCategory::correctness;
  e.error_message = "output 0: 7 of 16 elements differ (max abs error 0.5)";
  return e;
}

core::EvalResult correct(double speedup) {
  core::EvalResult e;
  e.format_ok = e.compiled = e.correct = e.correct_on_problem_inputs = true;
  e.trials_passed = e.trials_total = 5;
  e.runtime = core::TimingStats{1.0 / speedup, 1.0 / speedup, 0, 0, 0, 10};
  e.ref_runtime = core::TimingStats{1.0, 1.0, 0, 0, 0, 10};
  e.speedup = speedup;
  return e;
}

env::EnvOptions options() {
  env::EnvOptions o;
  o.prompt.language = core::KernelLanguage::cpp;
  o.max_turns = 3;
  return o;
}

}  // namespace

TEST_CASE("advantages are group-centered and per turn") {
  const auto single = env::turn_advantages({{1.0}, {0.0}, {0.0}, {1.0}});
  CHECK(single == std::vector<std::vector<double>>{{0.5}, {-0.5}, {-0.5}, {0.5}});
  env::AdvantageOptions o;
  o.std_normalize = true;
  const auto normalized = env::turn_advantages({{1.0}, {0.0}, {0.0}, {1.0}}, o);
  CHECK(normalized[0][0] == Catch::Approx(1.0).epsilon(1e-5));
  CHECK(normalized[1][0] == Catch::Approx(-1.0).epsilon(1e-5));
  // Returns with gamma 0.4: A [0.4, 1], B [0.5], C [0, 0, 0]. Turn 0: mean 0.3; turn 1 (A and C):
  // mean 0.5; turn 2: C alone gets 0.
  const auto multi = env::turn_advantages({{0.0, 1.0}, {0.5}, {0.0, 0.0, 0.0}});
  REQUIRE(multi.size() == 3);
  CHECK(multi[0][0] == Catch::Approx(0.1));
  CHECK(multi[1][0] == Catch::Approx(0.2));
  CHECK(multi[2][0] == Catch::Approx(-0.3));
  CHECK(multi[0][1] == Catch::Approx(0.5));
  CHECK(multi[2][1] == Catch::Approx(-0.5));
  CHECK(multi[2][2] == 0.0);
  CHECK(env::constant_group({{0.2, 0.1}, {0.2, 0.1}}));
  CHECK_FALSE(env::constant_group({{0.2}, {0.3}}));
}

TEST_CASE("a single-turn env evaluates a program and scores it") {
  ScriptedEvaluator ev;
  ev.script = {correct(2.0)};
  env::KernelBenchEnv e(problem(), options(), ev, "b0/p/s1");
  const auto obs = e.initial_observation();
  REQUIRE(obs.messages.size() == 2);
  CHECK(obs.messages[1].content.find("class Model") != std::string::npos);
  auto f = e.step(answer("    def forward(self, a, b):\n        return a + b"));
  REQUIRE(ev.seen.size() == 1);  // submitted before the future is read
  CHECK(ev.seen[0].request_id == "b0/p/s1/t0");
  CHECK(ev.seen[0].language == core::KernelLanguage::cpp);
  CHECK(ev.seen[0].candidate_source.find("class ModelNew") != std::string::npos);
  const auto r = f.get();
  CHECK(r.done);
  CHECK_FALSE(r.next.has_value());
  CHECK(r.reward == reward::compute_reward(r.eval, r.completion, options().reward).total);
  CHECK(r.reward == Catch::Approx(1.0));  // stage1: format, compile and every trial
  CHECK(r.metrics.at("kernel/correct") == 1);
  CHECK(r.metrics.at("kernel/speedup") == 2.0);
  CHECK(r.completion.thinking == "I will add them.");
  CHECK_THROWS_AS(e.step(answer("x")), core::InvalidArgument);
}

TEST_CASE("an answer without a program is scored without an evaluation") {
  ScriptedEvaluator ev;
  env::KernelBenchEnv e(problem(), options(), ev, "s0");
  core::Completion c;
  c.text = "<think>hmm</think> I cannot do this.";
  const auto r = e.step(c).get();
  CHECK(ev.seen.empty());
  CHECK(r.eval.error_category == core::ErrorCategory::format);
  CHECK(r.eval.request_id == "s0/t0");
  CHECK(r.metrics.at("kernel/format_ok") == 0);
  CHECK(r.reward == 0.0);
  CHECK(r.done);
}

TEST_CASE("a multi-turn episode carries feedback and stops at the first correct kernel") {
  ScriptedEvaluator ev;
  ev.script = {wrong(), correct(1.5)};
  env::MultiTurnKernelBenchEnv e(problem(), options(), ev, "s0");
  const std::string secret = "SECRET_REASONING_TOKEN";
  const auto first = e.step(answer("    def forward(self, a, b):\n        return a - b", secret)).get();
  CHECK_FALSE(first.done);
  REQUIRE(first.next.has_value());
  const auto& m = first.next->messages;
  REQUIRE(m.size() == 4);  // system, task, earlier answer, feedback
  CHECK(m[2].role == "assistant");
  CHECK(m[2].content.find("return a - b") != std::string::npos);
  CHECK(m[2].content.find(secret) == std::string::npos);  // earlier thinking is removed
  CHECK(m[3].role == "user");
  CHECK(m[3].content.find("Attempt 1 of 3: wrong outputs") != std::string::npos);
  CHECK(m[3].content.find("Correctness trials passed: 2/5") != std::string::npos);
  CHECK(m[3].content.find("7 of 16 elements differ") != std::string::npos);
  CHECK(m[3].content.find("indexing") != std::string::npos);  // advice for wrong outputs
  const auto second = e.step(answer("    def forward(self, a, b):\n        return a + b")).get();
  CHECK(second.done);
  CHECK(ev.seen.size() == 2);
  CHECK(ev.seen[1].request_id == "s0/t1");
  CHECK(second.metrics.at("turn") == 2);
  CHECK_THROWS_AS(e.step(answer("x")), core::InvalidArgument);
}

TEST_CASE("a multi-turn episode ends after max_turns and can require a speedup") {
  ScriptedEvaluator ev;
  ev.script = {correct(0.5), correct(0.8), correct(0.9)};
  auto o = options();
  o.early_stop_min_speedup = 1.0;  // correct but slow is not enough
  env::MultiTurnKernelBenchEnv e(problem(), o, ev, "s0");
  const auto a = e.step(answer("    pass")).get();
  CHECK_FALSE(a.done);
  CHECK(a.next->messages.back().content.find("speedup 0.500x") != std::string::npos);
  CHECK_FALSE(e.step(answer("    pass")).get().done);
  CHECK(e.step(answer("    pass")).get().done);  // the third of three turns
}

TEST_CASE("excerpts keep the head and tail within the limit") {
  std::string text;
  for (int i = 0; i < 400; ++i) text += "line " + std::to_string(i) + "\n";
  const auto e = env::excerpt(text, 500);
  CHECK(e.size() < 560);
  CHECK(e.rfind("line 0\n", 0) == 0);
  CHECK(e.find("line 399") != std::string::npos);
  CHECK(e.find("characters left out") != std::string::npos);
  CHECK(env::excerpt("short", 500) == "short");
}

TEST_CASE("dataset batches depend only on the seed and the index") {
  ScriptedEvaluator ev;
  env::DatasetOptions o;
  for (int i = 0; i < 10; ++i) o.problems.push_back(problem("p" + std::to_string(i)));
  o.eval_fraction = 0.2;
  o.batch_size = 3;
  o.group_size = 2;
  o.seed = 7;
  env::KernelBenchDataset a(o, ev), b(o, ev);
  CHECK(a.eval_problems().size() == 2);
  CHECK(a.train_problems().size() == 8);
  CHECK(a.batches_per_epoch() == 2);
  std::set<std::string> eval_ids;
  for (const auto& p : a.eval_problems()) eval_ids.insert(p.id);
  std::set<std::string> epoch;
  for (std::int64_t i = 0; i < 2; ++i) {
    CHECK(a.batch_problem_ids(i) == b.batch_problem_ids(i));
    for (const auto& id : a.batch_problem_ids(i)) {
      CHECK(eval_ids.count(id) == 0);
      CHECK(epoch.insert(id).second);  // no problem twice in an epoch
    }
  }
  bool differs = false;
  for (std::int64_t i = 0; i < 2; ++i) differs |= a.batch_problem_ids(i) != a.batch_problem_ids(i + 2);
  CHECK(differs);  // the next epoch is shuffled again
  const auto builders = a.batch(5);
  REQUIRE(builders.size() == 3);
  auto envs = builders[0]->make_envs();
  CHECK(envs.size() == 2);
  o.seed = 8;
  env::KernelBenchDataset c(o, ev);
  CHECK(c.batch_problem_ids(0) != a.batch_problem_ids(0));
  o.batch_size = 0;
  CHECK_THROWS_AS(env::KernelBenchDataset(o, ev), core::InvalidArgument);
}
