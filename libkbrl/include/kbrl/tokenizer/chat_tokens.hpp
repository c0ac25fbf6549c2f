// Chat prompts as token ids, and the ids that end a model's turn. A ChatRenderer writes the chat
// as text (special tokens included, BOS too for Llama 3); encoding that text with special tokens
// recognized and no template gives the ids transformers' apply_chat_template(tokenize=True) gives.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"
#include "kbrl/prompt/chat_renderer.hpp"

namespace kbrl::tokenizer {

// renderer.render(messages, add_generation_prompt), encoded. Special tokens written inside a
// message's content are read as special tokens too, as in apply_chat_template.
std::vector<TokenId> render_chat_ids(const prompt::ChatRenderer& renderer, const Tokenizer& tokenizer,
                                     const std::vector<core::Message>& messages, bool add_generation_prompt);

// The renderer's stop sequences that are one token each ("<|im_end|>", "<|eot_id|>"), as ids.
std::vector<TokenId> stop_sequence_ids(const prompt::ChatRenderer& renderer, const Tokenizer& tokenizer);

// A checkpoint folder's stop tokens: generation_config.json's `eos_token_id` (an integer or a
// list of them), then tokenizer_config.json's `eos_token` (a string, or an object with
// `content`) looked up in the tokenizer; without repeats. A missing file is skipped; a malformed
// one, an eos_token the tokenizer does not know, or finding no stop token at all throws
// core::ConfigError naming the file and the field.
std::vector<TokenId> checkpoint_stop_ids(const std::filesystem::path& checkpoint_dir, const Tokenizer& tokenizer);

// The renderer named `name` (prompt::renderer_names()), or for "auto" the one the tokenizer's
// special tokens call for: Llama 3 for <|start_header_id|>, Qwen3 for ChatML with <think>, else
// ChatML for <|im_start|>. Throws core::ConfigError naming `checkpoint_dir`'s tokenizer.json when
// "auto" finds neither, and core::InvalidArgument for an unknown name.
std::unique_ptr<prompt::ChatRenderer> chat_renderer_for(const std::string& name, const Tokenizer& tokenizer,
                                                        const std::filesystem::path& checkpoint_dir);

}  // namespace kbrl::tokenizer
