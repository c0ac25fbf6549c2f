// `kbrl-eval model`'s sampling half (a torch translation unit of its own, so the rest of
// kbrl-eval builds without libtorch): answers of a checkpoint (optionally with a LoRA adapter)
// to the task prompts, written where `kbrl-eval generations` reads candidates. The checkpoint is
// a train::Policy, as in kbrl-train: the same chat template, stop tokens and decoding.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
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

// For every problem without all of its samples in `run`, samples the missing ones and writes
// run/level_<L>_problem_<P>_sample_<S>_kernel.py (the raw answer; kbrl-eval's parser extracts
// the program) and a line per answer in run/generations.jsonl (prompt, answer, token count,
// stop reason). Returns the number of answers written. Sample s of problem p is drawn with a
// seed of (seed, p, s), so a resumed run writes what one uninterrupted run would have.
int sample_generations(const std::vector<core::Problem>& problems, int level, const std::filesystem::path& run,
                       const ModelSamplingOptions& options);

}  // namespace kbrl::apps
