// The supervised loop of kbrl-train (train.mode=sft; part of kbrl::torch): the examples of sft.*
// (train/sft_data.hpp) train the policy's LoRA adapters with the token-mean cross-entropy of their
// answers through the same TrainingClient, AdamW and micro-batching as RL, and the same run
// directory: config.yaml, metrics.jsonl (sft/loss, sft/heldout_loss, ...), traces.jsonl (one line
// per example and step), TensorBoard, checkpoints (state + PEFT adapter) and resume. An RL run
// starts from the result with lora.init_adapter=<this run>. docs/training-runs.md, "Supervised
// warm start".
#pragma once

#include "kbrl/train/run_config.hpp"
#include "kbrl/train/torch/rl_loop.hpp"  // RlLoopOptions, RlLoopResult: the same for both modes

namespace kbrl::train {

class Policy;  // train/torch/policy.hpp

// Runs (or resumes) a supervised run with the caller's policy, which must have LoRA adapters
// (their parameters train). From `config` it reads log_path, seed, save_every, eval_every (steps
// between held-out losses; the last step always has one), sft.*, prompt.* (corpus prompts) and
// train.*'s optimizer and micro-batching keys. Options as run_rl_loop's: a stop flag, progress,
// max_steps_this_run, a process group (each rank trains every world_size-th example of a batch).
// Throws core::ConfigError for data it cannot train on, before any step.
RlLoopResult run_sft_loop(const RunConfig& config, Policy& policy, const RlLoopOptions& options = {});

// kbrl-train's supervised run: the policy from model.* and lora.* (lora.init_adapter: a PEFT
// folder or a run directory, resolve_init_adapter), launched alone or by torchrun/srun as
// run_rl_loop is, then the loop above.
RlLoopResult run_sft_loop(const RunConfig& config, const RlLoopOptions& options = {});

}  // namespace kbrl::train
