// Aggregate numbers over a batch of evaluations, as people report them for KernelBench:
// compile and correctness rates, fast_p, the geometric-mean speedup of correct kernels,
// unbiased pass@k, and counts by error category and by static-check rule.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json/value.hpp>

#include "kbrl/core/types.hpp"

namespace kbrl::eval {

struct EvalSummary {
  int total = 0;
  int format_ok = 0;
  int compiled = 0;
  int correct = 0;
  double compile_rate = 0;
  double correct_rate = 0;
  // fast_p: share of all evaluations that are correct and faster than p x the reference.
  std::map<double, double> fast_p;
  std::optional<double> geomean_speedup;  // over correct kernels with a speedup
  std::map<int, double> pass_at_k;        // unbiased estimator, averaged over problems with >= k samples
  std::map<std::string, int> by_error_category;
  std::map<std::string, int> by_static_rule;  // findings of severity error or warning
};

// The p values reported by default: 0, 0.5, 0.8, 1, 1.5, 2.
const std::vector<double>& default_fast_p_thresholds();

// Unbiased pass@k for one problem with n samples of which c are correct (Chen et al. 2021):
// 1 - C(n-c, k) / C(n, k).
double pass_at_k(int n, int c, int k);

// Results are grouped into problems by EvalResult::problem_id for pass@k; `ks` empty means
// 1, 2, 4, ... up to the largest group size.
EvalSummary summarize(const std::vector<core::EvalResult>& results, std::vector<int> ks = {},
                      const std::vector<double>& fast_p_thresholds = default_fast_p_thresholds());

boost::json::value to_json_value(const EvalSummary& summary);

// KernelBench's eval_results.json, for results keyed by (problem number, sample id). `current`:
// what KernelBench's eval_from_generations.py writes today and its benchmark_eval_analysis.py
// reads, problem -> [result with "sample_id", ...] in sample order, problems in number order;
// `legacy`: the older problem -> sample -> result. Each result is EvalResult's JSON with its
// "sample_id" (KernelBench's compiled, correctness, runtime, runtime_stats, metadata among them).
enum class KernelBenchLayout { current, legacy };
KernelBenchLayout parse_kernelbench_layout(std::string_view name);  // throws core::InvalidArgument
boost::json::object kernelbench_results(const std::map<std::pair<int, int>, core::EvalResult>& results,
                                        KernelBenchLayout layout = KernelBenchLayout::current);
// A plain-text table for terminals and logs.
std::string format_summary(const EvalSummary& summary);

}  // namespace kbrl::eval
