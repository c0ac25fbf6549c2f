#include "kbrl/eval/summary.hpp"

#include <boost/json.hpp>
#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "kbrl/core/error.hpp"
#include "kbrl/core/json.hpp"

namespace kbrl::eval {

const std::vector<double>& default_fast_p_thresholds() {
  static const std::vector<double> kThresholds{0.0, 0.5, 0.8, 1.0, 1.5, 2.0};
  return kThresholds;
}

double pass_at_k(int n, int c, int k) {
  if (n <= 0 || k <= 0 || k > n || c < 0 || c > n)
    throw core::InvalidArgument(fmt::format("pass_at_k: need 0 < k <= n and 0 <= c <= n (n={}, c={}, k={})", n, c, k));
  if (n - c < k) return 1.0;
  // C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), a stable product form.
  double ratio = 1.0;
  for (int i = n - c + 1; i <= n; ++i) ratio *= 1.0 - static_cast<double>(k) / i;
  return 1.0 - ratio;
}

EvalSummary summarize(const std::vector<core::EvalResult>& results, std::vector<int> ks,
                      const std::vector<double>& thresholds) {
  EvalSummary s;
  s.total = static_cast<int>(results.size());
  std::vector<double> logs;  // summed in sorted order: the same summary whatever the results' order
  std::map<std::string, std::pair<int, int>> per_problem;  // id -> (samples, correct)
  for (double p : thresholds) s.fast_p[p] = 0;
  for (const auto& r : results) {
    s.format_ok += r.format_ok;
    s.compiled += r.compiled;
    s.correct += r.correct;
    auto& [n, c] = per_problem[r.problem_id];
    ++n;
    c += r.correct;
    ++s.by_error_category[std::string(core::to_string(r.error_category))];
    for (const auto& f : r.static_findings)
      if (f.severity != core::Severity::off) ++s.by_static_rule[f.rule];
    if (r.correct && r.speedup && *r.speedup > 0) {
      logs.push_back(std::log(*r.speedup));
    }
    for (double p : thresholds)
      if (r.correct && (p == 0.0 || (r.speedup && *r.speedup > p))) s.fast_p[p] += 1;
  }
  if (s.total > 0) {
    s.compile_rate = static_cast<double>(s.compiled) / s.total;
    s.correct_rate = static_cast<double>(s.correct) / s.total;
    for (auto& [p, v] : s.fast_p) v /= s.total;
  }
  if (!logs.empty()) {
    std::sort(logs.begin(), logs.end());
    double log_sum = 0;
    for (const double l : logs) log_sum += l;
    s.geomean_speedup = std::exp(log_sum / static_cast<double>(logs.size()));
  }
  int largest = 0;
  for (const auto& [id, nc] : per_problem) largest = std::max(largest, nc.first);
  if (ks.empty())
    for (int k = 1; k <= largest; k *= 2) ks.push_back(k);
  for (int k : ks) {
    double sum = 0;
    int counted = 0;
    for (const auto& [id, nc] : per_problem) {
      if (nc.first < k) continue;
      sum += pass_at_k(nc.first, nc.second, k);
      ++counted;
    }
    if (counted > 0) s.pass_at_k[k] = sum / counted;
  }
  return s;
}

boost::json::value to_json_value(const EvalSummary& s) {
  namespace json = boost::json;
  json::object o;
  o["total"] = s.total;
  o["format_ok"] = s.format_ok;
  o["compiled"] = s.compiled;
  o["correct"] = s.correct;
  o["compile_rate"] = s.compile_rate;
  o["correct_rate"] = s.correct_rate;
  json::object fast;
  for (const auto& [p, v] : s.fast_p) fast[fmt::format("fast_{}", p)] = v;
  o["fast_p"] = std::move(fast);
  o["geomean_speedup"] = s.geomean_speedup ? json::value(*s.geomean_speedup) : json::value(nullptr);
  json::object pass;
  for (const auto& [k, v] : s.pass_at_k) pass[fmt::format("pass@{}", k)] = v;
  o["pass_at_k"] = std::move(pass);
  json::object cats;
  for (const auto& [k, v] : s.by_error_category) cats[k] = v;
  o["by_error_category"] = std::move(cats);
  json::object rules;
  for (const auto& [k, v] : s.by_static_rule) rules[k] = v;
  o["by_static_rule"] = std::move(rules);
  return o;
}

std::string format_summary(const EvalSummary& s) {
  std::string out;
  auto row = [&](std::string_view name, const std::string& value) { out += fmt::format("  {:<24} {}\n", name, value); };
  auto pct = [](double v) { return fmt::format("{:6.1f}%", 100.0 * v); };
  out += fmt::format("evaluated {} candidates\n", s.total);
  row("compiled", fmt::format("{} ({})", pct(s.compile_rate), s.compiled));
  row("correct", fmt::format("{} ({})", pct(s.correct_rate), s.correct));
  for (const auto& [p, v] : s.fast_p) row(fmt::format("fast_{}", p), pct(v));
  row("geomean speedup", s.geomean_speedup ? fmt::format("{:.3f}x (correct kernels)", *s.geomean_speedup) : "-");
  for (const auto& [k, v] : s.pass_at_k) row(fmt::format("pass@{}", k), pct(v));
  out += "  by outcome:\n";
  for (const auto& [k, v] : s.by_error_category) out += fmt::format("    {:<22} {}\n", k == "none" ? "correct" : k, v);
  if (!s.by_static_rule.empty()) {
    out += "  static-check findings:\n";
    for (const auto& [k, v] : s.by_static_rule) out += fmt::format("    {:<22} {}\n", k, v);
  }
  return out;
}

KernelBenchLayout parse_kernelbench_layout(std::string_view name) {
  if (name == "current") return KernelBenchLayout::current;
  if (name == "legacy") return KernelBenchLayout::legacy;
  throw core::InvalidArgument(fmt::format("unknown eval_results.json layout '{}' (current, legacy)", name));
}

boost::json::object kernelbench_results(const std::map<std::pair<int, int>, core::EvalResult>& results,
                                        KernelBenchLayout layout) {
  boost::json::object out;
  for (const auto& [key, r] : results) {  // (problem, sample) order
    boost::json::value v = boost::json::value_from(r);
    v.as_object()["sample_id"] = key.second;
    boost::json::value& problem = out[std::to_string(key.first)];  // null when new
    if (layout == KernelBenchLayout::current) {
      if (!problem.is_array()) problem.emplace_array();
      problem.as_array().push_back(std::move(v));
    } else {
      if (!problem.is_object()) problem.emplace_object();
      problem.as_object()[std::to_string(key.second)] = std::move(v);
    }
  }
  return out;
}

}  // namespace kbrl::eval
