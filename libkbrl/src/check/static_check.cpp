#include "kbrl/check/static_check.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "kbrl/core/error.hpp"
#include "kbrl/core/json_reader.hpp"
#include "kbrl/core/json.hpp"
#include "static_check_rules.hpp"

namespace kbrl::check {
namespace json = boost::json;
using core::InvalidArgument;
using core::Severity;

namespace {

std::string known_rule_list() {
  std::string out;
  for (const auto& d : detail::kRuleDefs) {
    if (!out.empty()) out += ", ";
    out += d.name;
  }
  return out;
}

// A bad field of a config document: `field` is its dotted path.
struct FieldError {
  std::string field;
  std::string what;
};

std::string json_type(const json::value& v) {
  switch (v.kind()) {
    case json::kind::object: return "an object";
    case json::kind::array: return "an array";
    case json::kind::string: return "a string";
    case json::kind::bool_: return "a boolean";
    case json::kind::null: return "null";
    default: return "a number";
  }
}

StaticCheckConfig parse_config(const json::value& jv) {
  if (!jv.is_object()) throw FieldError{"", "expected a JSON object, got " + json_type(jv)};
  StaticCheckConfig c;
  for (const auto& member : jv.get_object()) {
    // Not a structured binding: clang before 16 cannot capture one in the lambda below.
    const std::string k(member.key());
    const json::value& value = member.value();
    auto as_string = [&]() -> std::string_view {
      if (!value.is_string()) throw FieldError{k, "expected a string, got " + json_type(value)};
      return value.get_string();
    };
    try {
      if (k == "language") {
        c.language = core::parse_kernel_language(as_string());
      } else if (k == "precision") {
        c.precision = core::parse_precision(as_string());
      } else if (k == "reference_source") {
        c.reference_source = std::string(as_string());
      } else if (k == "severity") {
        if (!value.is_object()) throw FieldError{k, "expected an object of rule: severity, got " + json_type(value)};
        for (const auto& [rule, sev] : value.get_object()) {
          const std::string field = "severity." + std::string(rule);
          if (find_static_check_rule(rule) == nullptr)
            throw FieldError{field, fmt::format("unknown rule '{}' (known: {})", std::string_view(rule),
                                                known_rule_list())};
          if (!sev.is_string()) throw FieldError{field, "expected a severity string, got " + json_type(sev)};
          try {
            c.severity[std::string(rule)] = core::parse_severity(sev.get_string());
          } catch (const InvalidArgument& e) {
            throw FieldError{field, e.what()};
          }
        }
      } else {
        throw FieldError{k, "unknown key (accepted: language, precision, reference_source, severity)"};
      }
    } catch (const InvalidArgument& e) {
      throw FieldError{k, e.what()};
    }
  }
  return c;
}

}  // namespace

const std::vector<RuleInfo>& static_check_rules() {
  static const std::vector<RuleInfo> rules = [] {
    std::vector<RuleInfo> out;
    for (const auto& d : detail::kRuleDefs) {
      out.push_back({std::string(d.name), std::string(d.category), d.severity, std::string(d.description)});
    }
    return out;
  }();
  return rules;
}

const RuleInfo* find_static_check_rule(std::string_view name) noexcept {
  const auto& rules = static_check_rules();
  auto it = std::find_if(rules.begin(), rules.end(), [&](const RuleInfo& r) { return r.name == name; });
  return it == rules.end() ? nullptr : &*it;
}

Severity StaticCheckConfig::severity_of(std::string_view rule) const {
  const RuleInfo* info = find_static_check_rule(rule);
  if (info == nullptr)
    throw InvalidArgument(fmt::format("static check: unknown rule '{}' (known: {})", rule, known_rule_list()));
  if (auto it = severity.find(std::string(rule)); it != severity.end()) return it->second;
  return info->default_severity;
}

const std::vector<std::string>& static_check_policies() {
  static const std::vector<std::string> names{"strict", "kernelbench", "fusion"};
  return names;
}

std::map<std::string, Severity> static_check_policy(std::string_view name) {
  if (name == "strict") return {};
  if (name == "kernelbench")
    return {{"reference_op_in_forward", Severity::warning},
            {"reference_all_in_library", Severity::warning},
            {"torch_compute_in_forward", Severity::warning},
            {"side_stream", Severity::warning}};
  if (name == "fusion")
    return {{"reference_op_in_forward", Severity::warning}, {"reference_all_in_library", Severity::error}};
  throw InvalidArgument(
      fmt::format("static check policy: unknown policy '{}' (known: {})", name, fmt::join(static_check_policies(), ", ")));
}

void validate(const StaticCheckConfig& config) {
  for (const auto& [rule, sev] : config.severity) {
    (void)sev;
    if (find_static_check_rule(rule) == nullptr)
      throw InvalidArgument(
          fmt::format("static check severity: unknown rule '{}' (known: {})", rule, known_rule_list()));
  }
}

StaticCheckConfig static_check_config_for(const core::EvalRequest& request,
                                          std::map<std::string, core::Severity> severity) {
  StaticCheckConfig c;
  c.language = request.language;
  c.precision = request.precision;
  c.reference_source = request.problem.source;
  c.severity = std::move(severity);
  validate(c);
  return c;
}

void tag_invoke(json::value_from_tag, json::value& jv, const StaticCheckConfig& c) {
  json::object sev;
  for (const auto& [rule, s] : c.severity) sev[rule] = core::to_string(s);
  jv = {{"language", core::to_string(c.language)},
        {"precision", core::to_string(c.precision)},
        {"reference_source", c.reference_source},
        {"severity", std::move(sev)}};
}

StaticCheckConfig tag_invoke(json::value_to_tag<StaticCheckConfig>, const json::value& jv) {
  try {
    return parse_config(jv);
  } catch (const FieldError& e) {
    if (e.field.empty()) throw InvalidArgument("static check config: " + e.what);
    throw InvalidArgument(fmt::format("static check config: field '{}': {}", e.field, e.what));
  }
}

StaticCheckConfig load_static_check_config(const std::filesystem::path& file) {
  const json::value jv = core::read_json_file(file);
  try {
    return parse_config(jv);
  } catch (const FieldError& e) {
    throw core::ConfigError(file.string(), e.field, e.what);
  }
}

std::vector<core::StaticFinding> static_check(std::string_view candidate, const StaticCheckConfig& config) {
  validate(config);
  std::array<Severity, detail::kRuleCount> severity{};
  for (const auto& d : detail::kRuleDefs) {
    auto it = config.severity.find(std::string(d.name));
    severity[static_cast<std::size_t>(d.rule)] = it == config.severity.end() ? d.severity : it->second;
  }
  return detail::run_rules(candidate, config, severity);
}

bool has_errors(const std::vector<core::StaticFinding>& findings) noexcept {
  return std::any_of(findings.begin(), findings.end(),
                     [](const core::StaticFinding& f) { return f.severity == Severity::error; });
}

}  // namespace kbrl::check
