// The forward pass mirrors transformers' modeling_llama / modeling_qwen2 / modeling_qwen3 op
// for op (RMSNorm in fp32 then cast, rotary tables in fp32 then cast, softmax in fp32), so that
// fp32 results agree to rounding and bf16 results to bf16 rounding; docs/model.md has numbers.
#include "kbrl/model/torch/decoder.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <map>
#include <set>
#include <tuple>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"
#include "kbrl/model/checkpoint.hpp"
#include "kbrl/model/torch/torch_tensors.hpp"
#include "kbrl/model/torch/train_forward.hpp"
#include "decode_ops.hpp"

namespace kbrl::model {
namespace fs = std::filesystem;
using detail::rms_norm;
using detail::rotate_half;

at::Tensor LoraAdapter::term(const at::Tensor& x) const {
  // PEFT's order: the input cast to the adapter's dtype, dropout, A, B, times scale.
  at::Tensor xa = x.to(a.scalar_type());
  if (training && dropout > 0) xa = at::dropout(xa, dropout, /*train=*/true);
  return at::linear(at::linear(xa, a), b) * scale;
}

at::Tensor Linear::forward(const at::Tensor& x) const {
  at::Tensor y = at::linear(x, weight, bias);
  if (!lora) return y;
  // The term added to the base result (promoting it), and the sum cast back to the base dtype.
  return (y + lora->term(x)).to(y.scalar_type());
}

namespace {

// fp32 for the half types and fp32 itself; fp64 stays fp64 (the numerical checks need it).
at::ScalarType accumulate_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// Copies the tensors into one storage, one after the other, and makes each a view of its part.
// Does nothing unless all are defined (a missing tensor is reported by load()).
void place_side_by_side(const std::vector<at::Tensor*>& parts) {
  std::vector<at::Tensor> all;
  for (const at::Tensor* t : parts) {
    if (!t->defined()) return;
    all.push_back(*t);
  }
  const at::Tensor joined = at::cat(all, 0);
  std::int64_t offset = 0;
  for (at::Tensor* t : parts) {
    const auto rows = t->size(0);
    *t = joined.narrow(0, offset, rows);
    offset += rows;
  }
}

// Inverse frequencies [D/2] in float32, computed with the same tensor ops as transformers'
// rope initialisers (so the same roundings).
at::Tensor rope_inv_freq(const ModelConfig& c) {
  const auto dim = c.head_dim;
  at::Tensor inv_freq = at::reciprocal(at::pow(c.rope.theta, at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim));
  switch (c.rope.type) {
    case RopeConfig::Type::kDefault: break;
    case RopeConfig::Type::kLinear: inv_freq = inv_freq / c.rope.factor; break;
    case RopeConfig::Type::kLlama3: {
      const double factor = c.rope.factor;
      const double old_context = static_cast<double>(c.rope.original_max_position_embeddings);
      const double low_freq_wavelen = old_context / c.rope.low_freq_factor;
      const double high_freq_wavelen = old_context / c.rope.high_freq_factor;
      const at::Tensor wavelen = at::reciprocal(inv_freq) * (2 * std::numbers::pi);
      // Long wavelengths are slowed down by `factor`, short ones kept, the middle interpolated.
      at::Tensor scaled = at::where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq);
      const at::Tensor smooth = (at::reciprocal(wavelen) * old_context - c.rope.low_freq_factor) /
                                (c.rope.high_freq_factor - c.rope.low_freq_factor);
      const at::Tensor smoothed = (1 - smooth) * scaled / factor + smooth * scaled;
      const at::Tensor medium = (wavelen >= high_freq_wavelen).logical_and(wavelen <= low_freq_wavelen);
      inv_freq = at::where(medium, smoothed, scaled);
      break;
    }
  }
  return inv_freq;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// KvCache

KvCache::KvCache(const ModelConfig& config, std::int64_t batch, std::int64_t capacity,
                 const c10::TensorOptions& options) {
  if (batch <= 0 || capacity < 0) throw core::InvalidArgument("KvCache: batch must be positive and capacity non-negative");
  for (std::int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
    values_.push_back(at::zeros({batch, config.num_key_value_heads, capacity, config.head_dim}, options));
  }
  valid_ = at::zeros({batch, capacity}, options.dtype(at::kBool));
  lengths_ = at::zeros({batch}, options.dtype(at::kLong));
}

KvCache KvCache::select_rows(const at::Tensor& rows) const {
  KvCache out;
  const at::Tensor index = rows.to(valid_.device(), at::kLong);
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    out.keys_.push_back(keys_[l].index_select(0, index));
    out.values_.push_back(values_[l].index_select(0, index));
  }
  out.valid_ = valid_.index_select(0, index);
  out.lengths_ = lengths_.index_select(0, index);
  out.length_ = length_;
  return out;
}

KvCache KvCache::repeat_interleave(std::int64_t n) const {
  if (n <= 0) throw core::InvalidArgument("KvCache::repeat_interleave: n must be positive");
  return select_rows(at::arange(batch(), valid_.options().dtype(at::kLong)).repeat_interleave(n));
}

void KvCache::reserve(std::int64_t columns) {
  const std::int64_t needed = length_ + columns;
  if (needed <= capacity()) return;
  const std::int64_t grown = std::max(needed, 2 * capacity());
  auto grow = [&](at::Tensor& t, std::int64_t dim) {
    std::vector<std::int64_t> sizes(t.sizes().begin(), t.sizes().end());
    sizes[dim] = grown;
    at::Tensor bigger = at::zeros(sizes, t.options());
    bigger.narrow(dim, 0, length_).copy_(t.narrow(dim, 0, length_));
    t = bigger;
  };
  for (auto& k : keys_) grow(k, 2);
  for (auto& v : values_) grow(v, 2);
  grow(valid_, 1);
}

// ---------------------------------------------------------------------------------------------
// PagedKvCache

PagedKvCache::PagedKvCache(const ModelConfig& config, std::int64_t num_blocks, std::int64_t block_size,
                           const c10::TensorOptions& options) {
  if (num_blocks <= 0 || block_size <= 0)
    throw core::InvalidArgument(core::cat("PagedKvCache: ", num_blocks, " blocks of ", block_size,
                                            " tokens: both must be positive"));
  for (std::int64_t l = 0; l < config.num_hidden_layers; ++l) {
    keys_.push_back(at::zeros({num_blocks, block_size, config.num_key_value_heads, config.head_dim}, options));
    values_.push_back(at::zeros({num_blocks, block_size, config.num_key_value_heads, config.head_dim}, options));
  }
}

std::int64_t PagedKvCache::bytes_per_token(const ModelConfig& config, c10::ScalarType dtype) {
  return 2 * config.num_hidden_layers * config.num_key_value_heads * config.head_dim *
         static_cast<std::int64_t>(c10::elementSize(dtype));
}

void PagedKvCache::copy_from(const KvCache& dense, const at::Tensor& rows, const at::Tensor& columns,
                             const at::Tensor& slots) {
  using at::indexing::Slice;
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    const auto Hkv = keys_[l].size(2), D = keys_[l].size(3);
    // dense [B, Hkv, capacity, D] at (rows[i], :, columns[i]) -> [N, Hkv, D]
    keys_[l].view({-1, Hkv, D}).index_copy_(0, slots, dense.keys(l).index({rows, Slice(), columns}));
    values_[l].view({-1, Hkv, D}).index_copy_(0, slots, dense.values(l).index({rows, Slice(), columns}));
  }
}

