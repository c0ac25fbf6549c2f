// The GRPO loop of kbrl-train (part of kbrl::torch), composed along tinker-cookbook's seams: for
// each batch of the dataset (env::RlDataset), rollouts of the policy (train/rollouts.hpp, the
// evaluations going to the Evaluator given) become trajectory groups, data processing
// (train/data_processing.hpp) turns them into advantages and datums, the TrainingClient takes
// the optimizer step(s), and the run log (train/run_log.hpp) writes metrics, traces, TensorBoard
// and a checkpoint. A run directory that already holds checkpoints is resumed at the next batch.
// With train.max_steps_off_policy = k >= 1 the steps overlap: a sampler thread samples batch s
// from the weights of step s - k while the loop evaluates and trains earlier batches. Under
// torchrun (several ranks) each rank samples its share of every batch, gradients are summed
// over the ranks, and rank 0 alone writes the run files.
// docs/training.md: the parts; docs/training-runs.md: outputs, resume, ranks and the pipeline.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "kbrl/env/env.hpp"
#include "kbrl/eval/evaluator.hpp"
#include "kbrl/eval/local_evaluator.hpp"
#include "kbrl/reward/registry.hpp"
#include "kbrl/train/run_config.hpp"

namespace kbrl::train {

class Policy;        // train/torch/policy.hpp
class ProcessGroup;  // train/torch/distributed.hpp

struct RlLoopOptions {
  // Set (from a signal handler, say) to stop after the step in flight: its checkpoint is
  // written and the run is marked stopped.
  const std::atomic<bool>* stop = nullptr;
  // Progress lines; stderr when null.
  std::FILE* progress = nullptr;
  // Where warnings go (uniform rewards, ...); stderr when empty.
  std::function<void(const std::string&)> warn;
  // Stops after this many steps of this invocation (0: run to the end), its last step
  // checkpointed like a stop's; the run is marked stopped. For tests of resume.
  std::int64_t max_steps_this_run = 0;
  // Data parallelism: this process's place among the ranks (null or a world of one: alone).
  // Every rank calls run_rl_loop with the same config; each samples the groups g of a batch with
  // g % world_size == rank, rank 0 writes the run files.
  std::shared_ptr<ProcessGroup> process_group;
};

struct RlLoopResult {
  std::int64_t first_step = 0;  // the step this invocation started at (0-based batch index)
  std::int64_t steps_done = 0;  // completed steps in the run directory, in all
  std::int64_t total_steps = 0;
  bool stopped = false;         // ended by the stop flag
  int rank = 0;                 // this process's rank (0 writes the run files and reports)
};

// Runs (or resumes) a run with parts the caller made. `policy` must have LoRA adapters (their
// parameters are what trains); `dataset` gives each step's groups and the held-out ones, whose
// envs evaluate through `evaluator`. From `config` the loop reads log_path, seed, save_every,
// eval_every, dataset.max_steps and num_epochs (with dataset.batches_per_epoch()), sampling.*,
// train.*, reward.multi_turn (the returns behind multi-turn advantages), and env.multi_turn and
// env.max_turns (multi-turn metrics, progress); it writes all of it to config.yaml. Throws
// core::ConfigError / core::InvalidArgument before any step for what it cannot run.
RlLoopResult run_rl_loop(const RunConfig& config, Policy& policy, eval::Evaluator& evaluator,
                         const env::RlDataset& dataset, const RlLoopOptions& options = {});

// kbrl-train's run: everything from `config` (the policy from model.* and lora.*, the KernelBench
// problems from dataset.*, prompt.*, env.* and the reward with `registry`'s terms, a
// LocalEvaluator from evaluator.*), then the loop above. Launched by torchrun or srun (RANK,
// WORLD_SIZE, ... : launch_env_from_environment), each rank joins the process group, takes
// cuda:LOCAL_RANK and a LocalEvaluator of its own (evaluator_for_rank). Bad configuration,
// model or problem files throw core::ConfigError / core::InvalidArgument before any step starts.
RlLoopResult run_rl_loop(const RunConfig& config, const RlLoopOptions& options = {},
                         const reward::RewardRegistry& registry = reward::default_registry());

// The evaluator configuration of rank `rank` of `world_size`, `local_world_size` of them on this
// host: what evaluator.* says, with a work directory per rank (<work_dir>/rank<R>, the compile
// cache shared), its own GPU (evaluator.devices empty: {local_rank}) and its share of the host's
// cores (evaluator.compile_workers 0: cores / local_world_size). One rank: evaluator.* as it is.
eval::LocalEvaluatorConfig evaluator_for_rank(const RunConfig& config, int rank, int world_size, int local_rank,
                                              int local_world_size);

}  // namespace kbrl::train
