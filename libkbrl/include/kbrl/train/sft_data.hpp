// The examples of a supervised run (kbrl-train's train.mode=sft; no torch): prompt/answer pairs
// read from files as sft.* says (a kernel corpus through rag's reader, plain prompt/answer rows or
// chat messages), held out by a seeded hash of their problem, rendered with the policy's chat
// template and tokenized, with the loss on the answer's tokens only. A corpus pair is asked
// exactly as RL asks its problem (the task prompt of prompt.*) and answered in the <KERNEL>
// format the answer parser reads, so that SFT teaches the format RL's reward pays for.
// docs/training-runs.md, "Supervised warm start".
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/prompt/chat_renderer.hpp"
#include "kbrl/prompt/task_prompt.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"
#include "kbrl/train/data_processing.hpp"
#include "kbrl/train/run_config.hpp"

namespace kbrl::train {

// The task prompt of a run's prompt.* keys: what RL's envs ask for a problem and what an SFT
// corpus example is asked (retrieved examples, prompt.retrieval, are RL's alone).
prompt::PromptOptions task_prompt_options(const RunConfig& config);

// `program` as the answer format asks for it and prompt::parse_completion reads it: a <KERNEL>
// block holding one ```python fence (longer when the program holds a run of backticks).
std::string kernel_answer(std::string_view program);

struct SftExample {
  std::string id;      // the row's id fields, or "<file name>:<line>"
  std::string origin;  // "<path>:<line>"
  std::vector<core::Message> conversation;  // what the policy reads
  std::string answer;                       // what it should answer
  // Examples with the same key are held out together: a corpus pair's PyTorch program
  // (normalized: comments and layout do not count), else the conversation.
  std::string group;
};

// What reading the files kept and what it left out, by reason.
struct SftReadStats {
  std::size_t rows = 0;  // records read
  std::size_t kept = 0;
  std::size_t incorrect = 0;       // corpus: not marked correct (sft.correct_field)
  std::size_t other_level = 0;     // corpus: a level outside sft.levels
  std::size_t empty = 0;           // an empty prompt, program or answer
  std::size_t duplicates = 0;      // corpus: the same program pair as a kept row
  std::size_t other_language = 0;  // corpus: a kernel language other than prompt.language
  std::size_t no_model_new = 0;    // corpus: the program defines no class ModelNew (the format term's condition)
  SftReadStats& operator+=(const SftReadStats& other);
};
// "12 rows, 9 kept; left out: 2 duplicates, 1 without class ModelNew".
std::string describe(const SftReadStats& stats);

// Reads `files` with config.sft's format and mapping; prompts per config.prompt. Throws
// core::ConfigError naming "<path>:<line>" and the field for a malformed file or row.
std::vector<SftExample> read_sft_examples(const RunConfig& config, const std::vector<std::string>& files,
                                          SftReadStats& stats);

// The examples whose group ranks lowest by sha256("<seed>\n<group>") go to `heldout`,
// round(fraction x groups) groups of them; both keep the input order.
void split_sft_examples(std::vector<SftExample> examples, double fraction, std::uint64_t seed,
                        std::vector<SftExample>& train, std::vector<SftExample>& heldout);

// One example as tokens: the rendered conversation with the generation prompt, then the answer
// (special-token text in it read as plain text) and the end of the assistant's turn.
struct SftSequence {
  std::vector<tokenizer::TokenId> prompt;
  std::vector<tokenizer::TokenId> answer;
  bool truncated = false;  // the answer's end was cut to sft.max_tokens (no end of turn)
};

// The token that ends the assistant's turn: the template's first one-token stop sequence
// (<|im_end|>, <|eot_id|>), else the first of `fallback` (the checkpoint's eos ids). Throws
// core::InvalidArgument when there is neither.
tokenizer::TokenId answer_end_token(const prompt::ChatRenderer& renderer, const tokenizer::Tokenizer& tokenizer,
                                    const std::vector<std::int64_t>& fallback);

// A supervised run's data, tokenized.
struct SftData {
  std::vector<std::string> train_ids, heldout_ids;
  std::vector<SftSequence> train, heldout;
  SftReadStats read;             // sft.data's files
  SftReadStats heldout_read;     // sft.heldout_data's files (none: all zero)
  std::size_t overlong_skipped = 0;  // over sft.max_tokens and left out (both splits)
  std::size_t truncated = 0;         // over sft.max_tokens and cut (both splits)
};

// Reads, splits and tokenizes (on every usable core) the examples of `config`. Throws
// core::ConfigError naming the file for bad files, and for no training example left, with the
// reasons.
SftData prepare_sft_data(const RunConfig& config, const prompt::ChatRenderer& renderer,
                         const tokenizer::Tokenizer& tokenizer, tokenizer::TokenId end_of_turn);

// The Datum that trains it: weight 1 on the answer's tokens, 0 on the prompt's (completion_datum).
Datum sft_datum(const SftSequence& sequence);

// Steps per epoch: every training example once, the last batch possibly smaller.
std::int64_t sft_steps_per_epoch(std::size_t train_examples, int batch_size);
// The run's steps: sft.max_steps, else sft.num_epochs epochs.
std::int64_t sft_total_steps(const SftSection& sft, std::size_t train_examples);
// The indices (into SftData::train) of step `step`'s batch: epoch e's order is a shuffle seeded by
// (seed, e) when sft.shuffle, so a batch depends only on (seed, step).
std::vector<std::size_t> sft_batch(const SftSection& sft, std::uint64_t seed, std::size_t train_examples,
                                   std::int64_t step);
// The learning rate of step `step` of `total_steps`: sft.learning_rate (0: train.learning_rate),
// ramped up linearly over sft.warmup_steps ((step + 1) / warmup), then constant, or decayed
// linearly or by a half cosine toward 0 over the remaining steps.
double sft_learning_rate(const RunConfig& config, std::int64_t step, std::int64_t total_steps);

}  // namespace kbrl::train