// ---------------------------------------------------------------------------------------------
// Loading

DecoderModel DecoderModel::load(const fs::path& dir, const LoadOptions& options) {
  ModelConfig config = load_model_config(dir);
  const Checkpoint checkpoint(dir);
  const auto& c = config;
  const std::int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size, V = c.vocab_size;
  const std::int64_t q_out = c.num_attention_heads * D, kv_out = c.num_key_value_heads * D;

  std::vector<std::string> problems;
  std::set<std::string> used;
  auto take = [&](const std::string& name, std::vector<std::int64_t> shape) -> at::Tensor {
    used.insert(name);
    if (!checkpoint.contains(name)) {
      problems.push_back(core::cat("missing ", name, " (expected shape ", core::shape_string(shape), ")"));
      return {};
    }
    const TensorInfo& info = checkpoint.info(name);
    if (info.shape != shape) {
      problems.push_back(core::cat(name, ": expected shape ", core::shape_string(shape), ", found ",
                                     core::shape_string(info.shape)));
      return {};
    }
    return load_tensor(checkpoint, name, at::TensorOptions().dtype(options.dtype).device(options.device));
  };
  auto linear = [&](const std::string& prefix, std::int64_t out, std::int64_t in, bool bias) {
    Linear l;
    l.weight = take(prefix + ".weight", {out, in});
    if (bias) l.bias = take(prefix + ".bias", {out});
    return l;
  };

  DecoderWeights w;
  w.embed_tokens = take("model.embed_tokens.weight", {V, H});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = core::cat("model.layers.", i, ".");
    DecoderLayer layer;
    layer.input_norm = take(p + "input_layernorm.weight", {H});
    layer.q_proj = linear(p + "self_attn.q_proj", q_out, H, c.qkv_bias);
    layer.k_proj = linear(p + "self_attn.k_proj", kv_out, H, c.qkv_bias);
    layer.v_proj = linear(p + "self_attn.v_proj", kv_out, H, c.qkv_bias);
    layer.o_proj = linear(p + "self_attn.o_proj", H, q_out, c.o_bias);
    if (c.qk_norm) {
      layer.q_norm = take(p + "self_attn.q_norm.weight", {D});
      layer.k_norm = take(p + "self_attn.k_norm.weight", {D});
    }
    layer.post_attention_norm = take(p + "post_attention_layernorm.weight", {H});
    layer.gate_proj = linear(p + "mlp.gate_proj", I, H, c.mlp_bias);
    layer.up_proj = linear(p + "mlp.up_proj", I, H, c.mlp_bias);
    layer.down_proj = linear(p + "mlp.down_proj", H, I, c.mlp_bias);
    // q, k, v and gate, up side by side in memory: decoding multiplies each group in one GEMM.
    place_side_by_side({&layer.q_proj.weight, &layer.k_proj.weight, &layer.v_proj.weight});
    place_side_by_side({&layer.q_proj.bias, &layer.k_proj.bias, &layer.v_proj.bias});
    place_side_by_side({&layer.gate_proj.weight, &layer.up_proj.weight});
    place_side_by_side({&layer.gate_proj.bias, &layer.up_proj.bias});
    w.layers.push_back(std::move(layer));
  }
  w.norm = take("model.norm.weight", {H});
  // Tied: transformers ties lm_head to the embedding and ignores a stored lm_head.weight.
  if (c.tie_word_embeddings) {
    w.lm_head.weight = w.embed_tokens;
  } else {
    w.lm_head.weight = take("lm_head.weight", {V, H});
  }

  std::vector<std::string> unexpected;
  for (const std::string& name : checkpoint.tensor_names())
    if (!used.contains(name)) unexpected.push_back(name);
  if (!unexpected.empty() && !options.allow_unexpected_tensors) {
    for (const auto& name : unexpected) problems.push_back("unexpected tensor " + name);
  }
  if (!problems.empty()) {
    constexpr std::size_t kShown = 20;
    std::string list;
    for (std::size_t i = 0; i < problems.size() && i < kShown; ++i) list += "\n  " + problems[i];
    if (problems.size() > kShown) list += core::cat("\n  ... and ", problems.size() - kShown, " more");
    throw core::ConfigError(checkpoint.source().string(), "",
                            core::cat("does not match ", architecture_name(c.architecture), " in ",
                                        (dir / "config.json").string(), " (", problems.size(), " problems):", list));
  }
  DecoderModel model(std::move(config), std::move(w), options);
  model.unexpected_ = std::move(unexpected);
  return model;
}

