#include <kbrl/core/error.hpp>
#include <kbrl/dataset/filter.hpp>

#include <string>
#include <vector>

#include "catch.hpp"

using namespace kbrl::dataset;
using kbrl::core::Problem;

namespace {

Problem make(int level, int number, const std::string& name) {
  Problem p;
  p.level = level;
  p.number = number;
  p.name = name;
  p.id = "level" + std::to_string(level) + "/" + std::to_string(number) + "_" + name;
  p.needs_weights = level == 4;
  return p;
}

const std::vector<Problem> kProblems = {
    make(1, 1, "Square_matrix_multiplication_"), make(1, 19, "ReLU"),       make(1, 23, "Softmax"),
    make(2, 1, "Conv2D_ReLU_BiasAdd"),           make(2, 19, "ConvTranspose2d_GELU_GroupNorm"),
    make(3, 1, "MLP"),                           make(4, 1, "gpt2_bs32_seq256"), make(4, 2, "facebook-opt-1p3b_bs1_seq2047"),
};

std::vector<std::string> ids(const std::vector<Problem>& ps) {
  std::vector<std::string> out;
  for (const Problem& p : ps) out.push_back(p.id);
  return out;
}

std::string invalid_argument_message(const std::vector<Problem>& ps, const ProblemFilter& f) {
  try {
    filter_problems(ps, f);
  } catch (const kbrl::core::InvalidArgument& e) {
    return e.what();
  }
  return "(no InvalidArgument)";
}

}  // namespace

TEST_CASE("glob patterns match whole strings ignoring case") {
  CHECK(glob_match("relu", "ReLU"));
  CHECK(glob_match("*relu*", "Conv2D_ReLU_BiasAdd"));
  CHECK_FALSE(glob_match("relu", "ReLU6"));
  CHECK_FALSE(glob_match("*conv", "Conv2D"));
  CHECK(glob_match("conv?d*", "Conv2D_ReLU"));
  CHECK_FALSE(glob_match("conv?d", "Conv22D"));
  CHECK(glob_match("*", ""));
  CHECK(glob_match("", ""));
  CHECK_FALSE(glob_match("", "x"));
  CHECK(glob_match("level[12]/*", "level2/19_X"));
  CHECK_FALSE(glob_match("level[12]/*", "level3/19_X"));
  CHECK(glob_match("level[!4]/*", "level3/1_MLP"));
  CHECK_FALSE(glob_match("level[!4]/*", "level4/1_gpt2"));
  CHECK(glob_match("[a-c]*", "Conv"));  // ranges ignore case too
  CHECK_FALSE(glob_match("[a-c]*", "ReLU"));
  CHECK(glob_match("[]x]", "]"));  // a leading ']' is a member of the set
  CHECK(glob_match("\\*star", "*star"));
  CHECK_FALSE(glob_match("\\*star", "xstar"));
  CHECK(glob_match("*a*b*c*", "xxaxxbxxcxx"));
  CHECK_FALSE(glob_match("*a*b*c*", "xxaxxcxxbxx"));
  CHECK_FALSE(glob_match("*a*a*a*a*a*a*b", std::string(200, 'a')));  // backtracking stays cheap
  CHECK_THROWS_AS(glob_match("[abc", "a"), kbrl::core::InvalidArgument);
  CHECK_THROWS_AS(glob_match("abc\\", "abc"), kbrl::core::InvalidArgument);
}

TEST_CASE("filters combine levels numbers patterns and weights") {
  CHECK(filter_problems(kProblems, {}).size() == kProblems.size());

  ProblemFilter levels;
  levels.levels = {1, 3};
  CHECK(ids(filter_problems(kProblems, levels)) ==
        std::vector<std::string>{"level1/1_Square_matrix_multiplication_", "level1/19_ReLU", "level1/23_Softmax",
                                 "level3/1_MLP"});

  ProblemFilter numbers;
  numbers.numbers = {19};
  CHECK(ids(filter_problems(kProblems, numbers)) ==
        std::vector<std::string>{"level1/19_ReLU", "level2/19_ConvTranspose2d_GELU_GroupNorm"});
  numbers.levels = {2};
  CHECK(ids(filter_problems(kProblems, numbers)) == std::vector<std::string>{"level2/19_ConvTranspose2d_GELU_GroupNorm"});

  ProblemFilter pattern;
  pattern.include = {"*RELU*"};
  CHECK(ids(filter_problems(kProblems, pattern)) == std::vector<std::string>{"level1/19_ReLU", "level2/1_Conv2D_ReLU_BiasAdd"});
  pattern.include = {"level4/*"};  // matched against the id
  CHECK(filter_problems(kProblems, pattern).size() == 2);

  ProblemFilter no_weights;
  no_weights.exclude_needs_weights = true;
  const auto kept = filter_problems(kProblems, no_weights);
  CHECK(kept.size() == 6);
  for (const Problem& p : kept) CHECK(p.level != 4);

  ProblemFilter all;
  all.levels = {1, 2, 4};
  all.numbers = {1};
  all.include = {"*_*"};
  all.exclude_needs_weights = true;
  CHECK(ids(filter_problems(kProblems, all)) ==
        std::vector<std::string>{"level1/1_Square_matrix_multiplication_", "level2/1_Conv2D_ReLU_BiasAdd"});
  CHECK(filter_matches(all, kProblems[0]));
  CHECK_FALSE(filter_matches(all, kProblems[6]));
}

