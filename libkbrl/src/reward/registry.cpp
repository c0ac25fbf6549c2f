#include "kbrl/reward/registry.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <exception>
#include <mutex>

#include "kbrl/core/error.hpp"
#include "kbrl/reward/terms.hpp"

namespace kbrl::reward {

namespace {

constexpr std::array<std::string_view, 7> kBuiltinTerms{"format", "compile",     "correctness", "speed",
                                                        "length", "code_length", "thinking"};
// RewardBreakdown::metrics writes these next to the terms; a term of the same name would clash.
constexpr std::array<std::string_view, 4> kMetricNames{"total", "unclipped", "clipped",
                                                       "static_zeroed"};

bool is_identifier(std::string_view name) {
  if (name.empty() || !((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z')))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  });
}

std::string join(const std::vector<std::string>& names) {
  return names.empty() ? std::string("none") : fmt::format("{}", fmt::join(names, ", "));
}

}  // namespace

std::span<const std::string_view> builtin_term_names() noexcept { return kBuiltinTerms; }

bool is_builtin_term(std::string_view name) noexcept {
  return std::find(kBuiltinTerms.begin(), kBuiltinTerms.end(), name) != kBuiltinTerms.end();
}

bool is_reserved_term_name(std::string_view name) noexcept {
  return is_builtin_term(name) ||
         std::find(kMetricNames.begin(), kMetricNames.end(), name) != kMetricNames.end();
}

RewardRegistry::RewardRegistry() {
  terms_.emplace("format", Entry{&format_term, {}, true});
  terms_.emplace("compile", Entry{&compile_term, {}, true});
  terms_.emplace("correctness", Entry{&correctness_term, {}, true});
  terms_.emplace("speed", Entry{&speed_term, {}, true});
  terms_.emplace("length", Entry{&length_term, {}, true});
  terms_.emplace("code_length", Entry{&code_length_term, {}, true});
  terms_.emplace("thinking", Entry{&thinking_term, {}, true});
}

void RewardRegistry::register_term(std::string name, RewardTermFn fn, RewardParamCheck check) {
  if (is_reserved_term_name(name))
    throw core::InvalidArgument(fmt::format(
        "reward term name '{}' is reserved (built-in terms: {}; also reserved: {})", name,
        fmt::join(kBuiltinTerms, ", "), fmt::join(kMetricNames, ", ")));
  if (!is_identifier(name))
    throw core::InvalidArgument(fmt::format(
        "reward term name '{}' is not an identifier (letters, digits and '_', starting with a "
        "letter)",
        name));
  if (!fn) throw core::InvalidArgument(fmt::format("reward term '{}': empty function", name));
  std::unique_lock lock(mutex_);
  if (terms_.contains(name))
    throw core::InvalidArgument(fmt::format("reward term '{}' is already registered", name));
  terms_.emplace(std::move(name), Entry{std::move(fn), std::move(check), false});
}

bool RewardRegistry::contains(std::string_view name) const {
  std::shared_lock lock(mutex_);
  return terms_.find(name) != terms_.end();
}

bool RewardRegistry::is_user_term(std::string_view name) const {
  std::shared_lock lock(mutex_);
  const auto it = terms_.find(name);
  return it != terms_.end() && !it->second.builtin;
}

const RewardTermFn& RewardRegistry::lookup(std::string_view name) const {
  {
    std::shared_lock lock(mutex_);
    const auto it = terms_.find(name);
    if (it != terms_.end()) return it->second.fn;
  }
  throw core::InvalidArgument(fmt::format("unknown reward term '{}' (known terms: {})", name,
                                          join(names())));
}

void RewardRegistry::check_params(std::string_view name, const boost::json::object& params) const {
  RewardParamCheck check;
  {
    std::shared_lock lock(mutex_);
    const auto it = terms_.find(name);
    if (it == terms_.end())
      throw core::InvalidArgument(
          fmt::format("params given for unknown reward term '{}' (registered user terms: {})",
                      name, join(user_names_locked())));
    if (it->second.builtin)
      throw core::InvalidArgument(fmt::format(
          "'{}' is a built-in term: its options go in the \"{}\" section, not in params", name,
          name));
    check = it->second.check;
  }
  // Run user code outside the lock: it may itself consult the registry.
  if (!check) return;
  try {
    check(params);
  } catch (const std::exception& e) {
    throw core::InvalidArgument(e.what());
  }
}

std::vector<std::string> RewardRegistry::names() const {
  std::vector<std::string> out(kBuiltinTerms.begin(), kBuiltinTerms.end());
  const auto users = user_names();
  out.insert(out.end(), users.begin(), users.end());
  return out;
}

std::vector<std::string> RewardRegistry::user_names() const {
  std::shared_lock lock(mutex_);
  return user_names_locked();
}

std::vector<std::string> RewardRegistry::user_names_locked() const {
  std::vector<std::string> out;
  for (const auto& [name, entry] : terms_)
    if (!entry.builtin) out.push_back(name);
  return out;
}

RewardRegistry& default_registry() {
  static RewardRegistry registry;
  return registry;
}

}  // namespace kbrl::reward