DecoderModel::DecoderModel(ModelConfig config, DecoderWeights weights, const LoadOptions& options)
    : config_(std::move(config)), weights_(std::move(weights)), options_(options) {
  if (options_.dtype != at::kFloat && options_.dtype != at::kBFloat16 && options_.dtype != at::kHalf &&
      options_.dtype != at::kDouble)
    throw core::InvalidArgument(core::cat("DecoderModel: dtype ", c10::toString(options_.dtype),
                                            " is not float32, bfloat16, float16 or float64"));
  // Computed on the CPU as transformers does at construction, then moved.
  inv_freq_ = rope_inv_freq(config_).to(options_.device);
}

std::vector<std::pair<std::string, Linear*>> DecoderModel::linears() {
  std::vector<std::pair<std::string, Linear*>> out;
  for (std::size_t i = 0; i < weights_.layers.size(); ++i) {
    DecoderLayer& l = weights_.layers[i];
    const std::string p = core::cat("model.layers.", i, ".");
    out.emplace_back(p + "self_attn.q_proj", &l.q_proj);
    out.emplace_back(p + "self_attn.k_proj", &l.k_proj);
    out.emplace_back(p + "self_attn.v_proj", &l.v_proj);
    out.emplace_back(p + "self_attn.o_proj", &l.o_proj);
    out.emplace_back(p + "mlp.gate_proj", &l.gate_proj);
    out.emplace_back(p + "mlp.up_proj", &l.up_proj);
    out.emplace_back(p + "mlp.down_proj", &l.down_proj);
  }
  out.emplace_back("lm_head", &weights_.lm_head);
  return out;
}

