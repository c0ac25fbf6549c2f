// Torch-op implementations of the decoding step's operations, and the dispatch to the CUDA
// kernels where this build has them (KBRL_DECODE_KERNELS).
#include "decode_ops.hpp"

#include <ATen/ATen.h>

#include <limits>

#include "kbrl/core/error.hpp"
#include "kbrl/core/text.hpp"

#ifdef KBRL_DECODE_KERNELS
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/decode_kernels.hpp"
#endif

namespace kbrl::model::detail {

namespace {

#ifdef KBRL_DECODE_KERNELS
bool kernel_dtype(const at::Tensor& t, cuda::Dtype* out) {
  switch (t.scalar_type()) {
    case at::kFloat: *out = cuda::Dtype::kFloat32; return true;
    case at::kBFloat16: *out = cuda::Dtype::kBFloat16; return true;
    case at::kHalf: *out = cuda::Dtype::kFloat16; return true;
    default: return false;
  }
}

// The kernel path applies: CUDA, a kernel dtype, contiguous.
bool use_kernels(const at::Tensor& t, bool portable, cuda::Dtype* dtype) {
  return !portable && t.is_cuda() && t.is_contiguous() && kernel_dtype(t, dtype);
}

cudaStream_t stream_of(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.device().index()).stream(); }
#endif

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor x32 = x.to(x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
  return weight * (x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps)).to(x.scalar_type());
}

at::Tensor rotate_half(const at::Tensor& x) {
  const auto half = x.size(-1) / 2;
  return at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

std::pair<at::Tensor, at::Tensor> rope_cos_sin(const at::Tensor& positions, const at::Tensor& inv_freq,
                                               at::ScalarType dtype) {
  const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1) * inv_freq;  // [..., D/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1);                           // [..., D]
  return {emb.cos().to(dtype), emb.sin().to(dtype)};
}

bool decode_kernels_built() {
#ifdef KBRL_DECODE_KERNELS
  return true;
#else
  return false;
#endif
}

void add_rms_norm(at::Tensor& residual, const at::Tensor& delta, const at::Tensor& weight, at::Tensor& out, double eps,
                  bool portable) {
#ifdef KBRL_DECODE_KERNELS
  cuda::Dtype dt;
  if (use_kernels(residual, portable, &dt) && out.is_contiguous() && (!delta.defined() || delta.is_contiguous()) &&
      weight.is_contiguous() && weight.scalar_type() == residual.scalar_type()) {
    const c10::cuda::CUDAGuard guard(residual.device());
    cuda::add_rms_norm(dt, residual.data_ptr(), delta.defined() ? delta.data_ptr() : nullptr, weight.data_ptr(),
                       out.data_ptr(), static_cast<int>(residual.numel() / residual.size(-1)),
                       static_cast<int>(residual.size(-1)), static_cast<float>(eps), stream_of(residual));
    return;
  }
#endif
  if (delta.defined()) residual.add_(delta);
  out.copy_(rms_norm(residual, weight, eps));
}

