#include "kbrl/reward/returns.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "kbrl/core/error.hpp"
#include "kbrl/reward/config.hpp"

namespace kbrl::reward {

std::string_view to_string(ReturnForm form) noexcept {
  switch (form) {
    case ReturnForm::sum: return "sum";
    case ReturnForm::max: return "max";
  }
  return "?";
}

ReturnForm parse_return_form(std::string_view name) {
  if (name == "sum") return ReturnForm::sum;
  if (name == "max") return ReturnForm::max;
  throw core::InvalidArgument(fmt::format("unknown return form '{}' (accepted: sum, max)", name));
}

std::vector<double> discounted_returns(const std::vector<double>& rewards, double gamma,
                                       ReturnForm form) {
  // The negated comparison also rejects NaN.
  if (!(gamma >= 0.0 && gamma <= 1.0))
    throw core::InvalidArgument(fmt::format("discount gamma must be in [0, 1] (got {})", gamma));
  for (std::size_t i = 0; i < rewards.size(); ++i)
    if (!std::isfinite(rewards[i]))
      throw core::InvalidArgument(
          fmt::format("reward of turn {} is not finite ({})", i, rewards[i]));

  std::vector<double> returns(rewards.size());
  // Backwards, one pass. The max form relies on gamma >= 0: scaling by gamma keeps the order of
  // the later returns, so max_{j>=t} gamma^(j-t) r_j = max(r_t, gamma * R_{t+1}).
  double next = 0.0;
  for (std::size_t i = rewards.size(); i-- > 0;) {
    const bool last = i + 1 == rewards.size();
    double r = rewards[i];
    if (!last) r = form == ReturnForm::sum ? r + gamma * next : std::max(r, gamma * next);
    returns[i] = r;
    next = r;
  }
  return returns;
}

std::vector<double> episode_returns(const std::vector<double>& rewards, bool solved, const MultiTurnOptions& options) {
  std::vector<double> returns = discounted_returns(rewards, options.gamma, options.form);
  if (returns.empty()) return returns;
  if (solved) returns.back() += options.success_bonus;
  else returns.back() += options.failure_penalty;
  if (options.normalize_returns && returns.size() > 1) {
    double mean = 0;
    for (const double r : returns) mean += r;
    mean /= static_cast<double>(returns.size());
    double var = 0;
    for (const double r : returns) var += (r - mean) * (r - mean);
    const double sd = std::sqrt(var / static_cast<double>(returns.size()));
    if (sd > 1e-8)
      for (double& r : returns) r = (r - mean) / sd;
  }
  return returns;
}

}  // namespace kbrl::reward