KvCache DecoderModel::make_cache(std::int64_t batch, std::int64_t capacity) const {
  return KvCache(config_, batch, capacity, at::TensorOptions().dtype(options_.dtype).device(options_.device));
}

// ---------------------------------------------------------------------------------------------
// Forward

at::Tensor DecoderModel::attention(const DecoderLayer& layer, const at::Tensor& x, const at::Tensor& cos,
                                   const at::Tensor& sin, const at::Tensor& mask, KvCache* cache,
                                   std::size_t layer_index, std::int64_t past) const {
  const auto B = x.size(0), T = x.size(1);
  const auto H = config_.num_attention_heads, Hkv = config_.num_key_value_heads, D = config_.head_dim;
  const auto group = H / Hkv;

  at::Tensor q = layer.q_proj.forward(x).view({B, T, H, D});    // [B, T, H, D]
  at::Tensor k = layer.k_proj.forward(x).view({B, T, Hkv, D});  // [B, T, Hkv, D]
  at::Tensor v = layer.v_proj.forward(x).view({B, T, Hkv, D});  // [B, T, Hkv, D]
  if (layer.q_norm.defined()) {  // Qwen3: per-head RMSNorm before the rotation
    q = rms_norm(q, layer.q_norm, config_.rms_norm_eps);
    k = rms_norm(k, layer.k_norm, config_.rms_norm_eps);
  }
  q = q.transpose(1, 2);  // [B, H, T, D]
  k = k.transpose(1, 2);  // [B, Hkv, T, D]
  v = v.transpose(1, 2);  // [B, Hkv, T, D]
  const at::Tensor c = cos.unsqueeze(1), s = sin.unsqueeze(1);  // [B, 1, T, D]
  q = q * c + rotate_half(q) * s;
  k = k * c + rotate_half(k) * s;

  at::Tensor keys = k, values = v;  // [B, Hkv, S, D], S = past + T
  if (cache != nullptr) {
    cache->keys_[layer_index].narrow(2, past, T).copy_(k);
    cache->values_[layer_index].narrow(2, past, T).copy_(v);
    keys = cache->keys_[layer_index].narrow(2, 0, past + T);
    values = cache->values_[layer_index].narrow(2, 0, past + T);
  }
  const auto S = keys.size(2);

  // mask [B, 1, T, S] broadcasts over heads. Grouped-query attention: the `group` query heads
  // that share a key head are folded into the query length where that needs no copy.
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const bool fused = options_.attention == AttentionKernel::kFused ||
                     (options_.attention == AttentionKernel::kAuto && x.device().is_cuda());
  at::Tensor out;  // [B, H, T, D] in memory order
  if (!fused) {
    // Portable: scores [B, Hkv, group*T, S] viewed as [B, Hkv, group, T, S] for the mask.
    const at::Tensor qg = q.reshape({B, Hkv, group * T, D});
    at::Tensor scores = (at::matmul(qg, keys.transpose(2, 3)) * scale).view({B, Hkv, group, T, S});
    scores = scores.masked_fill(mask.unsqueeze(2).logical_not(), -std::numeric_limits<double>::infinity());
    const at::Tensor probs = at::softmax(scores, -1, accumulate_type(q.scalar_type())).to(q.scalar_type()).view({B, Hkv, group * T, S});
    out = at::matmul(probs, values);  // [B, Hkv, group*T, D]
  } else if (T == 1) {
    // Decoding: q [B, Hkv, group, D], and the one mask row [B, 1, 1, S] serves every head.
    out = at::scaled_dot_product_attention(q.reshape({B, Hkv, group, D}), keys, values, mask, 0.0, false, scale);
  } else {
    // Prefill: folding would repeat the mask group times (T x S each); repeating the keys and
    // values to every head costs less and keeps the kernel's mask [B, 1, T, S].
    const auto repeat = [&](const at::Tensor& t) {  // [B, Hkv, S, D] -> [B, H, S, D]
      return group == 1 ? t : t.unsqueeze(2).expand({B, Hkv, group, S, D}).reshape({B, H, S, D});
    };
    out = at::scaled_dot_product_attention(q, repeat(keys), repeat(values), mask, 0.0, false, scale);
  }
  out = out.reshape({B, H, T, D}).transpose(1, 2).reshape({B, T, H * D});  // [B, T, H*D]
  return layer.o_proj.forward(out);                                      // [B, T, hidden]
}