at::Tensor rope_write_kv(const at::Tensor& qkv, const at::Tensor& positions, const at::Tensor& inv_freq,
                         const at::Tensor& q_norm, const at::Tensor& k_norm, double eps, std::int64_t heads,
                         std::int64_t kv_heads, at::Tensor& k_pool, at::Tensor& v_pool, const at::Tensor& slots,
                         bool portable) {
  const auto R = qkv.size(0), D = inv_freq.size(0) * 2;
  if (qkv.size(1) != (heads + 2 * kv_heads) * D)
    throw core::InvalidArgument(core::cat("rope_write_kv: qkv has ", qkv.size(1), " columns, expected ",
                                            (heads + 2 * kv_heads) * D));
#ifdef KBRL_DECODE_KERNELS
  cuda::Dtype dt;
  if (use_kernels(qkv, portable, &dt) && k_pool.is_contiguous() && v_pool.is_contiguous() &&
      (!q_norm.defined() || (q_norm.scalar_type() == qkv.scalar_type() && k_norm.scalar_type() == qkv.scalar_type()))) {
    const c10::cuda::CUDAGuard guard(qkv.device());
    at::Tensor q = at::empty({R, heads, D}, qkv.options());
    cuda::rope_write_kv(dt, qkv.data_ptr(), positions.data_ptr<std::int64_t>(), inv_freq.data_ptr<float>(),
                        q_norm.defined() ? q_norm.data_ptr() : nullptr, k_norm.defined() ? k_norm.data_ptr() : nullptr,
                        static_cast<float>(eps), q.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(),
                        slots.data_ptr<std::int64_t>(), static_cast<int>(R), static_cast<int>(heads),
                        static_cast<int>(kv_heads), static_cast<int>(D), stream_of(qkv));
    return q;
  }
#endif
  at::Tensor q = qkv.narrow(1, 0, heads * D).view({R, heads, D});
  at::Tensor k = qkv.narrow(1, heads * D, kv_heads * D).view({R, kv_heads, D});
  const at::Tensor v = qkv.narrow(1, (heads + kv_heads) * D, kv_heads * D).view({R, kv_heads, D});
  if (q_norm.defined()) {
    q = rms_norm(q, q_norm, eps);
    k = rms_norm(k, k_norm, eps);
  }
  auto [cos, sin] = rope_cos_sin(positions, inv_freq, qkv.scalar_type());  // [R, D]
  cos = cos.unsqueeze(1);                                                   // [R, 1, D]: over the heads
  sin = sin.unsqueeze(1);
  q = q * cos + rotate_half(q) * sin;
  k = k * cos + rotate_half(k) * sin;
  k_pool.view({-1, kv_heads, D}).index_copy_(0, slots, k);
  v_pool.view({-1, kv_heads, D}).index_copy_(0, slots, v);
  return q;
}

at::Tensor paged_attention(const at::Tensor& q, const at::Tensor& k_pool, const at::Tensor& v_pool,
                           const at::Tensor& block_tables, const at::Tensor& context_lens, double scale,
                           bool portable, const at::Tensor& counters) {
  const auto R = q.size(0), H = q.size(1), D = q.size(2);
  const auto block_size = k_pool.size(1), Hkv = k_pool.size(2), W = block_tables.size(1);
#ifdef KBRL_DECODE_KERNELS
  cuda::Dtype dt;
  if (use_kernels(q, portable, &dt) && (D == 64 || D == 128 || D == 256) && k_pool.is_contiguous() &&
      v_pool.is_contiguous() && block_tables.is_contiguous() && context_lens.is_contiguous()) {
    const c10::cuda::CUDAGuard guard(q.device());
    const std::int64_t needed = paged_attention_counters(R, H, Hkv);
    if (counters.defined() && (counters.scalar_type() != at::kInt || counters.device() != q.device() ||
                               !counters.is_contiguous() || counters.numel() < needed))
      throw core::InvalidArgument(core::cat("paged_attention: counters must be a contiguous int32 tensor of at least ",
                                            needed, " elements on ", q.device().str(), ", got ",
                                            c10::toString(counters.scalar_type()), " ",
                                            core::shape_string(counters.sizes()), " on ", counters.device().str(),
                                            counters.is_contiguous() ? "" : " (not contiguous)"));
    at::Tensor out = at::empty_like(q);
    const std::size_t bytes = cuda::paged_attention_workspace_bytes(
        static_cast<int>(R), static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D), static_cast<int>(W),
        static_cast<int>(block_size));
    at::Tensor workspace, count;
    if (bytes > 0) {
      workspace = at::empty({static_cast<std::int64_t>(bytes)}, q.options().dtype(at::kByte));
      count = counters.defined() ? counters : at::zeros({needed}, q.options().dtype(at::kInt));
    }
    cuda::paged_attention(dt, q.data_ptr(), k_pool.data_ptr(), v_pool.data_ptr(), block_tables.data_ptr<std::int32_t>(),
                          context_lens.data_ptr<std::int32_t>(), out.data_ptr(), static_cast<int>(R),
                          static_cast<int>(H), static_cast<int>(Hkv), static_cast<int>(D),
                          static_cast<int>(block_size), static_cast<int>(W), static_cast<float>(scale),
                          bytes > 0 ? workspace.data_ptr() : nullptr,
                          bytes > 0 ? count.data_ptr<std::int32_t>() : nullptr, stream_of(q));
    return out;
  }
