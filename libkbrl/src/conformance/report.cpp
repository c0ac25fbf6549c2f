#include "kbrl/conformance/report.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kbrl::conformance {

bool Report::failed(std::string_view check) const {
  return std::any_of(failures.begin(), failures.end(), [&](const Failure& f) { return f.check == check; });
}

bool Report::passed_check(std::string_view check) const {
  return std::find(passed.begin(), passed.end(), check) != passed.end();
}

bool Report::skipped_check(std::string_view check) const {
  return std::any_of(skipped.begin(), skipped.end(), [&](const Skip& s) { return s.check == check; });
}

std::vector<std::string> Report::failed_checks() const {
  std::vector<std::string> names;
  for (const auto& f : failures)
    if (std::find(names.begin(), names.end(), f.check) == names.end()) names.push_back(f.check);
  return names;
}

std::string Report::summary() const {
  std::string s = fmt::format("{} passed, {} failed, {} skipped", passed.size(), failed_checks().size(), skipped.size());
  for (const auto& f : failures) s += fmt::format("\n  FAILED {}: {}", f.check, f.message);
  for (const auto& k : skipped) s += fmt::format("\n  skipped {}: {}", k.check, k.reason);
  return s;
}

}  // namespace kbrl::conformance
