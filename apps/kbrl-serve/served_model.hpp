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
#include <optional>
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

// One prompt of a stream: n rows, its draws keyed by `key` (the same key draws the same tokens
// in any batch).
struct StreamRequest {
  std::vector<std::int64_t> prompt;
  std::int64_t n = 1;
  std::uint64_t key = 0;
};
// The next prompt to admit, or nullopt when there is none now (asked again at the next step).
using StreamSource = std::function<std::optional<StreamRequest>()>;

// One drawn token of row `index` (its place in admission order: the n rows of the k-th prompt
// admitted follow those of the prompts before it). `finished`: the sampler ended the row
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

  // Continuous batching (model::Sampler::stream): samples the prompts `next` gives, all with
  // `params`, from the base model (adapter "") or the named adapter, at most max_rows rows at
  // once. `next` is asked at every step while rows are free; the call returns once it has none
  // and every admitted row finished. expected_tokens sizes the KV cache (capped by the device's
  // free memory). Calls `sink` for every token. Throws core::Error for an unknown adapter, bad
  // parameters or a prompt that cannot fit. One call at a time.
  virtual void stream(const std::string& adapter, const DrawParams& params, std::int64_t max_rows,
                      std::int64_t expected_tokens, const StreamSource& next, const TokenSink& sink) = 0;
  // Whether another caller waits for the device the stream holds (an embedding request on a
  // GPU): a stream's source should then stop admitting new work, so that the stream ends.
  virtual bool device_wanted() const = 0;
};

std::unique_ptr<ServedModel> load_served_model(const ServedModelOptions& options);

}  // namespace kbrl::serve