#endif
  static_cast<void>(counters);  // the torch ops need none
  const auto S = W * block_size;
  const at::TensorOptions longs = block_tables.options().dtype(at::kLong);
  // Row r's token t sits at slot block_tables[r][t / block_size] * block_size + t % block_size.
  const at::Tensor slot = (block_tables.to(at::kLong).unsqueeze(-1) * block_size + at::arange(block_size, longs)).view({-1});
  const at::ScalarType wide = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const auto gather = [&](const at::Tensor& pool) {  // -> [R, Hkv, S, D] in fp32 (fp64 for fp64)
    return pool.view({-1, Hkv, D}).index_select(0, slot).view({R, S, Hkv, D}).permute({0, 2, 1, 3}).to(wide);
  };
  const at::Tensor keys = gather(k_pool), values = gather(v_pool);
  const at::Tensor qg = q.to(wide).view({R, Hkv, H / Hkv, D});
  at::Tensor scores = at::matmul(qg, keys.transpose(2, 3)) * scale;  // [R, Hkv, group, S]
  const at::Tensor visible = at::arange(S, longs).unsqueeze(0) < context_lens.to(at::kLong).unsqueeze(1);  // [R, S]
  scores = scores.masked_fill(visible.logical_not().view({R, 1, 1, S}), -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), values).to(q.scalar_type()).view({R, H, D});
}

std::int64_t paged_attention_counters(std::int64_t rows, std::int64_t heads, std::int64_t kv_heads) {
#ifdef KBRL_DECODE_KERNELS
  return static_cast<std::int64_t>(cuda::paged_attention_counters(static_cast<int>(rows), static_cast<int>(heads),
                                                                  static_cast<int>(kv_heads)));
#else
  static_cast<void>(rows);
  static_cast<void>(heads);
  static_cast<void>(kv_heads);
  return 0;
#endif
}

at::Tensor silu_mul(const at::Tensor& gate_up, bool portable) {
  const auto R = gate_up.size(0), I = gate_up.size(1) / 2;
#ifdef KBRL_DECODE_KERNELS
  cuda::Dtype dt;
  if (use_kernels(gate_up, portable, &dt)) {
    const c10::cuda::CUDAGuard guard(gate_up.device());
    at::Tensor out = at::empty({R, I}, gate_up.options());
    cuda::silu_mul(dt, gate_up.data_ptr(), out.data_ptr(), static_cast<int>(R), static_cast<int>(I), stream_of(gate_up));
    return out;
  }
#endif
  return at::silu(gate_up.narrow(1, 0, I)) * gate_up.narrow(1, I, I);
}

std::pair<at::Tensor, at::Tensor> sample_rows(const at::Tensor& logits, double temperature, const at::Tensor& uniforms,
                                              bool portable) {
#ifdef KBRL_DECODE_KERNELS
  cuda::Dtype dt;
  if (use_kernels(logits, portable, &dt) && uniforms.is_contiguous()) {
    const c10::cuda::CUDAGuard guard(logits.device());
    const auto R = logits.size(0);
    at::Tensor tokens = at::empty({R}, logits.options().dtype(at::kLong));
    at::Tensor logprobs = at::empty({R}, logits.options().dtype(at::kFloat));
    cuda::sample_rows(dt, logits.data_ptr(), static_cast<int>(R), static_cast<int>(logits.size(1)),
                      static_cast<float>(temperature), uniforms.data_ptr<double>(), tokens.data_ptr<std::int64_t>(),
                      logprobs.data_ptr<float>(), stream_of(logits));
    return {tokens, logprobs};
  }
#endif
  at::Tensor x = logits.to(at::kFloat);
  if (temperature != 0) x = x / temperature;
  const at::Tensor lp = at::log_softmax(x, -1);
  if (temperature == 0) {
    const at::Tensor next = logits.argmax(-1);
    return {next, lp.gather(-1, next.unsqueeze(1)).squeeze(1)};
  }
  return inverse_cdf(lp, uniforms);
}

std::pair<at::Tensor, at::Tensor> inverse_cdf(const at::Tensor& logprobs, const at::Tensor& uniforms) {
  // In vocabulary order, in float64. Tokens after the last one of positive mass have
  // cdf == total and are never counted, even when u * total rounds up to total.
  const at::Tensor cdf = logprobs.exp().to(at::kDouble).cumsum(-1);
  const at::Tensor total = cdf.narrow(-1, cdf.size(-1) - 1, 1);
  const at::Tensor next = ((cdf <= uniforms.unsqueeze(1) * total) & (cdf < total)).sum(-1);
  return {next, logprobs.gather(-1, next.unsqueeze(1)).squeeze(1)};
}

}  // namespace kbrl::model::detail
