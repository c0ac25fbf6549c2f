// Rollouts with a scripted policy and a scripted evaluator (no torch, no processes): the groups
// come back as core::TrajectoryGroups, a group's first turn is one prompt sampled group_size
// times, later turns are sampled per episode with their feedback, each call gets the next seed,
// and every transition carries the env's parse, evaluation and reward.
#include "kbrl/train/rollouts.hpp"

#include <future>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/env/kernelbench_env.hpp"

using namespace kbrl;

namespace {

class ScriptedEvaluator : public eval::Evaluator {
 public:
  std::vector<bool> correct;  // by submission order
  std::vector<core::EvalRequest> seen;
  std::future<core::EvalResult> submit(core::EvalRequest r) override {
    core::EvalResult e;
    e.request_id = r.request_id;
    e.problem_id = r.problem.id;
    e.format_ok = e.compiled = true;
    e.correct = e.correct_on_problem_inputs = correct.at(seen.size());
    e.trials_total = 5;
    e.trials_passed = e.correct ? 5 : 1;
    if (!e.correct) e.error_category = core::ErrorCategory::correctness;
    seen.push_back(std::move(r));
    std::promise<core::EvalResult> p;
    p.set_value(std::move(e));
    return p.get_future();
  }
};

// Answers with a program; its tokens say which call, conversation and sample it is.
class ScriptedPolicy : public train::TokenCompleter {
 public:
  struct Call {
    std::size_t conversations;
    std::int64_t n;
    std::uint64_t seed;
    std::size_t first_length;  // messages in the first conversation
    std::vector<std::uint64_t> keys;
  };
  std::vector<Call> calls;
  std::size_t drop = 0;  // return this many samples fewer than asked for

  std::vector<core::Transition> complete(const std::vector<std::vector<core::Message>>& conversations, std::int64_t n,
                                         std::uint64_t seed, const std::vector<std::uint64_t>& keys) override {
    calls.push_back({conversations.size(), n, seed, conversations.front().size(), keys});
    std::vector<core::Transition> out;
    for (std::size_t p = 0; p < conversations.size(); ++p)
      for (std::int64_t s = 0; s < n; ++s) {
        core::Transition t;
        t.observation = conversations[p];
        t.prompt_tokens = {1, 2};
        t.prompt_text = "prompt";
        t.completion.text = "<think>t</think>\n<KERNEL>\nimport torch\nclass ModelNew(torch.nn.Module):\n    pass\n</KERNEL>";
        t.completion.tokens = {static_cast<std::int32_t>(seed), static_cast<std::int32_t>(p), static_cast<std::int32_t>(s)};
        t.completion.num_tokens = 3;
        t.logprobs = {-1, -1, -1};
        out.push_back(std::move(t));
      }
    out.resize(out.size() - drop);
    return out;
  }
};

core::Problem problem(const std::string& id) {
  core::Problem p;
  p.id = id;
  p.name = id;
  p.source = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, a):\n        return a\n"
             "def get_inputs():\n    return [torch.randn(4)]\ndef get_init_inputs():\n    return []\n";
  return p;
}

std::vector<std::unique_ptr<env::EnvGroupBuilder>> builders(eval::Evaluator& ev, bool multi_turn) {
  env::EnvOptions o;
  o.prompt.language = core::KernelLanguage::cpp;
  o.max_turns = 3;
  std::vector<std::unique_ptr<env::EnvGroupBuilder>> out;
  for (const char* id : {"p0", "p1"})
    out.push_back(std::make_unique<env::KernelBenchGroupBuilder>(problem(id), o, ev, 2, multi_turn, "b0"));
  return out;
}

}  // namespace

TEST_CASE("single-turn rollouts: one group per builder, its prompt sampled group_size times") {
  ScriptedEvaluator ev;
  ev.correct = {true, false, false, false};
  ScriptedPolicy policy;
  train::RolloutOptions o;
  o.groups_per_call = 2;
  o.seed = 100;
  const auto r = train::do_group_rollouts(builders(ev, false), policy, o);
  REQUIRE(policy.calls.size() == 1);
  CHECK(policy.calls[0].conversations == 2);
  CHECK(policy.calls[0].n == 2);
  CHECK(policy.calls[0].seed == 100);
  CHECK(policy.calls[0].keys == std::vector<std::uint64_t>{0, 1});
  REQUIRE(r.groups.size() == 2);
  CHECK(r.groups[1].problem_id == "p1");
  for (std::size_t g = 0; g < 2; ++g) {
    REQUIRE(r.groups[g].trajectories.size() == 2);
    for (std::size_t s = 0; s < 2; ++s) {
      const auto& traj = r.groups[g].trajectories[s];
      CHECK(traj.problem_id == r.groups[g].problem_id);
      REQUIRE(traj.transitions.size() == 1);
      const auto& t = traj.transitions[0];
      // Sample s of conversation g went to episode s of group g.
      CHECK(t.completion.tokens == std::vector<std::int32_t>{100, static_cast<std::int32_t>(g), static_cast<std::int32_t>(s)});
      CHECK(t.completion.format_ok);  // the env's parse
      CHECK(t.completion.kernel.find("class ModelNew") != std::string::npos);
      REQUIRE(t.eval.has_value());
      CHECK(t.eval->problem_id == r.groups[g].problem_id);
      CHECK(t.reward == t.breakdown.total);
      CHECK(t.done);
      CHECK(t.prompt_text == "prompt");
      CHECK(t.metrics.at("turn") == 1);
    }
  }
  CHECK(r.groups[0].trajectories[0].transitions[0].eval->correct);
  CHECK(r.groups[0].trajectories[0].total_reward() > r.groups[0].trajectories[1].total_reward());
  CHECK(ev.seen.size() == 4);
}