struct DecoderModel::Prepared {
  at::Tensor ids;           // [B, T] int64 on the model's device
  at::Tensor real_long;     // [B, T] 1 real, 0 padding
  at::Tensor past_lengths;  // [B] real tokens before this call
  at::Tensor mask;          // [B, 1, T, S]
  at::Tensor cos, sin;      // [B, T, D] in the model's dtype
  std::int64_t past = 0;
};

DecoderModel::Prepared DecoderModel::prepare(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                             KvCache* cache) const {
  if (input_ids.dim() != 2) throw core::InvalidArgument(core::cat("forward: input_ids must be [B, T], got ",
                                                                    core::shape_string(input_ids.sizes())));
  const auto dev = options_.device;
  Prepared p;
  p.ids = input_ids.to(dev, at::kLong);  // [B, T]
  const at::Tensor& ids = p.ids;
  const auto B = ids.size(0), T = ids.size(1);
  if (T == 0) throw core::InvalidArgument("forward: no tokens");
  if (ids.min().item<std::int64_t>() < 0 || ids.max().item<std::int64_t>() >= config_.vocab_size)
    throw core::InvalidArgument(core::cat("forward: token ids must lie in [0, ", config_.vocab_size, ")"));
  const at::Tensor real = attention_mask.defined() ? attention_mask.to(dev).to(at::kBool)
                                                   : at::ones({B, T}, ids.options().dtype(at::kBool));  // [B, T]
  if (real.sizes() != ids.sizes())
    throw core::InvalidArgument(core::cat("forward: attention_mask ", core::shape_string(real.sizes()),
                                            " does not match input_ids ", core::shape_string(ids.sizes())));

  // Columns and positions. A row's position counts its real tokens before this one.
  p.past_lengths = at::zeros({B}, ids.options());
  at::Tensor valid;  // [B, S] which key columns hold real tokens, S = past + T
  if (cache != nullptr) {
    if (cache->batch() != B)
      throw core::InvalidArgument(core::cat("forward: cache has ", cache->batch(), " rows, input has ", B));
    cache->reserve(T);
    p.past = cache->length_;
    p.past_lengths = cache->lengths_;
    cache->valid_.narrow(1, p.past, T).copy_(real);
    valid = cache->valid_.narrow(1, 0, p.past + T);
  } else {
    valid = real;
  }
  p.real_long = real.to(at::kLong);
  const at::Tensor positions = (p.past_lengths.unsqueeze(1) + p.real_long.cumsum(1) - 1).clamp_min(0);  // [B, T]

  // mask [B, 1, T, S]: query column past+t sees key column j <= past+t that holds a real token,
  // and always itself, so that padding rows never softmax over nothing (they produce finite
  // values nobody reads).
  const auto S = p.past + T;
  const at::Tensor qcol = at::arange(p.past, S, ids.options()).unsqueeze(1);  // [T, 1]
  const at::Tensor kcol = at::arange(0, S, ids.options()).unsqueeze(0);       // [1, S]
  const at::Tensor causal = kcol <= qcol;                                     // [T, S]
  p.mask = ((causal.unsqueeze(0) & valid.unsqueeze(1)) | (kcol == qcol).unsqueeze(0)).unsqueeze(1);

  // Rotary tables in fp32, then the model's dtype: [B, T, D]
  std::tie(p.cos, p.sin) = detail::rope_cos_sin(positions, inv_freq_, options_.dtype);  // [B, T, D]
  return p;
}

