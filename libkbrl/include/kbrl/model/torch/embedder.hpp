// Embeddings from the decoder itself (part of kbrl::torch), for dense retrieval: a text's token
// ids through the decoder, the last hidden states (after the final norm) averaged over its tokens
// and L2-normalized, as transformers' last_hidden_state pooled the same way. kbrl-serve's
// /v1/embeddings answers with the same function, so the in-process and served embeddings agree.
// Here (not in rag/) because rag comes before model in the module order (docs/architecture.md).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kbrl/model/torch/decoder.hpp"
#include "kbrl/rag/embedder.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"

namespace kbrl::model {

// ids: one token list per text, none empty, each inside the vocabulary and the context.
// Returns [N, hidden] float32 on the CPU, rows of unit length (mean pooling in fp32). Texts of
// similar length are batched together, right-padded, at most `max_batch_tokens` (padding
// included) a forward; no gradients. Throws core::InvalidArgument for an empty list.
at::Tensor mean_pooled_embeddings(const DecoderModel& decoder, const std::vector<std::vector<std::int64_t>>& ids,
                                  std::int64_t max_batch_tokens = 16384);

struct DecoderEmbedderOptions {
  std::filesystem::path model;  // Hugging Face checkpoint folder: config.json, *.safetensors, tokenizer.json
  LoadOptions load;             // device and dtype (fp32 on the CPU by default)
  // The identity's model name; empty: the checkpoint folder's name, which is also kbrl-serve's
  // default --served-model-name, so that an index built through kbrl-serve is searched in process.
  std::string name;
  // A text's first max_tokens tokens are embedded (0: the model's max_position_embeddings).
  std::int64_t max_tokens = 0;
  std::int64_t max_batch_tokens = 16384;
};

class DecoderEmbedder final : public rag::Embedder {
 public:
  // Loads tokenizer.json and the weights (core::ConfigError naming a bad file).
  explicit DecoderEmbedder(const DecoderEmbedderOptions& options);
  // Over a decoder and tokenizer loaded elsewhere (shared, never changed here).
  DecoderEmbedder(std::shared_ptr<const DecoderModel> decoder, std::shared_ptr<const tokenizer::Tokenizer> tokenizer,
                  std::string name, std::int64_t max_tokens = 0, std::int64_t max_batch_tokens = 16384);

  rag::EmbedderIdentity identity() override;
  // Thread-safe. A text with no tokens (the empty string) embeds as the zero vector.
  std::vector<float> embed(const std::vector<std::string>& texts) override;
  // The ids a text is embedded from: tokenizer.json's encoding with its special tokens (what
  // transformers' tokenizer(text) gives), cut to max_tokens.
  std::vector<std::int64_t> tokens(std::string_view text) const;

  const DecoderModel& decoder() const { return *decoder_; }

 private:
  std::shared_ptr<const DecoderModel> decoder_;
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer_;
  std::string name_;
  std::int64_t max_tokens_;
  std::int64_t max_batch_tokens_;
};

}  // namespace kbrl::model
