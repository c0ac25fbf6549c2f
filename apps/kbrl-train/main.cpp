// kbrl-train: GRPO training of a policy that writes kernels (kbrl::train::run_rl_loop), its
// supervised warm start (train.mode=sft: kbrl::train::run_sft_loop), and the management of runs.
//   kbrl-train [train] [config.yaml] [key=value ...]   train, or resume the run in log_path
//   kbrl-train runs <dir>                              every run under <dir>: state, step, last reward
//   kbrl-train status <run dir>                        one run
//   kbrl-train keys                                    the configuration keys (docs/configs.md)
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "cli.hpp"
#include "kbrl/core/error.hpp"
#include "kbrl/log/run_dir.hpp"
#include "kbrl/train/run_config.hpp"
#include "kbrl/train/run_log.hpp"
#include "kbrl/train/torch/rl_loop.hpp"
#include "kbrl/train/torch/sft_loop.hpp"

namespace fs = std::filesystem;
using namespace kbrl;

namespace {

std::atomic<bool> g_stop{false};

void on_signal(int) {
  if (g_stop.exchange(true)) ::_exit(apps::kExitInterrupted);  // a second Ctrl-C: now
  static const char msg[] = "\nkbrl-train: stopping after the step in flight (its checkpoint is saved); again to quit now\n";
  [[maybe_unused]] const auto n = ::write(2, msg, sizeof msg - 1);
}

// Splits the arguments of a training run into its config file (at most one) and key=value
// overrides.
int run_training(const std::vector<std::string>& args) {
  std::optional<fs::path> yaml;
  std::vector<std::string> overrides;
  for (const auto& a : args) {
    if (a.find('=') != std::string::npos) overrides.push_back(a);
    else if (!yaml) yaml = a;
    else throw apps::UsageError("more than one config file given ('" + yaml->string() + "', '" + a +
                                "'); overrides are key=value");
  }
  if (!yaml && std::none_of(overrides.begin(), overrides.end(), [](const std::string& o) { return o.rfind("log_path=", 0) == 0; }))
    throw apps::UsageError("give a config file or log_path=<run dir> (to resume a run from its own config.yaml)");
  train::RunConfig config;
  try {
    config = train::load_run_config(yaml, overrides);
    // Resuming without the file: the run's own resolved config, then the command line's overrides.
    if (!yaml && !config.log_path.empty() && fs::exists(fs::path(config.log_path) / "config.yaml"))
      config = train::load_run_config(fs::path(config.log_path) / "config.yaml", overrides);
  } catch (const core::ConfigError& e) {
    // An override is part of the command line: its errors are usage errors; a file's are not.
    if (e.where().rfind("override ", 0) == 0) throw apps::UsageError(e.what());
    throw;
  }
  const bool supervised = config.train.mode == "sft";
  if (!supervised && config.dataset.problems.empty()) {  // found here, so that the run's config.yaml names it
    config.dataset.problems = train::problems_path(config).string();
    std::cerr << "kbrl-train: problems from " << config.dataset.problems << "\n";
  }
  // A run directory given as lora.init_adapter (an RL run starting from a supervised one) becomes
  // the adapter folder of its last checkpoint here, so that this run's config.yaml names that one.
  if (!config.lora.init_adapter.empty() && !fs::exists(fs::path(config.log_path) / "checkpoints.jsonl")) {
    const fs::path adapter = train::resolve_init_adapter(config.lora.init_adapter);
    if (adapter != fs::path(config.lora.init_adapter)) {
      config.lora.init_adapter = adapter.string();
      std::cerr << "kbrl-train: adapters from " << config.lora.init_adapter << "\n";
    }
  }
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  train::RlLoopOptions options;
  options.stop = &g_stop;
  const auto result = supervised ? train::run_sft_loop(config, options) : train::run_rl_loop(config, options);
  if (result.rank == 0)  // under torchrun: one report, rank 0's
    std::cerr << "kbrl-train: " << result.steps_done << "/" << result.total_steps << " steps in " << config.log_path
            << (result.stopped ? " (stopped; run again to resume)" : "") << "\n";
  // Stopped early by a signal: the last step's checkpoint is saved, but the run is not done.
  return result.stopped ? apps::kExitInterrupted : apps::kExitOk;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("GRPO training of a policy that writes kernels (train.mode=sft: supervised fine-tuning on example answers), "
               "and the management of its runs.",
               "kbrl-train");
  app.set_version_flag("--version", apps::version_text("kbrl-train"));
  app.require_subcommand(0, 1);
  app.footer(
      "Keys are dotted paths into the configuration (docs/configs.md lists every key and its default):\n"
      "  kbrl-train examples/configs/single_turn.yaml model.path=/models/qwen2.5-coder-1.5b \\\n"
      "      dataset.batch_size=8 reward.preset=stage2 log_path=runs/x\n"
      "train.mode=sft fine-tunes on the prompt/answer pairs of sft.data instead; an RL run starts from it with\n"
      "lora.init_adapter=<that run's log_path> (docs/training-runs.md, \"Supervised warm start\").\n"
      "Run it again with the same log_path to resume at the next batch; Ctrl-C (or SIGTERM) stops after the\n"
      "step in flight and saves its checkpoint.\n"
      "Exit codes: 0 done, 1 error (a missing or malformed file, a failed run), 2 usage (an unknown option,\n"
      "a missing argument, a bad key=value override), 130 stopped by Ctrl-C or SIGTERM (checkpoint saved).");

  const char* train_args_help = "a YAML config file (at most one) and key=value overrides, applied in order";
  std::vector<std::string> top_args;
  app.add_option("args", top_args, train_args_help)->type_name("[CONFIG.yaml] [KEY=VALUE ...]");

  std::vector<std::string> train_args;
  auto* train_cmd = app.add_subcommand(
      "train", "Trains (or resumes the run already in log_path); the default command: `kbrl-train CONFIG.yaml ...`.");
  train_cmd->add_option("args", train_args, train_args_help)->type_name("[CONFIG.yaml] [KEY=VALUE ...]");
  train_cmd->footer("`kbrl-train keys` lists every key; docs/configs.md explains them.");

  std::string runs_dir;
  auto* runs_cmd = app.add_subcommand("runs", "Lists the runs under a folder: state, step, last reward.");
  runs_cmd->add_option("dir", runs_dir, "the folder the runs are in")->required();

  std::string status_dir;
  auto* status_cmd = app.add_subcommand("status", "Shows one run.");
  status_cmd->add_option("run", status_dir, "the run directory (a log_path)")->required();

  auto* keys_cmd = app.add_subcommand("keys", "Every configuration key with its default (markdown).");

  if (argc < 2) {
    std::cerr << app.help();
    return apps::kExitUsage;
  }
  return apps::run_program(app, argc, argv, [&] {
    if (!top_args.empty() && app.get_subcommands().size() == 1)
      throw apps::UsageError("'" + top_args[0] + "' before the command " + app.get_subcommands()[0]->get_name());
    if (runs_cmd->parsed()) {
      std::cout << log::format_run_table(log::list_runs(runs_dir));
      return apps::kExitOk;
    }
    if (status_cmd->parsed()) {
      std::cout << log::format_run_status(log::read_run_status(status_dir));
      return apps::kExitOk;
    }
    if (keys_cmd->parsed()) {
      std::cout << train::config_reference_markdown();
      return apps::kExitOk;
    }
    return run_training(train_cmd->parsed() ? train_args : top_args);
  });
}
