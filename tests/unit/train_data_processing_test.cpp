// From trajectories to training data: GRPO advantages on hand-computed numbers (one turn, std
// normalization, per-turn returns), constant groups with advantages of exactly zero, and the
// datums assembled from trajectory groups (their order, masks, advantages, removed groups).
#include "kbrl/train/data_processing.hpp"

#include <cmath>

#include "catch.hpp"
#include "kbrl/core/error.hpp"

using namespace kbrl;
using train::AdvantageOptions;
using train::turn_advantages;

namespace {

core::Transition transition(double reward, std::vector<std::int32_t> completion_tokens,
                            std::vector<std::int32_t> prompt = {1, 2, 3}) {
  core::Transition t;
  t.prompt_tokens = std::move(prompt);
  t.completion.tokens = std::move(completion_tokens);
  t.completion.num_tokens = static_cast<int>(t.completion.tokens.size());
  for (std::size_t i = 0; i < t.completion.tokens.size(); ++i) t.logprobs.push_back(-0.5F * static_cast<float>(i + 1));
  t.reward = reward;
  return t;
}

core::TrajectoryGroup group(const std::string& id, std::vector<std::vector<core::Transition>> trajectories) {
  core::TrajectoryGroup g;
  g.problem_id = id;
  for (auto& transitions : trajectories) g.trajectories.push_back({id, std::move(transitions)});
  return g;
}

}  // namespace

TEST_CASE("advantages are group-centered and per turn") {
  const auto single = turn_advantages({{1.0}, {0.0}, {0.0}, {1.0}});
  CHECK(single == std::vector<std::vector<double>>{{0.5}, {-0.5}, {-0.5}, {0.5}});
  AdvantageOptions o;
  o.std_normalize = true;
  const auto normalized = turn_advantages({{1.0}, {0.0}, {0.0}, {1.0}}, o);
  CHECK(normalized[0][0] == Catch::Approx(1.0).epsilon(1e-5));
  CHECK(normalized[1][0] == Catch::Approx(-1.0).epsilon(1e-5));
  // Returns with gamma 0.4: A [0.4, 1], B [0.5], C [0, 0, 0]. Turn 0: mean 0.3; turn 1 (A and C):
  // mean 0.5; turn 2: C alone gets 0.
  const auto multi = turn_advantages({{0.0, 1.0}, {0.5}, {0.0, 0.0, 0.0}});
  REQUIRE(multi.size() == 3);
  CHECK(multi[0][0] == Catch::Approx(0.1));
  CHECK(multi[1][0] == Catch::Approx(0.2));
  CHECK(multi[2][0] == Catch::Approx(-0.3));
  CHECK(multi[0][1] == Catch::Approx(0.5));
  CHECK(multi[2][1] == Catch::Approx(-0.5));
  CHECK(multi[2][2] == 0.0);
  CHECK(train::constant_group({{0.2, 0.1}, {0.2, 0.1}}));
  CHECK_FALSE(train::constant_group({{0.2}, {0.3}}));
}

TEST_CASE("negative advantages are scaled by negative_weight, after normalization") {
  AdvantageOptions o;
  o.negative_weight = 0.25;
  // Mean 0.25: advantages 0.75, -0.25, -0.25, -0.25 before the weight.
  const auto a = turn_advantages({{1.0}, {0.0}, {0.0}, {0.0}}, o);
  CHECK(a[0][0] == Catch::Approx(0.75));
  CHECK(a[1][0] == Catch::Approx(-0.0625));
  o.std_normalize = true;  // std sqrt(3) / 4: 0.75 -> sqrt(3), -0.25 -> -1 / sqrt(3)
  const auto n = turn_advantages({{1.0}, {0.0}, {0.0}, {0.0}}, o);
  CHECK(n[0][0] == Catch::Approx(std::sqrt(3.0)).epsilon(1e-5));
  CHECK(n[3][0] == Catch::Approx(-0.25 / std::sqrt(3.0)).epsilon(1e-5));
  o.negative_weight = 0;
  CHECK(turn_advantages({{1.0}, {0.0}}, o)[1][0] == 0.0);
  for (const double bad : {-0.1, 1.5}) {
    o.negative_weight = bad;
    CHECK_THROWS_AS(turn_advantages({{1.0}, {0.0}}, o), core::InvalidArgument);
  }
}

