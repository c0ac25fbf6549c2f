#include "kbrl/dataset/filter.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>

#include "kbrl/core/error.hpp"

namespace kbrl::dataset {
namespace {

char lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

// Index just past the ']' closing the set that opens at pattern[open], or npos when unclosed.
// A ']' right after "[" or "[!" belongs to the set, as in POSIX shells.
std::size_t class_end(std::string_view pattern, std::size_t open) {
  std::size_t i = open + 1;
  if (i < pattern.size() && (pattern[i] == '!' || pattern[i] == '^')) ++i;
  if (i < pattern.size() && pattern[i] == ']') ++i;
  while (i < pattern.size() && pattern[i] != ']') i += pattern[i] == '\\' ? 2 : 1;
  return i < pattern.size() ? i + 1 : std::string_view::npos;
}

}  // namespace

void check_glob(std::string_view pattern) {
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '\\') {
      if (i + 1 == pattern.size())
        throw core::InvalidArgument(fmt::format("glob '{}': ends with a lone '\\'", pattern));
      ++i;
    } else if (pattern[i] == '[') {
      const std::size_t end = class_end(pattern, i);
      if (end == std::string_view::npos)
        throw core::InvalidArgument(fmt::format("glob '{}': '[' at position {} is never closed", pattern, i));
      i = end - 1;
    }
  }
}

namespace {

// Whether the set pattern[open, end) contains c (both already lowered where letters).
bool class_contains(std::string_view pattern, std::size_t open, std::size_t end, char c) {
  std::size_t i = open + 1;
  bool negate = false;
  if (pattern[i] == '!' || pattern[i] == '^') {
    negate = true;
    ++i;
  }
  bool found = false;
  bool first = true;
  while (i < end - 1 && (first || pattern[i] != ']')) {
    first = false;
    char lo = pattern[i];
    if (lo == '\\') lo = pattern[++i];
    ++i;
    char hi = lo;
    if (i + 1 < end - 1 && pattern[i] == '-') {
      hi = pattern[i + 1];
      if (hi == '\\') hi = pattern[++i + 1];
      i += 2;
    }
    if (lower(lo) <= c && c <= lower(hi)) found = true;
  }
  return found != negate;
}

// Matches one pattern element at pattern[p] (not '*') against c; sets `next` past it.
bool match_element(std::string_view pattern, std::size_t p, char c, std::size_t& next) {
  switch (pattern[p]) {
    case '?':
      next = p + 1;
      return true;
    case '\\':
      next = p + 2;
      return lower(pattern[p + 1]) == c;
    case '[':
      next = class_end(pattern, p);
      return class_contains(pattern, p, next, c);
    default:
      next = p + 1;
      return lower(pattern[p]) == c;
  }
}

bool glob_match_checked(std::string_view pattern, std::string_view text) {
  // Greedy match with backtracking to the last '*': linear in practice, never exponential.
  std::size_t p = 0, t = 0;
  std::size_t star_p = std::string_view::npos, star_t = 0;
  while (t < text.size()) {
    if (p < pattern.size()) {
      if (pattern[p] == '*') {
        star_p = ++p;
        star_t = t;
        continue;
      }
      std::size_t next = p;
      if (match_element(pattern, p, lower(text[t]), next)) {
        p = next;
        ++t;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    p = star_p;
    t = ++star_t;
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

bool contains(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

bool pattern_matches(const std::string& pattern, const core::Problem& p) {
  return glob_match_checked(pattern, p.name) || glob_match_checked(pattern, p.id);
}

bool any_matches(const std::vector<std::string>& patterns, const core::Problem& p) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const std::string& g) { return pattern_matches(g, p); });
}

void check_patterns(const ProblemFilter& f) {
  for (const auto& g : f.include) check_glob(g);
  for (const auto& g : f.exclude) check_glob(g);
}

}  // namespace

bool glob_match(std::string_view pattern, std::string_view text) {
  check_glob(pattern);
  return glob_match_checked(pattern, text);
}

bool filter_matches(const ProblemFilter& filter, const core::Problem& problem) {
  check_patterns(filter);
  if (!filter.levels.empty() && !contains(filter.levels, problem.level)) return false;
  if (!filter.numbers.empty() && !contains(filter.numbers, problem.number)) return false;
  if (filter.exclude_needs_weights && problem.needs_weights) return false;
  if (!filter.include.empty() && !any_matches(filter.include, problem)) return false;
  return !any_matches(filter.exclude, problem);
}

std::vector<core::Problem> filter_problems(const std::vector<core::Problem>& problems,
                                           const ProblemFilter& filter) {
  check_patterns(filter);
  // Each criterion must select something by itself; an empty result from their combination is
  // left to the caller.
  std::set<int> levels_present;
  for (const core::Problem& p : problems) levels_present.insert(p.level);
  for (int level : filter.levels) {
    if (!levels_present.contains(level))
      throw core::InvalidArgument(fmt::format("problem filter: no problem has level {} (levels present: {})",
                                              level, fmt::join(levels_present, ", ")));
  }
  std::set<int> numbers_present;
  for (const core::Problem& p : problems)
    if (filter.levels.empty() || contains(filter.levels, p.level)) numbers_present.insert(p.number);
  for (int number : filter.numbers) {
    if (!numbers_present.contains(number))
      throw core::InvalidArgument(
          numbers_present.empty()
              ? fmt::format("problem filter: no problem is numbered {}", number)
              : fmt::format("problem filter: no problem{} is numbered {} (numbers present: {} to {})",
                            filter.levels.empty() ? "" : " of the selected levels", number,
                            *numbers_present.begin(), *numbers_present.rbegin()));
  }
  auto matches_none = [&](const std::string& g) {
    return std::none_of(problems.begin(), problems.end(), [&](const core::Problem& p) { return pattern_matches(g, p); });
  };
  for (const auto& g : filter.include)
    if (matches_none(g)) throw core::InvalidArgument(fmt::format("problem filter: include '{}' matches no problem name or id", g));
  for (const auto& g : filter.exclude)
    if (matches_none(g)) throw core::InvalidArgument(fmt::format("problem filter: exclude '{}' matches no problem name or id", g));

  std::vector<core::Problem> out;
  for (const core::Problem& p : problems)
    if (filter_matches(filter, p)) out.push_back(p);
  return out;
}

}  // namespace kbrl::dataset