at::Tensor DecoderModel::layer_forward(const DecoderLayer& layer, const at::Tensor& h, const Prepared& in,
                                       KvCache* cache, std::size_t layer_index) const {
  const at::Tensor a =
      h + attention(layer, rms_norm(h, layer.input_norm, config_.rms_norm_eps), in.cos, in.sin, in.mask, cache,
                    layer_index, in.past);
  const at::Tensor x = rms_norm(a, layer.post_attention_norm, config_.rms_norm_eps);
  return a + layer.down_proj.forward(at::silu(layer.gate_proj.forward(x)) * layer.up_proj.forward(x));
}

at::Tensor DecoderModel::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask, KvCache* cache,
                                 bool last_only) const {
  const Prepared in = prepare(input_ids, attention_mask, cache);
  const auto T = in.ids.size(1);
  at::Tensor h = at::embedding(weights_.embed_tokens, in.ids);  // [B, T, hidden]
  for (std::size_t l = 0; l < weights_.layers.size(); ++l) h = layer_forward(weights_.layers[l], h, in, cache, l);
  if (cache != nullptr) {
    cache->length_ = in.past + T;
    cache->lengths_ = in.past_lengths + in.real_long.sum(1);
  }
  if (last_only) h = h.narrow(1, T - 1, 1);  // [B, 1, hidden]: norm is per position
  return weights_.lm_head.forward(rms_norm(h, weights_.norm, config_.rms_norm_eps));  // [B, T|1, vocab]
}

namespace {

// The weights (or biases) of `parts` as one tensor [sum of rows, ...] when they lie side by side
// in one storage, in order, as load() places q, k, v and gate, up; else undefined.
at::Tensor adjacent(const std::vector<const at::Tensor*>& parts) {
  const at::Tensor& first = *parts.front();
  if (!first.defined()) return {};
  std::int64_t rows = 0;
  const char* expected = static_cast<const char*>(first.data_ptr());
  for (const at::Tensor* t : parts) {
    if (!t->defined() || !t->is_contiguous() || t->dim() != first.dim() || t->scalar_type() != first.scalar_type() ||
        !t->storage().is_alias_of(first.storage()) || static_cast<const char*>(t->data_ptr()) != expected ||
        (t->dim() == 2 && t->size(1) != first.size(1)))
      return {};
    expected += t->nbytes();
    rows += t->size(0);
  }
  if (first.dim() == 1) return first.as_strided({rows}, {1}, first.storage_offset());
  return first.as_strided({rows, first.size(1)}, {first.size(1), 1}, first.storage_offset());
}

// The outputs of several projections of one input side by side, [R, sum of outs]: one GEMM where
// their weights are adjacent (LoRA terms added to their columns afterwards, as Linear::forward
// adds them), else one per projection.
at::Tensor project(const std::vector<const Linear*>& parts, const at::Tensor& x) {
  std::vector<const at::Tensor*> weights, biases;
  for (const Linear* p : parts) {
    weights.push_back(&p->weight);
    biases.push_back(&p->bias);
  }
  const at::Tensor w = adjacent(weights), b = adjacent(biases);
  const bool biased = parts.front()->bias.defined();
  if (!w.defined() || (biased && !b.defined())) {
    std::vector<at::Tensor> outs;
    for (const Linear* p : parts) outs.push_back(p->forward(x));
    return at::cat(outs, -1);
  }
  at::Tensor y = at::linear(x, w, biased ? b : at::Tensor());
  std::int64_t offset = 0;
  for (const Linear* p : parts) {
    const auto out = p->weight.size(0);
    if (p->lora) {
      at::Tensor cols = y.narrow(-1, offset, out);
      cols.copy_(cols + p->lora->term(x));
    }
    offset += out;
  }
  return y;
}

}  // namespace

