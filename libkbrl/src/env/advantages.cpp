#include "kbrl/env/advantages.hpp"

#include <algorithm>
#include <cmath>

namespace kbrl::env {

std::vector<std::vector<double>> turn_advantages(const std::vector<std::vector<double>>& rewards,
                                                 const AdvantageOptions& options) {
  std::vector<std::vector<double>> returns;
  std::size_t turns = 0;
  for (const auto& r : rewards) {
    returns.push_back(reward::discounted_returns(r, r.size() > 1 ? options.gamma : 0.0, options.form));
    turns = std::max(turns, r.size());
  }
  std::vector<std::vector<double>> adv(rewards.size());
  for (std::size_t i = 0; i < rewards.size(); ++i) adv[i].assign(rewards[i].size(), 0.0);
  for (std::size_t t = 0; t < turns; ++t) {
    double sum = 0, n = 0;
    for (const auto& r : returns)
      if (t < r.size()) sum += r[t], n += 1;
    if (n < 2) continue;
    const double mean = sum / n;
    double var = 0;
    for (const auto& r : returns)
      if (t < r.size()) var += (r[t] - mean) * (r[t] - mean);
    const double scale = options.std_normalize ? 1.0 / (std::sqrt(var / n) + options.eps) : 1.0;
    for (std::size_t i = 0; i < returns.size(); ++i)
      if (t < returns[i].size()) adv[i][t] = (returns[i][t] - mean) * scale;
  }
  return adv;
}

bool constant_group(const std::vector<std::vector<double>>& rewards) {
  return std::all_of(rewards.begin(), rewards.end(), [&](const auto& r) { return r == rewards.front(); });
}

}  // namespace kbrl::env
