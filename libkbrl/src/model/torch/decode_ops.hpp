// The operations of one decoding step over a paged KV cache (PagedKvCache, decoder.hpp), each with two
// implementations: libtorch ops (portable, any device: the reference) and fused CUDA kernels
// (cuda/decode_kernels.cu, built where a CUDA compiler and libtorch with CUDA are found). Every
// function takes the kernel path for CUDA tensors of a supported dtype when the kernels are
// built and `portable` is false, else the torch-op path. Both compute the same roundings as
// DecoderModel::forward (fp32 statistics, the model dtype after every op transformers rounds).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace kbrl::model::detail {

// Whether this build carries the CUDA kernels.
bool decode_kernels_built();

// The pieces forward() and the torch-op paths below share, op for op as transformers computes
// them. x [..., n] -> x / rms(x) * weight: the normalisation in fp32 (fp64 for fp64), cast to
// x's dtype, then times weight.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);
// [..., D] -> [..., D]: (x1, x2) -> (-x2, x1) over the two halves.
at::Tensor rotate_half(const at::Tensor& x);
// Rotary tables for positions [...] (any integer dtype): (cos, sin) [..., D], each computed in
// fp32 from position * inv_freq [D/2] and cast to dtype.
std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& positions, const at::Tensor& inv_freq,
                                               at::ScalarType dtype);

// residual [R, hidden] (model dtype), updated in place to residual + delta (rounded to the
// dtype) when delta is defined; out [R, hidden] = rms_norm(residual) * weight: the
// normalisation in fp32, cast to the dtype, times weight in the dtype.
void add_rms_norm(at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight, at::Tensor& out, double eps,
                  bool portable = false);

// qkv [R, (H + 2 Hkv) * D]: each row's q, k and v projections side by side (one GEMM's output).
// Qwen3: q_norm / k_norm [D] (else undefined) normalise every head first (rms_norm, eps).
// Rotary at positions [R] int64 with inv_freq [D/2] float32 (cos/sin of position * inv_freq in
// fp32, cast to the dtype; q*cos + rotate_half(q)*sin, each product and the sum rounded).
// The rotated keys and the values go to k_pool / v_pool [slots, Hkv, D] at slots [R] int64.
// Returns the rotated queries [R, H, D].
at::Tensor rope_write_kv(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& inv_freq,
                         const at::Tensor& q_norm, const at::Tensor& k_norm, double eps, std::int64_t heads,
                         std::int64_t kv_heads, at::Tensor& k_pool, at::Tensor& v_pool, const at::Tensor& slots,
                         bool portable = false);

// One query token per row over its cached keys: q [R, H, D]; k_pool / v_pool [blocks,
// block_size, Hkv, D]; block_tables [R, W] int32 (row r's tokens 0..n-1 sit in blocks
// block_tables[r][t / block_size] at t % block_size); context_lens [R] int32 (n >= 1, the new
// token included). Softmax(q k^T * scale) v in fp32, rounded to the dtype: [R, H, D]. Query
// head h reads key head h / (H / Hkv).
//
// counters: scratch of the kernel path, which splits long contexts into partitions and lets the
// last partition of each (row, key head, group of query heads) merge them. An int32 tensor on
// q's device, contiguous, of at least paged_attention_counters(R, H, Hkv) elements (R * H always
// suffice), all zero; each call leaves it all zero again, so that one buffer, allocated once,
// serves every layer, every step and every replay of a CUDA graph (calls on one stream; never
// two calls at once). Undefined: the call allocates zeroed counters when it needs them. The
// torch-op path ignores it.
at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                           const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                           bool portable = false, const at::Tensor& counters = {});

// The int32 counters paged_attention's kernel path uses for R rows, H query heads and Hkv key
// heads (at most R * H); 0 where this build has no kernels.
std::int64_t paged_attention_counters(std::int64_t rows, std::int64_t heads, std::int64_t kv_heads);

// gate_up [R, 2 I] (gate, then up) -> silu(gate) * up [R, I], each op rounded to the dtype.
at::Tensor silu_mul(const at::Tensor& gate_up, bool portable = false);

// The draw of Sampler (temperature > 0, no top-k / top-p): lp = log_softmax(float(logits) /
// temperature); the token is the first whose cumulative float64 sum of exp(lp), in vocabulary
// order, exceeds uniforms[r] * total (never past the last token of positive mass). temperature
// 0: the argmax (first of equal maxima), lp = log_softmax(float(logits)). logits [R, vocab],
// uniforms [R] float64. Returns (tokens [R] int64, lp[token] [R] float32).
std::pair<at::Tensor, at::Tensor> sample_rows(const at::Tensor& logits, double temperature, const at::Tensor& uniforms,
                                              bool portable = false);

// The draw from log-probabilities [R, vocab] float32 (excluded tokens -inf): the first token
// whose cumulative float64 sum of exp(lp), in vocabulary order, exceeds uniforms[r] * total.
// Returns (tokens [R] int64, logprobs[token] [R]). sample_rows' torch path, and the top-k /
// top-p draw.
std::pair<at::Tensor, at::Tensor> inverse_cdf(const at::Tensor& logprobs, const at::Tensor& uniforms);

}  // namespace kbrl::model::detail