TEST_CASE("the returns are the reward config's multi_turn: gamma and form") {
  AdvantageOptions o;
  o.returns.gamma = 1.0;
  // Returns with gamma 1: A [1, 1], B [0.5]. Turn 0: mean 0.75.
  auto adv = turn_advantages({{0.0, 1.0}, {0.5}}, o);
  CHECK(adv[0][0] == Catch::Approx(0.25));
  CHECK(adv[1][0] == Catch::Approx(-0.25));
  o.returns.gamma = 0.5;
  o.returns.form = reward::ReturnForm::max;
  // Max form, gamma 0.5: A [max(0.2, 0.5 * 1) = 0.5, 1], B [0.1]. Turn 0: mean 0.3.
  adv = turn_advantages({{0.2, 1.0}, {0.1}}, o);
  CHECK(adv[0][0] == Catch::Approx(0.2));
  CHECK(adv[1][0] == Catch::Approx(-0.2));
}

TEST_CASE("a constant group gets advantages of exactly zero, also with std normalization") {
  // Three times 0.1 sums to 0.30000000000000004: the mean is not 0.1, and subtracting it leaves
  // a residue that the division by (std + eps) would blow up.
  for (const bool normalize : {false, true}) {
    INFO("std_normalize " << normalize);
    AdvantageOptions o;
    o.std_normalize = normalize;
    for (const double r : {0.1, 0.7, 1.0 / 3.0, -2.3, 1e-9}) {
      INFO("reward " << r);
      for (const auto& a : turn_advantages({{r}, {r}, {r}}, o)) CHECK(a == std::vector<double>{0.0});
      for (const auto& a : turn_advantages({{r, 0.2}, {r, 0.2}, {r, 0.2}}, o)) CHECK(a == std::vector<double>{0.0, 0.0});
    }
    // Not a constant group, but turn 0's returns are all 0.1 (C's later reward is 0): zero there.
    const auto mixed = turn_advantages({{0.1}, {0.1}, {0.1, 0.0}}, o);
    CHECK(mixed == std::vector<std::vector<double>>{{0.0}, {0.0}, {0.0, 0.0}});
  }
  // Through the datums too, when constant groups are kept.
  train::DataOptions d;
  d.advantages.std_normalize = true;
  d.remove_constant_reward_groups = false;
  const auto data = train::assemble_training_data(
      {group("p", {{transition(0.1, {4})}, {transition(0.1, {5})}, {transition(0.1, {6})}})}, d);
  CHECK(data.constant_groups == 1);
  CHECK(data.groups_used == 1);
  REQUIRE(data.datums.size() == 3);
  for (const auto& datum : data.datums)
    for (const float a : datum.advantages) CHECK(a == 0.0F);
}

TEST_CASE("training data: a datum per sampled transition, constant groups left out") {
  const std::vector<core::TrajectoryGroup> groups = {
      group("a", {{transition(1.0, {4, 5})}, {transition(0.0, {6})}}),
      group("b", {{transition(0.5, {7})}, {transition(0.5, {8})}}),  // constant
      // Multi-turn: A's two turns (the second sampled nothing: no datum), B's one.
      group("c", {{transition(0.0, {9}, {1, 2}), transition(1.0, {}, {1, 2, 9, 3})}, {transition(0.5, {10})}}),
  };
  train::DataOptions d;
  const auto data = train::assemble_training_data(groups, d);
  CHECK(data.constant_groups == 1);
  CHECK(data.groups_used == 2);
  CHECK(data.removed == std::vector<bool>{false, true, false});
  REQUIRE(data.advantages.size() == 3);
  CHECK(data.advantages[0] == std::vector<std::vector<double>>{{0.5}, {-0.5}});
  CHECK(data.advantages[1] == std::vector<std::vector<double>>{{0.0}, {0.0}});
  // Group c, gamma 0.4: returns A [0.4, 1], B [0.5]: turn 0 mean 0.45; turn 1 A alone.
  REQUIRE(data.advantages[2].size() == 2);
  CHECK(data.advantages[2][0][0] == Catch::Approx(-0.05));
  CHECK(data.advantages[2][0][1] == 0.0);
  CHECK(data.advantages[2][1][0] == Catch::Approx(0.05));
  REQUIRE(data.used_advantages.size() == 5);
  CHECK(data.used_advantages[0] == 0.5);
  CHECK(data.used_advantages[2] == Catch::Approx(-0.05));

  // Group a's two, group c's two sampled turns; in group, trajectory, turn order.
  REQUIRE(data.datums.size() == 4);
  const auto& first = data.datums[0];
  CHECK(first.model_input == std::vector<std::int64_t>{1, 2, 3, 4});
  CHECK(first.target_tokens == std::vector<std::int64_t>{2, 3, 4, 5});
  CHECK(first.weights == std::vector<float>{0, 0, 1, 1});
  CHECK(first.logprobs == std::vector<float>{0, 0, -0.5F, -1.0F});
  CHECK(first.advantages == std::vector<float>{0, 0, 0.5F, 0.5F});
  CHECK(data.datums[1].target_tokens.back() == 6);
  CHECK(data.datums[1].advantages.back() == -0.5F);
  CHECK(data.datums[2].model_input == std::vector<std::int64_t>{1, 2});
  CHECK(data.datums[2].target_tokens == std::vector<std::int64_t>{2, 9});
  CHECK(data.datums[3].target_tokens.back() == 10);
  CHECK(data.datums[3].advantages.back() == Catch::Approx(0.05F));

  d.remove_constant_reward_groups = false;
  const auto kept = train::assemble_training_data(groups, d);
  CHECK(kept.groups_used == 3);
  CHECK(kept.datums.size() == 6);
  CHECK(kept.datums[2].target_tokens.back() == 7);
  CHECK(kept.datums[2].advantages.back() == 0.0F);
}

