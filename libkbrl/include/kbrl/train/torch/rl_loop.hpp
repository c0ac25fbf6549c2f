// The GRPO loop of kbrl-train (part of kbrl::torch): for each batch, sample group_size rollouts
// of every problem from the in-process policy, evaluate them through the environments (each
// group's evaluations start as soon as its samples exist), turn rewards into group-normalized
// advantages (per turn for multi-turn episodes), take the optimizer step(s), and write metrics,
// TensorBoard scalars and histograms, traces and a checkpoint. A run directory that already
// holds checkpoints is resumed at the next batch. docs/training-runs.md: outputs and resume.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kbrl/reward/registry.hpp"
#include "kbrl/train/run_config.hpp"

namespace kbrl::train {

struct RlLoopOptions {
  // Set (from a signal handler, say) to stop after the step in flight: its checkpoint is
  // written and the run is marked stopped.
  const std::atomic<bool>* stop = nullptr;
  // Progress lines; stderr when null.
  std::FILE* progress = nullptr;
  // Where warnings go (uniform rewards, ...); stderr when empty.
  std::function<void(const std::string&)> warn;
  // Stops after this many steps of this invocation (0: run to the end). For tests of resume.
  std::int64_t max_steps_this_run = 0;
};

struct RlLoopResult {
  std::int64_t first_step = 0;  // the step this invocation started at (0-based batch index)
  std::int64_t steps_done = 0;  // completed steps in the run directory, in all
  std::int64_t total_steps = 0;
  bool stopped = false;         // ended by the stop flag
};

// Runs (or resumes) the run described by `config` in config.log_path. Bad configuration, model
// or problem files throw core::ConfigError / core::InvalidArgument before any step starts.
RlLoopResult run_rl_loop(const RunConfig& config, const RlLoopOptions& options = {},
                         const reward::RewardRegistry& registry = reward::default_registry());

}  // namespace kbrl::train
