// `kbrl-eval model`'s sampling half (a torch translation unit of its own, so the rest of
// kbrl-eval builds without libtorch): answers of a checkpoint (optionally with a LoRA adapter)
// to the task prompts, and in a multi-turn run to the next turn's conversations, written where
// `kbrl-eval generations` reads candidates (run_files.hpp). The checkpoint is a train::Policy, as
// in kbrl-train: the same chat template, stop tokens and decoding.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/prompt/task_prompt.hpp"

namespace kbrl::apps {

struct ModelSamplingOptions {
  std::filesystem::path model;    // Hugging Face checkpoint folder with tokenizer.json
  std::filesystem::path adapter;  // PEFT adapter folder; empty: none
  std::string device = "auto";    // auto (cuda:0 when there is one), cpu, cuda, cuda:N
  std::string dtype = "auto";     // auto (bf16 on cuda, fp32 on cpu), bf16, fp32
  std::string chat_template = "auto";
  int samples = 1;
  std::int64_t max_tokens = 2048;
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;
  std::uint64_t seed = 0;
  prompt::PromptOptions prompt;
};

// Every answer is written as the raw answer (kbrl-eval's parser extracts the program) with a line
// in run/generations.jsonl (level, problem, sample, turn, answer, token count, stop reason). The
// checkpoint is loaded when there is something to sample. Draws are seeded by (seed, level,
// problem, turn), so a resumed run writes what one uninterrupted run would have.
class ModelSampler {
 public:
  ModelSampler(ModelSamplingOptions options, std::filesystem::path run);
  ~ModelSampler();
  ModelSampler(const ModelSampler&) = delete;
  ModelSampler& operator=(const ModelSampler&) = delete;

  // Turn 1: the samples missing in the run of every (level, problem). Returns the number written.
  int sample_problems(const std::vector<std::pair<int, core::Problem>>& problems);
  // Turn >= 2: an answer to each run/level_L_problem_P_sample_S_turn_<turn>_prompt.json that has
  // none yet. Returns the number written.
  int sample_prompts(int turn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace kbrl::apps