TEST_CASE("training data: mask_truncated leaves cut completions out, their rewards still counted") {
  core::Transition cut = transition(0.0, {6, 7});
  cut.completion.truncated = true;
  const std::vector<core::TrajectoryGroup> groups = {
      group("a", {{transition(1.0, {4})}, {cut}, {transition(0.0, {5})}})};
  train::DataOptions d;
  d.mask_truncated = true;
  const auto data = train::assemble_training_data(groups, d);
  CHECK(data.truncated_masked == 1);
  // Mean 1/3 over all three rewards: the cut completion is part of its group's baseline.
  CHECK(data.advantages[0][0][0] == Catch::Approx(2.0 / 3));
  REQUIRE(data.datums.size() == 2);
  CHECK(data.datums[0].target_tokens.back() == 4);
  CHECK(data.datums[1].target_tokens.back() == 5);
  CHECK(data.datums[1].advantages.back() == Catch::Approx(-1.0 / 3));
  d.mask_truncated = false;
  CHECK(train::assemble_training_data(groups, d).datums.size() == 3);
}

TEST_CASE("a completion datum masks the prompt and needs matching logprobs") {
  const auto d = train::completion_datum({1, 2}, {3, 4, 5}, {-1, -2, -3}, 0.25F);
  CHECK(d.model_input == std::vector<std::int64_t>{1, 2, 3, 4});
  CHECK(d.target_tokens == std::vector<std::int64_t>{2, 3, 4, 5});
  CHECK(d.weights == std::vector<float>{0, 1, 1, 1});
  CHECK(d.logprobs == std::vector<float>{0, -1, -2, -3});
  CHECK(d.advantages == std::vector<float>{0, 0.25F, 0.25F, 0.25F});
  CHECK_THROWS_AS(train::completion_datum({}, {3}), core::InvalidArgument);
  CHECK_THROWS_AS(train::completion_datum({1}, {3, 4}, {-1}), core::InvalidArgument);
}

TEST_CASE("episode shaping: solved episodes get the success bonus on their last turn's return") {
  AdvantageOptions o;
  o.returns.gamma = 0.0;
  o.returns.success_bonus = 1.0;
  o.returns.failure_penalty = -0.5;
  // Returns: A (solved) [0.0, 0.2 + 1.0], B (not) [0.1 - 0.5]. Turn 0: A 0.0, B -0.4, mean -0.2.
  const auto adv = turn_advantages({{0.0, 0.2}, {0.1}}, o, {true, false});
  CHECK(adv[0][0] == Catch::Approx(0.2));
  CHECK(adv[1][0] == Catch::Approx(-0.2));
  CHECK(adv[0][1] == 0.0);  // turn 1 reached by A only
  CHECK_THROWS_AS(turn_advantages({{0.0}, {0.1}}, o, {true}), core::InvalidArgument);
  // Through the groups: a trajectory solved its problem when a turn's kernel was correct.
  auto solved_late = transition(0.1, {4});
  auto correct = transition(0.9, {5});
  correct.eval = core::EvalResult{};
  correct.eval->correct = true;
  auto wrong = transition(0.2, {6});
  wrong.eval = core::EvalResult{};
  const auto g = group("p", {{solved_late, correct}, {wrong}, {transition(0.3, {7})}});
  CHECK(train::group_solved(g) == std::vector<bool>{true, false, false});
  train::DataOptions d;
  d.advantages = o;
  const auto data = train::assemble_training_data({g}, d);
  // Turn 0 returns (gamma 0): 0.1 (its bonus goes to turn 1), 0.2 - 0.5, 0.3 - 0.5; mean -0.4 / 3.
  CHECK(data.advantages[0][0][0] == Catch::Approx(0.1 + 0.4 / 3));
  CHECK(data.advantages[0][1][0] == Catch::Approx(-0.3 + 0.4 / 3));
  CHECK(data.advantages[0][2][0] == Catch::Approx(-0.2 + 0.4 / 3));
}