TEST_CASE("multi-turn rollouts: later turns per episode with feedback, turns count up the seed") {
  ScriptedEvaluator ev;
  // Submission order: turn 0 of g0s0, g0s1 (call 0), g1s0, g1s1 (call 1); then g0s1 (call 2),
  // g1s0 (call 3); then g1s0 again (call 4), its last turn.
  ev.correct = {true, false, false, true, true, false, false};
  ScriptedPolicy policy;
  train::RolloutOptions o;
  o.groups_per_call = 1;
  o.seed = 7;
  const auto r = train::do_group_rollouts(builders(ev, true), policy, o);
  REQUIRE(policy.calls.size() == 5);
  // Turn t samples with seed + t; a first turn is keyed by its group, a later one by group * 4096
  // + the episode's index.
  const std::vector<std::vector<std::uint64_t>> keys = {{0}, {1}, {1}, {4096}, {4096}};
  for (std::size_t c = 0; c < 5; ++c) {
    CHECK(policy.calls[c].seed == (c < 2 ? 7 : c < 4 ? 8 : 9));
    CHECK(policy.calls[c].keys == keys[c]);
    CHECK(policy.calls[c].conversations == 1);
    CHECK(policy.calls[c].n == (c < 2 ? 2 : 1));
    CHECK(policy.calls[c].first_length == (c < 2 ? 2 : c < 4 ? 4 : 6));  // + (answer, feedback) per turn
  }
  const auto turns = [&](std::size_t g, std::size_t s) { return r.groups[g].trajectories[s].transitions.size(); };
  CHECK(turns(0, 0) == 1);
  CHECK(turns(0, 1) == 2);
  CHECK(turns(1, 0) == 3);
  CHECK(turns(1, 1) == 1);
  const auto& long_one = r.groups[1].trajectories[0].transitions;
  CHECK_FALSE(long_one[0].done);
  CHECK_FALSE(long_one[1].done);
  CHECK(long_one[2].done);
  CHECK(long_one[1].observation.size() == 4);
  CHECK(long_one[1].observation[3].content.find("Attempt 1 of 3") != std::string::npos);
  CHECK(long_one[2].completion.tokens == std::vector<std::int32_t>{9, 0, 0});  // call 4, turn 3
  CHECK(r.groups[0].trajectories[1].transitions[1].eval->correct);
}

TEST_CASE("a policy that returns too few samples is an error") {
  ScriptedEvaluator ev;
  ev.correct = {true, true, true, true};
  ScriptedPolicy policy;
  policy.drop = 1;
  CHECK_THROWS_AS(train::do_group_rollouts(builders(ev, false), policy, {}), core::Error);
}

TEST_CASE("start_group_rollouts samples every turn, finish_group_rollouts takes the last turn's results") {
  ScriptedEvaluator ev;
  ev.correct = {true, false, false, true, true, false, false};
  ScriptedPolicy policy;
  train::RolloutOptions o;
  o.groups_per_call = 1;
  o.seed = 7;
  o.max_turns = 3;
  o.group_keys = {5, 9};  // a rank's share: the groups' places in the whole batch
  const auto bs = builders(ev, true);
  auto pending = train::start_group_rollouts(bs, policy, o);
  // All three turns sampled (the third is the last: start does not wait for it).
  REQUIRE(policy.calls.size() == 5);
  CHECK(policy.calls[0].keys == std::vector<std::uint64_t>{5});
  CHECK(policy.calls[1].keys == std::vector<std::uint64_t>{9});
  CHECK(policy.calls[4].keys == std::vector<std::uint64_t>{9 * 4096});
  const auto r = train::finish_group_rollouts(std::move(pending));
  CHECK(policy.calls.size() == 5);
  REQUIRE(r.groups.size() == 2);
  CHECK(r.groups[1].trajectories[0].transitions.size() == 3);
  CHECK(r.groups[1].trajectories[0].transitions[2].done);
  CHECK(r.groups[1].trajectories[0].transitions[2].eval.has_value());
  o.group_keys = {1};
  CHECK_THROWS_AS(train::start_group_rollouts(bs, policy, o), core::InvalidArgument);
}
