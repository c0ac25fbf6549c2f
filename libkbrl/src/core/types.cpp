#include "kbrl/core/types.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <utility>

#include "kbrl/core/error.hpp"

namespace kbrl::core {

ConfigError::ConfigError(std::string where, std::string field, const std::string& what)
    : Error(field.empty() ? fmt::format("{}: {}", where, what)
                          : fmt::format("{}: field '{}': {}", where, field, what)),
      where_(std::move(where)),
      field_(std::move(field)) {}

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

// name -> value table; the first entry for each value is its canonical name.
template <class E, std::size_t N>
E parse_enum(std::string_view what, std::string_view name,
             const std::array<std::pair<std::string_view, E>, N>& table) {
  const std::string key = lower(name);
  for (const auto& [n, v] : table)
    if (n == key) return v;
  std::string accepted;
  for (const auto& [n, v] : table) accepted += (accepted.empty() ? "" : ", ") + std::string(n);
  throw InvalidArgument(fmt::format("unknown {} '{}' (accepted: {})", what, name, accepted));
}

constexpr std::array<std::pair<std::string_view, KernelLanguage>, 6> kLanguages{{
    {"cuda", KernelLanguage::cuda},
    {"triton", KernelLanguage::triton},
    {"hip", KernelLanguage::hip},
    {"cpp", KernelLanguage::cpp},
    {"c++", KernelLanguage::cpp},
    {"cpu", KernelLanguage::cpp},
}};
constexpr std::array<std::pair<std::string_view, Precision>, 7> kPrecisions{{
    {"fp32", Precision::fp32},
    {"fp16", Precision::fp16},
    {"bf16", Precision::bf16},
    {"float32", Precision::fp32},
    {"float16", Precision::fp16},
    {"half", Precision::fp16},
    {"bfloat16", Precision::bf16},
}};
constexpr std::array<std::pair<std::string_view, DevicePlatform>, 4> kPlatforms{{
    {"cpu", DevicePlatform::cpu},
    {"cuda", DevicePlatform::cuda},
    {"hip", DevicePlatform::hip},
    {"rocm", DevicePlatform::hip},
}};
constexpr std::array<std::pair<std::string_view, Severity>, 3> kSeverities{{
    {"off", Severity::off},
    {"warning", Severity::warning},
    {"error", Severity::error},
}};
constexpr std::array<std::pair<std::string_view, ErrorCategory>, 11> kCategories{{
    {"none", ErrorCategory::none},
    {"format", ErrorCategory::format},
    {"static_check", ErrorCategory::static_check},
    {"compile", ErrorCategory::compile},
    {"runtime", ErrorCategory::runtime},
    {"correctness", ErrorCategory::correctness},
    {"timeout", ErrorCategory::timeout},
    {"crash", ErrorCategory::crash},
    {"out_of_memory", ErrorCategory::out_of_memory},
    {"reward_hack", ErrorCategory::reward_hack},
    {"internal", ErrorCategory::internal},
}};

template <class E, std::size_t N>
std::string_view name_of(E v, const std::array<std::pair<std::string_view, E>, N>& table) noexcept {
  for (const auto& [n, e] : table)
    if (e == v) return n;
  return "?";
}

}  // namespace

std::string_view to_string(KernelLanguage v) noexcept { return name_of(v, kLanguages); }
std::string_view to_string(Precision v) noexcept { return name_of(v, kPrecisions); }
std::string_view to_string(DevicePlatform v) noexcept { return name_of(v, kPlatforms); }
std::string_view to_string(Severity v) noexcept { return name_of(v, kSeverities); }
std::string_view to_string(ErrorCategory v) noexcept { return name_of(v, kCategories); }

KernelLanguage parse_kernel_language(std::string_view n) { return parse_enum("kernel language", n, kLanguages); }
Precision parse_precision(std::string_view n) { return parse_enum("precision", n, kPrecisions); }
DevicePlatform parse_device_platform(std::string_view n) { return parse_enum("device platform", n, kPlatforms); }
Severity parse_severity(std::string_view n) { return parse_enum("severity", n, kSeverities); }
ErrorCategory parse_error_category(std::string_view n) { return parse_enum("error category", n, kCategories); }

Tolerance default_tolerance(Precision precision) noexcept {
  switch (precision) {
    case Precision::fp32: return {1e-4, 1e-4};
    case Precision::fp16:
    case Precision::bf16: return {1e-2, 1e-2};
  }
  return {1e-4, 1e-4};
}

std::vector<KernelLanguage> languages_for(DevicePlatform platform) {
  switch (platform) {
    case DevicePlatform::cpu: return {KernelLanguage::cpp};
    case DevicePlatform::cuda: return {KernelLanguage::cuda, KernelLanguage::triton};
    case DevicePlatform::hip: return {KernelLanguage::hip, KernelLanguage::triton};
  }
  return {};
}

std::map<std::string, double> RewardBreakdown::metrics(std::string_view prefix) const {
  std::map<std::string, double> m;
  const std::string p(prefix);
  m[p + "total"] = total;
  m[p + "unclipped"] = unclipped;
  m[p + "clipped"] = clipped ? 1.0 : 0.0;
  m[p + "static_zeroed"] = zeroed_by_static_check ? 1.0 : 0.0;
  for (const auto& [name, value] : terms) m[p + name] = value;
  return m;
}

double Trajectory::total_reward() const noexcept {
  double sum = 0.0;
  for (const auto& t : transitions) sum += t.reward;
  return sum;
}

}  // namespace kbrl::core
