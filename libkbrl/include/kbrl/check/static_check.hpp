// The static checker: the first line of defense against reward hacks. It reads a candidate
// program (Python defining ModelNew, with its C++/CUDA sources in string literals) without running
// it and reports rule findings; runtime defenses in the evaluator and the sandbox back it up.
// Rules, their defaults and their limits are documented in docs/static-checks.md.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <boost/json/fwd.hpp>

#include "kbrl/core/types.hpp"

namespace kbrl::check {

// One rule of the checker. `name` is stable (configs and logs refer to it).
struct RuleInfo {
  std::string name;      // "try_except_fallback"
  std::string category;  // "fallback", "bypass", "implementation", "concurrency", ...
  core::Severity default_severity = core::Severity::error;  // error = reward hack, warning = logged
  std::string description;
};

// Every rule, in a stable order.
const std::vector<RuleInfo>& static_check_rules();
// The rule called `name`, or nullptr.
const RuleInfo* find_static_check_rule(std::string_view name) noexcept;

// Named policies: a starting set of severities that a config file and per-rule overrides are
// applied over (docs/static-checks.md, "Policies").
//   strict       every rule at its default: delegating any of the reference's own ops to a library
//                is an error (the default policy)
//   kernelbench  KernelBench's own split (its kernel_static_checker's STRICT_CHECKS and
//                WARNING_CHECKS): PyTorch compute ops, library calls for the reference's ops and
//                side streams are warnings; rules KernelBench has no counterpart for keep their
//                defaults
//   fusion       library calls for the reference's ops are allowed (a cuDNN convolution kept, the
//                epilogue fused) as long as the kernel does some of the problem's own work:
//                reference_all_in_library stays an error
const std::vector<std::string>& static_check_policies();
// The severities policy `name` sets (rules it leaves at their default are absent). Throws
// core::InvalidArgument naming the known policies for an unknown name.
std::map<std::string, core::Severity> static_check_policy(std::string_view name);

struct StaticCheckConfig {
  core::KernelLanguage language = core::KernelLanguage::cuda;  // the language the problem asked for
  core::Precision precision = core::Precision::fp32;
  std::string reference_source;  // the reference program (names it defines, ops it computes); may be empty
  std::map<std::string, core::Severity> severity;  // overrides by rule name; `off` disables a rule

  // The severity rule `rule` runs at. Throws core::InvalidArgument for an unknown rule.
  core::Severity severity_of(std::string_view rule) const;
};

// Throws core::InvalidArgument naming the first unknown rule in `config.severity`.
void validate(const StaticCheckConfig& config);

// The config for one evaluation request (language, precision, reference), with severity overrides.
StaticCheckConfig static_check_config_for(const core::EvalRequest& request,
                                          std::map<std::string, core::Severity> severity = {});

// JSON form: {"language": "cuda", "precision": "fp32", "reference_source": "...",
//             "severity": {"torch_compute_in_forward": "error", "side_stream": "off"}}
// Every key is optional; unknown keys, unknown rule names and unknown severities are rejected
// with core::InvalidArgument naming them.
void tag_invoke(boost::json::value_from_tag, boost::json::value& jv, const StaticCheckConfig& config);
StaticCheckConfig tag_invoke(boost::json::value_to_tag<StaticCheckConfig>, const boost::json::value& jv);
// Reads a JSON config file; throws core::ConfigError naming the file and the field.
StaticCheckConfig load_static_check_config(const std::filesystem::path& file);

// Findings for `candidate`, ordered by line. Rules at severity `off` report nothing. Never throws
// for a bad candidate (malformed code still gets checked as far as it can be read); throws
// core::InvalidArgument for an invalid config.
std::vector<core::StaticFinding> static_check(std::string_view candidate, const StaticCheckConfig& config);

// Whether any finding has severity error (the candidate is rejected as a reward hack).
bool has_errors(const std::vector<core::StaticFinding>& findings) noexcept;

}  // namespace kbrl::check
