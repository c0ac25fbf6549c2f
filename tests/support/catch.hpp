// Include this instead of a Catch2 header: it works with Catch2 2.x and 3.x.
#pragma once
#include <iostream>
#include <string>

#if defined(KBRL_CATCH3)
#include <catch2/catch_all.hpp>
#else
#include <catch2/catch.hpp>
// Catch2 3 spells them Catch::Approx and Matchers::ContainsSubstring (its Contains is the
// vector matcher); give 2.x the same names.
namespace Catch {
using Detail::Approx;
namespace Matchers {
inline auto ContainsSubstring(const std::string& text) { return Contains(text); }
}  // namespace Matchers
}  // namespace Catch
#endif

// KBRL_SKIP(reason): ends the test case as skipped, so that CTest reports "Skipped" and not
// "Passed" for a test that checked nothing (a missing GPU, compiler, or data set). Call it before
// any assertion: a skip hides nothing, but it must not hide an earlier failure either.
//
// Catch2 3 has SKIP (exit code 4 when every test case run was skipped: the SKIP_RETURN_CODE that
// tests/CMakeLists.txt sets). Catch2 2.x has no skip at all, so the test case returns and prints
// the marker line below, which CTest's SKIP_REGULAR_EXPRESSION (KBRL_SKIP_MARKER in
// tests/CMakeLists.txt) turns into a skip; both versions print it, so one property serves both.
#define KBRL_SKIP_MARKER "KBRL-TEST-SKIPPED: "
#if defined(KBRL_CATCH3)
#define KBRL_SKIP(reason)                                 \
  do {                                                    \
    std::cout << KBRL_SKIP_MARKER << reason << std::endl; \
    SKIP(reason);                                         \
  } while (false)
#else
#define KBRL_SKIP(reason)                                 \
  do {                                                    \
    std::cout << KBRL_SKIP_MARKER << reason << std::endl; \
    WARN("skipped: " << reason);                          \
    return;                                               \
  } while (false)
#endif
