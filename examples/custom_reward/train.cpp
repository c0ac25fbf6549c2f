// Training with a reward term of your own: register it, name it in the run's reward config, and
// hand the registry to kbrl's GRPO loop. Links kbrl::torch (the in-process policy).
//   kbrl_custom_reward_train <config.yaml> [key=value ...]
// e.g. with the CPU demo:
//   kbrl_custom_reward_train examples/configs/cpu_demo.yaml model.path=build/demo-model log_path=runs/custom
// The reward is the config's, plus shared_memory with weight 0.2 unless the overrides set it.
#include <kbrl/reward/registry.hpp>
#include <kbrl/train/torch/rl_loop.hpp>
#include <kbrl/train/run_config.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "shared_memory_term.hpp"

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::cerr << "usage: kbrl_custom_reward_train <config.yaml> [key=value ...]\n";
    return 2;
  }
  // A registry of our own: the built-in terms plus ours. Configs are checked against it, so a
  // weight on an unknown term fails at start-up.
  kbrl::reward::RewardRegistry registry;
  registry.register_term("shared_memory", custom::shared_memory_term, custom::check_shared_memory_params);
  std::vector<std::string> overrides{"reward.weights.shared_memory=0.2",
                                     "reward.params.shared_memory.require_sync=true"};
  overrides.insert(overrides.end(), argv + 2, argv + argc);
  const auto config = kbrl::train::load_run_config(std::string(argv[1]), overrides, registry);
  const auto result = kbrl::train::run_rl_loop(config, {}, registry);
  std::cout << "trained " << result.steps_done << " steps with reward '" << config.reward.name
            << "' (shared_memory weight " << config.reward.weight("shared_memory") << ") into " << config.log_path
            << "\n";
  return 0;
} catch (const std::exception& e) {
  std::cerr << "kbrl_custom_reward_train: " << e.what() << "\n";
  return 1;
}
