// Selecting problems: by KernelBench level, by problem number, by globs on names and ids to
// include and to exclude, and without the ones that need pretrained weights. Every criterion that
// is set must match something in the input, so a typo in a config fails instead of silently
// training on nothing (or excluding nothing).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kbrl/core/types.hpp"

namespace kbrl::dataset {

struct ProblemFilter {
  std::vector<int> levels;   // keep problems of these levels; empty keeps every level
  std::vector<int> numbers;  // keep problems with these numbers (in any kept level); empty keeps all
  // Case-insensitive globs, each matched against the whole name *or* the whole id: "*conv*",
  // "level2/*", "?_relu". Syntax: * any run of characters, ? one character, [abc] [a-z] [!abc]
  // one character of (or not of) a set, \x the character x.
  std::vector<std::string> include;  // keep problems that match any of these; empty keeps all
  std::vector<std::string> exclude;  // then drop problems that match any of these
  bool exclude_needs_weights = false;  // drop problems that load pretrained weights (level 4)
  friend bool operator==(const ProblemFilter&, const ProblemFilter&) = default;
};

// Whole-string, case-insensitive (ASCII) glob match. Throws core::InvalidArgument for a
// malformed pattern (an unclosed '[' or a trailing '\').
bool glob_match(std::string_view pattern, std::string_view text);
// Throws core::InvalidArgument, saying what is wrong, when `pattern` is not a valid glob.
void check_glob(std::string_view pattern);

// Whether one problem passes every criterion.
bool filter_matches(const ProblemFilter& filter, const core::Problem& problem);

// The problems that pass, in input order. Throws core::InvalidArgument when a glob is malformed,
// or when a requested level, number, include glob or exclude glob matches no problem of the
// input at all (the message lists what the input does have).
std::vector<core::Problem> filter_problems(const std::vector<core::Problem>& problems,
                                           const ProblemFilter& filter);

}  // namespace kbrl::dataset
