// The checks that run before a candidate reaches a worker: is it a program with a `ModelNew`
// class, and does the static checker find a reward hack in it. Cheap, in-process, no Python.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/core/types.hpp"

namespace kbrl::check {

struct CandidateCheck {
  bool format_ok = false;  // defines a top-level class ModelNew
  bool static_ok = true;   // no static-check finding of severity error
  std::vector<core::StaticFinding> findings;
  std::string message;     // why it was rejected, empty when it was not
};

// True when `source` defines `class ModelNew` at module level (not in a comment or a string).
bool defines_model_new(std::string_view source);

// Format check, then the static checker (unless `static_checks` is false) with the request's
// language, precision and reference, and `severity` overrides by rule name.
CandidateCheck check_candidate(const core::EvalRequest& request, const std::map<std::string, core::Severity>& severity = {},
                               bool static_checks = true);

}  // namespace kbrl::check
