// The decoder-only transformer of Llama, Qwen2 and Qwen3 in libtorch (part of kbrl::torch),
// loaded by Hugging Face tensor names and computed the way transformers computes it, with a
// KV cache for sampling. docs/model.md: the parity method and numbers, the cache layout.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/core/TensorOptions.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kbrl/model/config.hpp"

namespace kbrl::model {

// A LoRA adapter on one projection (kbrl/model/torch/lora.hpp attaches them): the term
// scale * B A dropout(x), computed in A's dtype and added before casting back, as PEFT does.
struct LoraAdapter {
  at::Tensor a;          // [r, in]  lora_A
  at::Tensor b;          // [out, r] lora_B
  double scale = 1.0;    // alpha / r, or alpha / sqrt(r) with rsLoRA
  double dropout = 0.0;  // on the adapter's input, only while training
  bool training = false;
  // scale * B A dropout(x), in A's dtype: what the adapter adds to its projection of x.
  at::Tensor term(const at::Tensor& x) const;
};

// Every projection goes through this one helper, so that adapters (LoRA) attach in one place.
struct Linear {
  at::Tensor weight;  // [out, in]
  at::Tensor bias;    // [out], or undefined
  std::optional<LoraAdapter> lora;
  // x [..., in] -> [..., out]: x W^T + b, plus scale * dropout(x) A^T B^T with an adapter.
  at::Tensor forward(const at::Tensor& x) const;
};

struct DecoderLayer {
  at::Tensor input_norm;           // [hidden]          input_layernorm.weight
  Linear q_proj;                   // [heads*D, hidden]
  Linear k_proj;                   // [kv_heads*D, hidden]
  Linear v_proj;                   // [kv_heads*D, hidden]
  Linear o_proj;                   // [hidden, heads*D]
  at::Tensor q_norm;               // [D] Qwen3 only, else undefined
  at::Tensor k_norm;               // [D] Qwen3 only, else undefined
  at::Tensor post_attention_norm;  // [hidden]          post_attention_layernorm.weight
  Linear gate_proj;                // [intermediate, hidden]
  Linear up_proj;                  // [intermediate, hidden]
  Linear down_proj;                // [hidden, intermediate]
};

struct DecoderWeights {
  at::Tensor embed_tokens;  // [vocab, hidden]
  std::vector<DecoderLayer> layers;
  at::Tensor norm;          // [hidden]
  Linear lm_head;           // weight [vocab, hidden]; the same tensor as embed_tokens when tied
};

// kFused: at::scaled_dot_product_attention. kPortable: matmul, masked softmax in fp32, matmul
// (transformers' eager attention). kAuto: fused on CUDA, portable elsewhere.
enum class AttentionKernel { kAuto, kFused, kPortable };

struct LoadOptions {
  // Float, BFloat16 or Half; Double for numerical checks (gradients by finite differences).
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // Tensors the model does not use are an error unless allowed (then listed in
  // DecoderModel::unexpected_tensors()).
  bool allow_unexpected_tensors = false;
  AttentionKernel attention = AttentionKernel::kAuto;
};

// Keys and values of every layer for a batch of sequences, left-padded in one dense block:
//   keys[l], values[l]  [B, kv_heads, capacity, D]   columns 0..length()-1 in use
//   valid               [B, capacity] bool           which columns hold real tokens
//   lengths             [B] int64                    real tokens per row = next position
// Every forward appends the same number of columns to every row; a row's padding (mask 0)
// occupies columns but is never attended to. Rows are independent: repeat_interleave(n) turns
// B prompts into B*n samples after one prefill, select_rows drops finished ones.
class KvCache {
 public:
  KvCache(const ModelConfig& config, std::int64_t batch, std::int64_t capacity, const c10::TensorOptions& options);

  std::int64_t batch() const { return valid_.size(0); }
  std::int64_t length() const { return length_; }
  std::int64_t capacity() const { return valid_.size(1); }
  const at::Tensor& valid() const { return valid_; }
  const at::Tensor& lengths() const { return lengths_; }
  const at::Tensor& keys(std::size_t layer) const { return keys_.at(layer); }
  const at::Tensor& values(std::size_t layer) const { return values_.at(layer); }

  // Row b becomes rows b*n .. b*n+n-1 (copies), e.g. n samples per prompt.
  KvCache repeat_interleave(std::int64_t n) const;
  // Keeps the rows `rows` [R] int64, in that order.
  KvCache select_rows(const at::Tensor& rows) const;
  // Makes room for `columns` more columns (forward grows the cache by itself when needed).
  void reserve(std::int64_t columns);

 private:
  friend class DecoderModel;
  KvCache() = default;
  std::vector<at::Tensor> keys_;
  std::vector<at::Tensor> values_;
  at::Tensor valid_;
  at::Tensor lengths_;
  std::int64_t length_ = 0;
};

// Keys and values of every layer in fixed-size blocks that any sequence may use (the paged
// layout of vLLM): keys(l), values(l) [num_blocks, block_size, kv_heads, D] in the model's dtype.
// Token t of a sequence sits in block table[t / block_size] at offset t % block_size; which
// blocks a sequence holds is the caller's bookkeeping (the Sampler's), so memory follows the
// tokens in flight and sequences can share blocks (a prompt's, by its n samples).
class PagedKvCache {
 public:
  PagedKvCache(const ModelConfig& config, std::int64_t num_blocks, std::int64_t block_size,
               const c10::TensorOptions& options);
  // Bytes one token's keys and values take over all layers.
  static std::int64_t bytes_per_token(const ModelConfig& config, c10::ScalarType dtype);