TEST_CASE("a filter criterion that selects nothing is an error") {
  ProblemFilter level;
  level.levels = {1, 5};
  const std::string level_msg = invalid_argument_message(kProblems, level);
  CHECK(level_msg.find("level 5") != std::string::npos);
  CHECK(level_msg.find("levels present: 1, 2, 3, 4") != std::string::npos);

  ProblemFilter number;
  number.levels = {3};
  number.numbers = {19};  // exists in levels 1 and 2, not in level 3
  CHECK(invalid_argument_message(kProblems, number).find("numbered 19") != std::string::npos);

  ProblemFilter pattern;
  pattern.include = {"*relu*", "*attention*"};  // the second one alone matches nothing
  CHECK(invalid_argument_message(kProblems, pattern).find("include '*attention*' matches no problem") != std::string::npos);
  pattern.include = {"[relu"};
  CHECK(invalid_argument_message(kProblems, pattern).find("never closed") != std::string::npos);
  ProblemFilter exclude;
  exclude.exclude = {"*softmax*", "*atention*"};  // a typo would otherwise exclude nothing, silently
  CHECK(invalid_argument_message(kProblems, exclude).find("exclude '*atention*' matches no problem") != std::string::npos);
  exclude.exclude = {"level1/\\"};
  CHECK(invalid_argument_message(kProblems, exclude).find("lone") != std::string::npos);

  // Criteria that each match something may still combine to nothing: that is allowed.
  ProblemFilter combined;
  combined.levels = {3};
  combined.include = {"relu"};
  CHECK(filter_problems(kProblems, combined).empty());
}

TEST_CASE("include keeps what matches any glob, exclude then drops what matches any") {
  ProblemFilter f;
  f.include = {"level1/*", "*conv*"};  // ids or names, any of the globs
  CHECK(ids(filter_problems(kProblems, f)) ==
        std::vector<std::string>{"level1/1_Square_matrix_multiplication_", "level1/19_ReLU", "level1/23_Softmax",
                                 "level2/1_Conv2D_ReLU_BiasAdd", "level2/19_ConvTranspose2d_GELU_GroupNorm"});
  f.exclude = {"*relu*", "softmax"};  // exclude wins over include
  CHECK(ids(filter_problems(kProblems, f)) ==
        std::vector<std::string>{"level1/1_Square_matrix_multiplication_", "level2/19_ConvTranspose2d_GELU_GroupNorm"});
  CHECK_FALSE(filter_matches(f, kProblems[1]));  // ReLU: included, then excluded
  CHECK(filter_matches(f, kProblems[4]));

  ProblemFilter only_exclude;  // no include: everything, less the excluded
  only_exclude.exclude = {"level4/*", "level3/*"};
  CHECK(filter_problems(kProblems, only_exclude).size() == 5);
  // An exclude glob must match some problem of the input, not only of what include kept.
  ProblemFilter outside;
  outside.include = {"level1/*"};
  outside.exclude = {"MLP"};
  CHECK(filter_problems(kProblems, outside).size() == 3);
}

TEST_CASE("check_glob names what is wrong with a glob") {
  CHECK_NOTHROW(check_glob("level[12]/*_relu?"));
  std::string message = "(no InvalidArgument)";
  try {
    check_glob("level[12/*");
  } catch (const kbrl::core::InvalidArgument& e) {
    message = e.what();
  }
  CHECK(message.find("'[' at position 5 is never closed") != std::string::npos);
  CHECK_THROWS_AS(check_glob("x\\"), kbrl::core::InvalidArgument);
}
