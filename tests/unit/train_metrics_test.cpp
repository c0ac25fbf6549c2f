// A step's metrics from hand-built trajectories: per-level rates, the multi-turn rates under the
// seeds' names, the best trials fraction per trajectory, per-turn compile rates and the share of
// completions that ended on a stop sequence.
#include <kbrl/core/types.hpp>
#include <kbrl/train/metrics.hpp>

#include "catch.hpp"

using namespace kbrl;

namespace {

core::Transition turn(bool compiled, bool correct, int passed, int total, bool truncated = false) {
  core::Transition t;
  core::EvalResult e;
  e.format_ok = true;
  e.compiled = compiled;
  e.correct = correct;
  e.trials_passed = passed;
  e.trials_total = total;
  t.eval = e;
  t.completion.truncated = truncated;
  return t;
}

core::Trajectory trajectory(std::vector<core::Transition> turns) {
  core::Trajectory tr;
  tr.transitions = std::move(turns);
  return tr;
}

double at(const boost::json::object& m, const char* key) {
  INFO(key);
  REQUIRE(m.contains(key));
  return m.at(key).to_number<double>();
}

}  // namespace

TEST_CASE("rollout metrics: per level, per turn and under the seeds' multi-turn names") {
  // Level 1: two trajectories of two turns. Level 2: one trajectory of one turn. A group
  // outside the levels (0) counts in the totals only.
  core::TrajectoryGroup l1{"level1/1_A",
                           {trajectory({turn(false, false, 0, 0), turn(true, true, 5, 5)}),
                            trajectory({turn(true, false, 2, 5), turn(true, false, 3, 5, true)})},
                           1};
  core::TrajectoryGroup l2{"level2/7_B", {trajectory({turn(true, false, 1, 4)})}, 2};
  core::TrajectoryGroup other{"bundled/1_C", {trajectory({turn(false, false, 0, 0, true)})}, 0};
  boost::json::object m;
  train::add_rollout_metrics(m, {l1, l2, other}, true);
  CHECK(at(m, "kernel/evaluations") == 6);
  CHECK(at(m, "kernel/compile_rate") == Catch::Approx(4.0 / 6));
  CHECK(at(m, "kernel/level_1/compile_rate") == Catch::Approx(3.0 / 4));
  CHECK(at(m, "kernel/level_1/correct_rate") == Catch::Approx(1.0 / 4));
  CHECK(at(m, "kernel/level_1/format_rate") == 1.0);
  CHECK(at(m, "kernel/level_2/compile_rate") == 1.0);
  CHECK(at(m, "kernel/level_2/correct_rate") == 0.0);
  CHECK_FALSE(m.contains("kernel/level_0/compile_rate"));
  CHECK(at(m, "multiturn/compile_rate") == Catch::Approx(4.0 / 6));
  CHECK(at(m, "multiturn/correct_rate") == Catch::Approx(1.0 / 6));
  // Best per trajectory: 1 (correct), 3/5, 1/4, 0.
  CHECK(at(m, "multiturn/max_correct_per_trajectory") == Catch::Approx((1.0 + 0.6 + 0.25 + 0.0) / 4));
  CHECK(at(m, "multiturn/turn_1/compile_rate") == Catch::Approx(2.0 / 4));
  CHECK(at(m, "multiturn/turn_2/compile_rate") == 1.0);
  CHECK(at(m, "multiturn/turn_2/correct_rate") == Catch::Approx(1.0 / 2));
  CHECK(at(m, "sampling/completed_fraction") == Catch::Approx(4.0 / 6));
  boost::json::object single;
  train::add_rollout_metrics(single, {l1}, false);
  CHECK_FALSE(single.contains("multiturn/compile_rate"));
  CHECK(single.contains("kernel/level_1/correct_rate"));

  boost::json::object held_out;
  train::add_held_out_metrics(held_out, {l1, l2, other});
  CHECK(at(held_out, "eval/level_1/correct_rate") == Catch::Approx(0.5));  // one of two episodes solved
  CHECK(at(held_out, "eval/level_2/correct_rate") == 0.0);
  CHECK(at(held_out, "eval/problems") == 4);
}
