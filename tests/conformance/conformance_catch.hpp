// Catch2 glue for the conformance suites (kbrl/conformance): a Report becomes one assertion per
// check, so a failure names the check and what the implementation did. The suites themselves
// know nothing of Catch2; docs/conformance.md shows the same glue for GoogleTest.
#pragma once

#include <kbrl/conformance/report.hpp>

#include <string_view>
#include <vector>

#include "catch.hpp"

namespace kbrl::conformance::testing {

// Every check in `names` ran and passed; nothing failed or was skipped.
inline void require_all_passed(const Report& report, const std::vector<std::string_view>& names) {
  INFO(report.summary());
  for (const auto& f : report.failures) FAIL_CHECK(f.check << ": " << f.message);
  for (const auto& s : report.skipped) FAIL_CHECK(s.check << " was skipped: " << s.reason);
  for (auto name : names) {
    INFO("check " << name);
    CHECK(report.passed_check(name));
  }
}

// A suite run on a deliberately broken implementation: `check` must be among the failures.
inline void require_caught(const Report& report, std::string_view check) {
  INFO(report.summary());
  CHECK(report.failed(check));
}

}  // namespace kbrl::conformance::testing