at::Tensor DecoderModel::decode_paged(const PagedStep& step, PagedKvCache& cache, bool portable) const {
  const ModelConfig& c = config_;
  const auto R = step.ids.size(0), H = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim;
  const double eps = c.rms_norm_eps, scale = 1.0 / std::sqrt(static_cast<double>(D));
  at::Tensor h = at::embedding(weights_.embed_tokens, step.ids);  // [R, hidden], the residual stream
  at::Tensor x = at::empty_like(h);                               // the normalised input of a sublayer
  at::Tensor delta;  // the last sublayer's output, added to h by the next norm
  for (std::size_t l = 0; l < weights_.layers.size(); ++l) {
    const DecoderLayer& layer = weights_.layers[l];
    detail::add_rms_norm(h, delta, layer.input_norm, x, eps, portable);
    const at::Tensor qkv = project({&layer.q_proj, &layer.k_proj, &layer.v_proj}, x);  // [R, (H + 2 Hkv) D]
    const at::Tensor q = detail::rope_write_kv(qkv, step.positions, inv_freq_, layer.q_norm, layer.k_norm, eps, H,
                                               Hkv, cache.keys(l), cache.values(l), step.slots, portable);
    const at::Tensor attn = detail::paged_attention(q, cache.keys(l), cache.values(l), step.block_tables,
                                                    step.context_lens, scale, portable,
                                                    step.attention_counters);  // [R, H, D]
    delta = layer.o_proj.forward(attn.view({R, H * D}));
    detail::add_rms_norm(h, delta, layer.post_attention_norm, x, eps, portable);
    delta = layer.down_proj.forward(detail::silu_mul(project({&layer.gate_proj, &layer.up_proj}, x), portable));
  }
  detail::add_rms_norm(h, delta, weights_.norm, x, eps, portable);
  return weights_.lm_head.forward(x);  // [R, vocab]
}

namespace {

// The tensors of one layer that require grad: what a checkpointed layer must route gradients to.
std::vector<at::Tensor> trainable_tensors(const DecoderLayer& layer) {
  std::vector<at::Tensor> out;
  const auto add = [&](const at::Tensor& t) {
    if (t.defined() && t.requires_grad()) out.push_back(t);
  };
  add(layer.input_norm);
  add(layer.q_norm);
  add(layer.k_norm);
  add(layer.post_attention_norm);
  for (const Linear* l : {&layer.q_proj, &layer.k_proj, &layer.v_proj, &layer.o_proj, &layer.gate_proj,
                          &layer.up_proj, &layer.down_proj}) {
    add(l->weight);
    add(l->bias);
    if (l->lora) {
      add(l->lora->a);
      add(l->lora->b);
    }
  }
  return out;
}

}  // namespace

at::Tensor DecoderModel::hidden_states(const at::Tensor& input_ids, const at::Tensor& attention_mask,
                                       const TrainForwardOptions& options) const {
  const Prepared in = prepare(input_ids, attention_mask, nullptr);
  at::Tensor h = at::embedding(weights_.embed_tokens, in.ids);  // [B, T, hidden]
  for (std::size_t l = 0; l < weights_.layers.size(); ++l) {
    const DecoderLayer& layer = weights_.layers[l];
    if (options.checkpoint_layers) {
      // `in` lives until this function returns; the closure, kept for backward, holds copies.
      h = checkpoint(
          [this, &layer, in, l](const at::Tensor& x) { return layer_forward(layer, x, in, nullptr, l); }, h,
          trainable_tensors(layer));
    } else {
      h = layer_forward(layer, h, in, nullptr, l);
    }
  }
  return rms_norm(h, weights_.norm, config_.rms_norm_eps);
}

}  // namespace kbrl::model
