// Discounted returns over multi-turn episodes, sum and max forms, with hand-computed values.
#include <cmath>
#include <limits>
#include <vector>

#include "catch.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/reward/config.hpp"
#include "kbrl/reward/returns.hpp"

#if defined(KBRL_CATCH3)
using Catch::Approx;  // Catch2 2.x declares Approx at global scope
#endif

using namespace kbrl::reward;

namespace {

void check_near(const std::vector<double>& got, const std::vector<double>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    CHECK(got[i] == Approx(want[i]).epsilon(1e-12).margin(1e-15));
  }
}

}  // namespace

TEST_CASE("sum form accumulates discounted future rewards") {
  // R3 = 1.0; R2 = 0.8 + 0.4*1.0 = 1.2; R1 = 0.3 + 0.4*1.2 = 0.78; R0 = 0.2 + 0.4*0.78 = 0.512
  // (= 0.2 + 0.4*0.3 + 0.16*0.8 + 0.064*1.0).
  check_near(discounted_returns({0.2, 0.3, 0.8, 1.0}, 0.4, ReturnForm::sum),
             {0.512, 0.78, 1.2, 1.0});
  // A Kevin-style episode: wrong, correct at 1.2x (0.3 + 1.2), wrong, correct at 2x (0.3 + 2).
  check_near(discounted_returns({0.0, 1.5, 0.0, 2.3}, 0.4), {0.7472, 1.868, 0.92, 2.3});
}

TEST_CASE("max form credits the best discounted result ahead") {
  // R1 = max(0.3, 0.4*0.8, 0.16*1.0) = 0.32; R0 = max(0.2, 0.12, 0.128, 0.064) = 0.2.
  check_near(discounted_returns({0.2, 0.3, 0.8, 1.0}, 0.4, ReturnForm::max),
             {0.2, 0.32, 0.8, 1.0});
  // R0 = max(0, 0.4*1.5, 0.16*0, 0.064*2.3) = 0.6.
  check_near(discounted_returns({0.0, 1.5, 0.0, 2.3}, 0.4, ReturnForm::max),
             {0.6, 1.5, 0.92, 2.3});
  // Negative rewards: a later positive result still lifts an early failure.
  check_near(discounted_returns({-1.0, 2.0}, 0.5, ReturnForm::max), {1.0, 2.0});
  check_near(discounted_returns({-1.0, -2.0}, 0.5, ReturnForm::max), {-1.0, -2.0});
}

TEST_CASE("gamma at the ends of its range") {
  const std::vector<double> r{1.0, 2.0, 3.0};
  check_near(discounted_returns(r, 0.0, ReturnForm::sum), r);
  check_near(discounted_returns(r, 0.0, ReturnForm::max), r);
  check_near(discounted_returns(r, 1.0, ReturnForm::sum), {6.0, 5.0, 3.0});
  check_near(discounted_returns(r, 1.0, ReturnForm::max), {3.0, 3.0, 3.0});
}

TEST_CASE("empty and single-turn episodes") {
  CHECK(discounted_returns({}, 0.4).empty());
  CHECK(discounted_returns({}, 0.4, ReturnForm::max).empty());
  CHECK(discounted_returns({0.7}, 0.4) == std::vector<double>{0.7});
  CHECK(discounted_returns({-0.7}, 0.9, ReturnForm::max) == std::vector<double>{-0.7});
}

TEST_CASE("gamma outside the unit interval and non-finite rewards are rejected") {
  for (double g : {-0.1, 1.0001, std::numeric_limits<double>::quiet_NaN(),
                   std::numeric_limits<double>::infinity()}) {
    CAPTURE(g);
    CHECK_THROWS_AS(discounted_returns({1.0}, g), kbrl::core::InvalidArgument);
  }
  CHECK_THROWS_WITH(discounted_returns({1.0}, 1.5), "discount gamma must be in [0, 1] (got 1.5)");
  CHECK_THROWS_WITH(discounted_returns({1.0, std::nan("")}, 0.5),
                    "reward of turn 1 is not finite (nan)");
  CHECK_THROWS_AS(
      discounted_returns({std::numeric_limits<double>::infinity()}, 0.5, ReturnForm::max),
      kbrl::core::InvalidArgument);
}

TEST_CASE("episode shaping: kernel_rl's success bonus, failure penalty and normalization") {
  MultiTurnOptions o;  // gamma 0.4, sum: R = [0.512 ... ] for [0.2, 0.3, 0.8, 1.0]
  const std::vector<double> rewards{0.2, 0.3, 0.8, 1.0};
  // Nothing set: the discounted returns themselves, solved or not.
  check_near(episode_returns(rewards, true, o), {0.512, 0.78, 1.2, 1.0});
  check_near(episode_returns(rewards, false, o), {0.512, 0.78, 1.2, 1.0});
  o.success_bonus = 0.5;
  o.failure_penalty = -0.25;
  // Added to the last turn's return only, after discounting: earlier turns do not see it.
  check_near(episode_returns(rewards, true, o), {0.512, 0.78, 1.2, 1.5});
  check_near(episode_returns(rewards, false, o), {0.512, 0.78, 1.2, 0.75});
  check_near(episode_returns({0.3}, true, o), {0.8});  // an episode solved at its first turn
  // Normalized within the episode: [0.512, 0.78, 1.2, 1.5] has mean 0.998 and population
  // standard deviation sqrt(0.14516) = 0.380999...
  o.normalize_returns = true;
  const double mean = 0.998, sd = std::sqrt(((0.512 - mean) * (0.512 - mean) + (0.78 - mean) * (0.78 - mean) +
                                             (1.2 - mean) * (1.2 - mean) + (1.5 - mean) * (1.5 - mean)) / 4);
  check_near(episode_returns(rewards, true, o), {(0.512 - mean) / sd, (0.78 - mean) / sd, (1.2 - mean) / sd, (1.5 - mean) / sd});
  check_near(episode_returns({0.3}, true, o), {0.8});            // one turn: nothing to normalize
  check_near(episode_returns({0.0, 0.0}, false, MultiTurnOptions{0.4, ReturnForm::sum, 0, 0, true}), {0.0, 0.0});  // sd 0
  CHECK(episode_returns({}, true, o).empty());
}
