// A user-defined reward term: a bonus for correct CUDA kernels that stage data in shared memory.
// It is registered by name, so a JSON reward config can weight it next to the built-in terms and
// configure it through "params". Build with CMakeLists.txt beside this file (find_package(kbrl)).
#include <kbrl/core/error.hpp>
#include <kbrl/reward/config.hpp>
#include <kbrl/reward/registry.hpp>
#include <kbrl/reward/reward.hpp>

#include "shared_memory_term.hpp"

#include <cmath>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace core = kbrl::core;
namespace reward = kbrl::reward;

namespace {

using custom::check_shared_memory_params;
using custom::shared_memory_term;

struct Candidate {
  std::string label;
  std::string kernel;
  double speedup;
  double expected_total;
};

core::EvalResult correct_result(double speedup) {
  core::EvalResult eval;
  eval.format_ok = eval.compiled = eval.correct = true;
  eval.trials_passed = eval.trials_total = 5;
  eval.speedup = speedup;
  return eval;
}

}  // namespace

int main() {
  // Register once at start-up, before any config that names the term is read.
  reward::default_registry().register_term("shared_memory", shared_memory_term,
                                           check_shared_memory_params);

  // Kevin's reward (0.3 * correct + speedup * correct) plus 0.1 for shared memory.
  const auto config = reward::RewardConfig::from_json_text(R"({
    "preset": "kevin",
    "name": "kevin+shared_memory",
    "weights": {"shared_memory": 0.1},
    "params": {"shared_memory": {"require_sync": true}}
  })");

  const std::vector<Candidate> candidates = {
      {"tiled", "__global__ void k(...) { __shared__ float tile[256]; ... __syncthreads(); ... }",
       1.5, 0.3 + 1.5 + 0.1},
      {"naive", "__global__ void k(...) { out[i] = a[i] + b[i]; }", 1.2, 0.3 + 1.2},
      {"racy", "__global__ void k(...) { __shared__ float tile[256]; tile[t] = a[i]; ... }", 1.6,
       0.3 + 1.6},
  };

  bool ok = true;
  for (const auto& c : candidates) {
    core::Completion completion;
    completion.format_ok = true;
    completion.kernel = c.kernel;
    const reward::RewardBreakdown b =
        reward::compute_reward(correct_result(c.speedup), completion, config);
    std::cout << c.label << ": total " << b.total;
    for (const auto& [term, value] : b.terms) std::cout << "  " << term << " " << value;
    std::cout << "\n";
    if (std::abs(b.total - c.expected_total) > 1e-12) {
      std::cout << "  expected " << c.expected_total << "\n";
      ok = false;
    }
  }

  // A separate registry that lacks the term rejects the same config, naming the field.
  reward::RewardRegistry bare;
  try {
    (void)reward::RewardConfig::from_json(config.to_json(), "reward config", bare);
    std::cout << "a registry without shared_memory accepted the config\n";
    ok = false;
  } catch (const core::ConfigError& e) {
    std::cout << "without the term: " << e.what() << "\n";
    ok = ok && e.field() == "weights.shared_memory";
  }

  if (!ok) return 1;
  std::cout << "custom reward ok\n";
  return 0;
}
