// `kbrl-eval model`'s sampling half: answers to the task prompts (turn 1) and, in a multi-turn
// run, to the next turn's conversations (RUN/*_turn_T_prompt.json), written where
// `kbrl-eval generations` reads candidates (run_files.hpp), each with a line in
// RUN/generations.jsonl. Where the answers come from is an AnswerSource: a checkpoint in the
// process (sample_model.cpp, with libtorch) or an OpenAI-compatible server (sample_api.cpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/prompt/task_prompt.hpp"

namespace kbrl::log {
class Progress;
}

namespace kbrl::apps {

// One conversation to answer, and where its answers go: samples sample, sample + 1, ...
struct AnswerRow {
  int level = 0, problem = 0, sample = 0, turn = 1;
  std::string problem_id;
  std::vector<core::Message> messages;
  // The retrieved examples in the prompt (turn 1 with --retrieval-index), for generations.jsonl.
  std::shared_ptr<const prompt::RetrievedExamples> retrieval;
};

struct Answer {
  std::size_t row = 0;  // index into the rows asked for
  int index = 0;        // 0 .. per_row - 1
  std::string text;
  std::int64_t num_tokens = -1;  // -1: not known
  std::string stop_reason;       // "stop", "length", ... where known
};

struct SamplingSettings {
  std::int64_t max_tokens = 2048;
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;
  std::uint64_t seed = 0;
};

// What a source gave: the answers it has, and, when some are missing, why (they are written
// and the run stops there; its next start asks only for what is missing).
struct Answers {
  std::vector<Answer> answers;
  std::string failure;
};

class AnswerSource {
 public:
  virtual ~AnswerSource() = default;
  // per_row answers to each row; `seed` makes the draws repeatable where the source can.
  virtual Answers answer(const std::vector<AnswerRow>& rows, int per_row, std::uint64_t seed) = 0;
};

// The in-process checkpoint (null where kbrl-eval is built without libtorch).
struct ModelSamplingOptions {
  std::filesystem::path model;    // Hugging Face checkpoint folder with tokenizer.json
  std::filesystem::path adapter;  // PEFT adapter folder; empty: none
  std::string device = "auto";    // auto (cuda:0 when there is one), cpu, cuda, cuda:N
  std::string dtype = "auto";     // auto (bf16 on cuda, fp32 on cpu), bf16, fp32
  std::string chat_template = "auto";
};
std::unique_ptr<AnswerSource> make_model_source(const ModelSamplingOptions& options, const SamplingSettings& sampling);

// An OpenAI-compatible server's chat completions (kbrl/net/openai_client.hpp).
struct ApiSamplingOptions {
  std::string endpoint;     // the API's root, /v1 included
  std::string model_name;   // the served model's name
  std::string api_key_env;  // the environment variable holding the key; empty: none
  int max_in_flight = 16;
  int max_retries = 4;
  double timeout_s = 600;
};
std::unique_ptr<AnswerSource> make_api_source(const ApiSamplingOptions& options, const SamplingSettings& sampling);

// The run folder's side: what is missing is asked of the source and written. Draws are seeded
// by (seed, level, problem, turn), so a resumed run asks for what one uninterrupted run would have.
class RunSampler {
 public:
  RunSampler(AnswerSource& source, std::filesystem::path run, int samples, std::uint64_t seed,
             prompt::PromptOptions prompt);
  // Turn 1: the samples missing in the run of every (level, problem). Returns the number written.
  int sample_problems(const std::vector<std::pair<int, core::Problem>>& problems);
  // Turn >= 2: an answer to each RUN/level_L_problem_P_sample_S_turn_<turn>_prompt.json that has
  // none yet. Returns the number written.
  int sample_prompts(int turn);

 private:
  int write(const std::vector<AnswerRow>& rows, int per_row, std::uint64_t seed, log::Progress& progress);
  AnswerSource& source_;
  std::filesystem::path run_;
  int samples_;
  std::uint64_t seed_;
  prompt::PromptOptions prompt_;
};

}  // namespace kbrl::apps
