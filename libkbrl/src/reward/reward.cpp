#include "kbrl/reward/reward.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kbrl/core/error.hpp"
#include "kbrl/reward/terms.hpp"

namespace kbrl::reward {

RewardBreakdown compute_reward(const core::EvalResult& eval, const core::Completion& completion,
                               const RewardConfig& config, const RewardRegistry& registry) {
  RewardBreakdown out;
  if (config.static_check_value && is_static_check_failure(eval)) {
    out.zeroed_by_static_check = true;
    out.total = out.unclipped = *config.static_check_value;
    return out;
  }
  double sum = 0.0;
  for (const auto& [name, weight] : config.weights) {
    if (weight == 0.0) continue;
    const double value = registry.lookup(name)(eval, completion, config);
    if (!std::isfinite(value))
      throw core::Error(fmt::format("reward term '{}' returned a non-finite value ({})", name, value));
    out.values.emplace(name, value);
    out.terms.emplace(name, weight * value);
    sum += weight * value;
  }
  out.unclipped = sum;
  double total = sum;
  if (config.clip.min) total = std::max(total, *config.clip.min);
  if (config.clip.max) total = std::min(total, *config.clip.max);
  out.clipped = total != sum;
  out.total = total;
  return out;
}

double reward_total(const core::EvalResult& eval, const core::Completion& completion,
                    const RewardConfig& config, const RewardRegistry& registry) {
  return compute_reward(eval, completion, config, registry).total;
}

}  // namespace kbrl::reward
