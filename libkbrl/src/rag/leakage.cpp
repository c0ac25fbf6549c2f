#include "kbrl/rag/leakage.hpp"

#include <fmt/format.h>

#include "kbrl/core/error.hpp"

namespace kbrl::rag {

const char* to_string(LeakKind kind) noexcept {
  switch (kind) {
    case LeakKind::none: return "none";
    case LeakKind::exact: return "exact";
    case LeakKind::near: return "near";
  }
  return "?";
}

LeakageFilter::LeakageFilter(std::string_view problem_source, LeakageConfig config) : config_(config) {
  if (!(config_.near_threshold > 0.0 && config_.near_threshold <= 1.0))
    throw core::InvalidArgument(fmt::format("leakage near_threshold {} is not in (0, 1]", config_.near_threshold));
  if (config_.shingle_size < 1 || config_.shingle_size > 64)
    throw core::InvalidArgument(fmt::format("leakage shingle_size {} is not in [1, 64]", config_.shingle_size));
  problem_ = fingerprint_python_source(problem_source, config_.shingle_size);
}

LeakKind LeakageFilter::check(std::string_view candidate_source) const {
  if (!config_.enabled) return LeakKind::none;
  return check(fingerprint_python_source(candidate_source, config_.shingle_size));
}

LeakKind LeakageFilter::check(const SourceFingerprint& c) const {
  if (!config_.enabled) return LeakKind::none;
  if (c.exact_hash == problem_.exact_hash) return LeakKind::exact;
  if (c.operations != problem_.operations) return LeakKind::none;
  // Jaccard >= t needs the smaller set to be at least t times the larger: skip the merge otherwise.
  const double small = static_cast<double>(std::min(c.shingles.size(), problem_.shingles.size()));
  const double large = static_cast<double>(std::max(c.shingles.size(), problem_.shingles.size()));
  if (large > 0 && small < config_.near_threshold * large) return LeakKind::none;
  return jaccard(c.shingles, problem_.shingles) >= config_.near_threshold ? LeakKind::near : LeakKind::none;
}

}  // namespace kbrl::rag
