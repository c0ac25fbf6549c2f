// kbrl-train: GRPO training of a policy that writes kernels (kbrl::train::run_rl_loop), and the
// management of its runs.
//   kbrl-train [config.yaml] [key=value ...]     train, or resume the run in log_path
//   kbrl-train runs <dir>                        every run under <dir>: state, step, last reward
//   kbrl-train status <run dir>                  one run
//   kbrl-train keys                              the configuration keys (docs/configs.md)
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <unistd.h>
#include <vector>

#include "kbrl/core/error.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/train/torch/rl_loop.hpp"
#include "kbrl/train/run_config.hpp"

namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  if (g_stop.exchange(true)) ::_exit(130);  // a second Ctrl-C: now
  static const char msg[] = "\nkbrl-train: stopping after the step in flight (its checkpoint is saved); again to quit now\n";
  [[maybe_unused]] const auto n = ::write(2, msg, sizeof msg - 1);
}

constexpr const char* kUsage = R"(usage:
  kbrl-train [config.yaml] [key=value ...]   train (or resume the run already in log_path)
  kbrl-train runs <dir>                      list the runs under <dir>
  kbrl-train status <run dir>                show one run
  kbrl-train keys                            every configuration key with its default (markdown)
  kbrl-train --help

Keys are dotted paths into the configuration (docs/configs.md lists every key and its default):
  kbrl-train examples/configs/single_turn.yaml model.path=/models/qwen2.5-coder-1.5b \
      dataset.batch_size=8 reward.preset=stage2 log_path=runs/x
Run it again with the same log_path to resume at the next batch; Ctrl-C stops after the step in
flight and saves its checkpoint.
)";

int train(const std::vector<std::string>& args) {
  std::optional<fs::path> yaml;
  std::vector<std::string> overrides;
  for (const auto& a : args) {
    if (a.find('=') != std::string::npos) overrides.push_back(a);
    else if (!yaml) yaml = a;
    else throw kbrl::core::InvalidArgument("more than one config file given ('" + yaml->string() + "', '" + a +
                                           "'); overrides are key=value");
  }
  kbrl::train::RunConfig config = kbrl::train::load_run_config(yaml, overrides);
  // Resuming without the file: the run's own resolved config, then the command line's overrides.
  if (!yaml && !config.log_path.empty() && fs::exists(fs::path(config.log_path) / "config.yaml"))
    config = kbrl::train::load_run_config(fs::path(config.log_path) / "config.yaml", overrides);
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  kbrl::train::RlLoopOptions options;
  options.stop = &g_stop;
  const auto result = kbrl::train::run_rl_loop(config, options);
  std::cerr << "kbrl-train: " << result.steps_done << "/" << result.total_steps << " steps in " << config.log_path
            << (result.stopped ? " (stopped)" : "") << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  try {
    if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
      std::cout << kUsage;
      return 0;
    }
    if (!args.empty() && args[0] == "runs") {
      if (args.size() != 2) throw kbrl::core::InvalidArgument("usage: kbrl-train runs <dir>");
      std::cout << kbrl::log::format_run_table(kbrl::log::list_runs(args[1]));
      return 0;
    }
    if (!args.empty() && args[0] == "keys") {
      std::cout << kbrl::train::config_reference_markdown();
      return 0;
    }
    if (!args.empty() && args[0] == "status") {
      if (args.size() != 2) throw kbrl::core::InvalidArgument("usage: kbrl-train status <run dir>");
      std::cout << kbrl::log::format_run_status(kbrl::log::read_run_status(args[1]));
      return 0;
    }
    if (args.empty()) {
      std::cerr << kUsage;
      return 2;
    }
    return train(args);
  } catch (const std::exception& e) {
    std::cerr << "kbrl-train: " << e.what() << "\n";
    return 1;
  }
}
