#include "kbrl/check/candidate_checks.hpp"

#include <fmt/format.h>

#include "kbrl/check/static_check.hpp"
#include "kbrl/prompt/answer_parser.hpp"

namespace kbrl::check {

bool defines_model_new(std::string_view source) { return prompt::defines_top_level_class(source, "ModelNew"); }

CandidateCheck check_candidate(const core::EvalRequest& request, const std::map<std::string, core::Severity>& severity,
                               bool static_checks) {
  CandidateCheck out;
  out.format_ok = defines_model_new(request.candidate_source);
  if (!out.format_ok) {
    out.message = "the program defines no top-level class ModelNew";
    return out;
  }
  if (!static_checks) return out;
  out.findings = static_check(request.candidate_source, static_check_config_for(request, severity));
  out.static_ok = !has_errors(out.findings);
  for (const auto& f : out.findings) {
    if (f.severity != core::Severity::error) continue;
    out.message += fmt::format("{}{} (line {}): {}", out.message.empty() ? "" : "\n", f.rule, f.line, f.message);
  }
  return out;
}

}  // namespace kbrl::check
