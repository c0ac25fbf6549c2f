// What a conformance suite found: the named checks that passed, failed (with what was wrong)
// or were skipped. The suites return a Report instead of asserting, so they run under any test
// framework (docs/conformance.md shows Catch2 and GoogleTest glue).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kbrl::conformance {

struct Failure {
  std::string check;    // the check's name, e.g. "one_result_per_request"
  std::string message;  // what the implementation did, naming the request or step
};

struct Skip {
  std::string check;
  std::string reason;  // e.g. "no make_evaluator given"
};

struct Report {
  std::vector<std::string> passed;
  std::vector<Failure> failures;  // a check may fail more than once (one entry per finding)
  std::vector<Skip> skipped;

  bool ok() const noexcept { return failures.empty(); }
  bool failed(std::string_view check) const;
  bool passed_check(std::string_view check) const;
  bool skipped_check(std::string_view check) const;
  // The failed checks' names, each once, in the order they first failed.
  std::vector<std::string> failed_checks() const;
  // "8 passed, 1 failed, 0 skipped" and then one line per failure and skip.
  std::string summary() const;
};

}  // namespace kbrl::conformance