  std::int64_t num_blocks() const { return keys_.front().size(0); }
  std::int64_t block_size() const { return keys_.front().size(1); }
  at::Tensor& keys(std::size_t layer) { return keys_.at(layer); }
  at::Tensor& values(std::size_t layer) { return values_.at(layer); }

  // Copies a dense cache's entries into slots (slot = block * block_size + offset): for each i,
  // row rows[i], column columns[i] of every layer of `dense` goes to slots[i]. [N] int64 each.
  void copy_from(const KvCache& dense, const at::Tensor& rows, const at::Tensor& columns, const at::Tensor& slots);

 private:
  std::vector<at::Tensor> keys_;
  std::vector<at::Tensor> values_;
};

// One decoding step over a PagedKvCache: one new token per row, every tensor on the model's
// device (DecoderModel::decode_paged).
struct PagedStep {
  at::Tensor ids;           // [R] int64: each row's new token
  at::Tensor positions;     // [R] int64: its position (the tokens before it in the sequence)
  at::Tensor slots;         // [R] int64: where its key and value go (block * block_size + offset)
  at::Tensor block_tables;  // [R, W] int32: the row's blocks in sequence order (unused entries: any block)
  at::Tensor context_lens;  // [R] int32: positions + 1, the tokens attended to
  // Optional: zeroed int32 scratch that every layer's attention uses and leaves zeroed (the
  // `counters` of src/model/torch/decode_ops.hpp's paged_attention), allocated once by the caller
  // so that a step allocates and clears none. Undefined: each layer allocates its own.
  at::Tensor attention_counters;
};

// The training forward (DecoderModel::hidden_states, token_logprobs in train_forward.hpp).
struct TrainForwardOptions {
  // Keep only each layer's input during the forward and recompute the layer in backward (same
  // dropout masks): activation memory of one layer instead of all of them.
  bool checkpoint_layers = false;
  // token_logprobs computes logits for this many tokens at a time (fp32 [chunk, vocab]).
  std::int64_t logprob_chunk_tokens = 1024;
  // token_logprobs divides the logits by this before the softmax: log p of the distribution the
  // tokens were sampled from at that temperature (> 0; 1: the model's own).
  double temperature = 1.0;
};

class DecoderModel {
 public:
  // Reads <dir>/config.json and the checkpoint's tensors by their Hugging Face names. Throws
  // core::ConfigError listing every missing tensor and every shape that differs (name,
  // expected, actual), and the unexpected tensors unless options allow them.
  static DecoderModel load(const std::filesystem::path& dir, const LoadOptions& options = {});
  DecoderModel(ModelConfig config, DecoderWeights weights, const LoadOptions& options);

  const ModelConfig& config() const { return config_; }
  const DecoderWeights& weights() const { return weights_; }
  DecoderWeights& weights() { return weights_; }
  c10::ScalarType dtype() const { return options_.dtype; }
  c10::Device device() const { return options_.device; }
  const LoadOptions& options() const { return options_; }
  const std::vector<std::string>& unexpected_tensors() const { return unexpected_; }
  // Every projection by its Hugging Face module name ("model.layers.0.self_attn.q_proj", ...).
  std::vector<std::pair<std::string, Linear*>> linears();

  KvCache make_cache(std::int64_t batch, std::int64_t capacity) const;

  // input_ids       [B, T] int64 (any device; moved to the model's)
  // attention_mask  [B, T] 1 for real tokens, 0 for left padding; undefined: all real
  // cache           nullptr: a fresh causal pass; else the new tokens extend the cache
  // last_only       return only the last column's logits (with left padding, every row's last)
  // returns logits  [B, T, vocab] (or [B, 1, vocab]) in the model's dtype
  // Positions count real tokens only, so a left-padded row computes what it computes alone.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {}, KvCache* cache = nullptr,
                     bool last_only = false) const;

  // One decoding step over a paged cache, in a form a CUDA graph can capture (no host
  // synchronization, no checks: the caller keeps ids inside the vocabulary and the block tables
  // valid). Writes each row's key and value at its slot and returns logits [R, vocab]. The same
  // arithmetic as forward() with a cache; on CUDA it runs fused kernels (decode_ops.hpp) and one
  // GEMM for q, k and v and one for gate and up where the weights are adjacent (load() lays
  // them out so). `portable`: torch ops only (the kernels' reference).
  at::Tensor decode_paged(const PagedStep& step, PagedKvCache& cache, bool portable = false) const;

  // The training forward: no cache, the final norm applied, [B, T, hidden] in the model's dtype,
  // differentiable with respect to every tensor that requires grad. Padding may sit on either
  // side (positions count real tokens). lm_head is left to the caller (token_logprobs).
  at::Tensor hidden_states(const at::Tensor& input_ids, const at::Tensor& attention_mask = {},
                           const TrainForwardOptions& options = {}) const;

 private:
  struct Prepared;
  Prepared prepare(const at::Tensor& input_ids, const at::Tensor& attention_mask, KvCache* cache) const;
  at::Tensor layer_forward(const DecoderLayer& layer, const at::Tensor& h, const Prepared& in, KvCache* cache,
                           std::size_t layer_index) const;
  // Writes this step's keys and values into the cache at columns past..past+T-1.
  at::Tensor attention(const DecoderLayer& layer, const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                       const at::Tensor& mask, KvCache* cache, std::size_t layer_index, std::int64_t past) const;

  ModelConfig config_;
  DecoderWeights weights_;
  LoadOptions options_;
  at::Tensor inv_freq_;  // [D/2] float32 on the model's device
  std::vector<std::string> unexpected_;
};

}  // namespace kbrl::model
