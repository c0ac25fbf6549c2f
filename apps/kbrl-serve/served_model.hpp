// The model kbrl-serve serves, as the rest of the program sees it: a train::Policy (tokenizer,
// chat template, stop tokens, decoder) plus LoRA adapters loaded by name, behind an interface
// without libtorch. Only served_model.cpp includes torch headers (no fmt there: torch carries its
// own), so the HTTP, JSON and batching code builds without them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kbrl/core/types.hpp"
#include "kbrl/tokenizer/tokenizer.hpp"

namespace kbrl::serve {

struct ServedModelOptions {
  std::filesystem::path model;  // Hugging Face checkpoint folder with tokenizer.json
  std::string device = "auto";
  std::string dtype = "auto";
  std::string chat_template = "auto";
  bool cuda_graphs = true;
};

// What one Sampler::generate call shares: everything that changes the distribution drawn from.
struct DrawParams {
  double temperature = 1.0;
  double top_p = 1.0;
  std::int64_t top_k = 0;
  std::int64_t max_tokens = 16;  // the longest any row of the call may run
};

// One drawn token of row `index` (prompt * n + sample). `finished`: the sampler ended the row
// here (a stop token, or the call's max_tokens); `stop_token`: ended by a stop token. Return
// false to end the row (the caller's own limit or stop string, a client gone).
using TokenSink = std::function<bool(std::size_t index, std::int64_t token, float logprob, bool finished, bool stop_token)>;

class ServedModel {
 public:
  virtual ~ServedModel() = default;

  virtual const tokenizer::Tokenizer& tokenizer() const = 0;
  // The conversation rendered by the checkpoint's chat template, generation prompt added.
  virtual std::vector<std::int64_t> chat_prompt(const std::vector<core::Message>& messages) const = 0;
  // Positions the model was trained for (config.json's max_position_embeddings).
  virtual std::int64_t context_length() const = 0;
  // "cpu, fp32" and the like, for the startup line.
  virtual std::string describe() const = 0;

  // PEFT adapter folder under `name`. Throws core::Error (a bad folder names the file and field).
  // Thread-safe: generate() calls already running keep the adapters they started with.
  virtual void load_adapter(const std::string& name, const std::filesystem::path& dir) = 0;
  virtual bool unload_adapter(const std::string& name) = 0;  // false: no such adapter
  virtual bool has_adapter(const std::string& name) const = 0;
  virtual std::vector<std::string> adapters() const = 0;  // in load order

  // The mean-pooled, L2-normalized last hidden states of each token list (none empty), from the
  // base model (adapter "") or the named adapter: model::mean_pooled_embeddings, the in-process
  // embedder's function. Rows of embedding_dimension() floats. Thread-safe, and runs beside
  // generate(). Throws core::Error for an unknown adapter.
  virtual std::vector<float> embed(const std::string& adapter, const std::vector<std::vector<std::int64_t>>& ids) = 0;
  virtual std::size_t embedding_dimension() const = 0;

  // Samples `n` rows per prompt from the base model (adapter "") or the named adapter, each
  // prompt's draws keyed by prompt_keys[i] (model::Sampler semantics: the same key draws the
  // same tokens in any batch). Calls `sink` for every token. Throws core::Error for an unknown
  // adapter or bad parameters. One call at a time.
  virtual void generate(const std::string& adapter, const std::vector<std::vector<std::int64_t>>& prompts,
                        std::int64_t n, const DrawParams& params, const std::vector<std::uint64_t>& prompt_keys,
                        const TokenSink& sink) = 0;
};

std::unique_ptr<ServedModel> load_served_model(const ServedModelOptions& options);

}  // namespace kbrl::serve
