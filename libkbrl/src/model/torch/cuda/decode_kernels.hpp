// Fused CUDA kernels of one decoding step (decode_kernels.cu), behind a plain C++ interface: raw
// device pointers, row-major contiguous tensors, a CUDA stream. No torch header, so nvcc compiles
// the .cu quickly; decode_ops.cpp checks shapes and dtypes and calls these. The semantics are
// those of the matching functions in ../decode_ops.hpp (the torch-op reference).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace kbrl::model::cuda {

enum class Dtype { kFloat32, kBFloat16, kFloat16 };

// residual, delta, out [rows, hidden]; weight [hidden]. delta may be null (no add).
void add_rms_norm(Dtype dtype, void* residual, const void* delta, const void* weight, void* out, int rows, int hidden,
                  float eps, cudaStream_t stream);

// qkv [rows, (heads + 2 kv_heads) * head_dim]; positions [rows]; inv_freq [head_dim / 2] float;
// q_norm, k_norm [head_dim] or null; q_out [rows, heads, head_dim]; k_pool, v_pool [slots,
// kv_heads, head_dim]; slots [rows].
void rope_write_kv(Dtype dtype, const void* qkv, const std::int64_t* positions, const float* inv_freq,
                   const void* q_norm, const void* k_norm, float eps, void* q_out, void* k_pool, void* v_pool,
                   const std::int64_t* slots, int rows, int heads, int kv_heads, int head_dim, cudaStream_t stream);

// Bytes of float workspace paged_attention needs for these sizes (0 when one pass suffices).
std::size_t paged_attention_workspace_bytes(int rows, int heads, int kv_heads, int head_dim, int max_blocks,
                                            int block_size);

// Int32 counters paged_attention needs for these sizes: one per (row, kv head, chunk of the
// group's query heads), rows * kv_heads * chunks, at most rows * heads (0 for sizes it rejects).
std::size_t paged_attention_counters(int rows, int heads, int kv_heads);

// q, out [rows, heads, head_dim]; k_pool, v_pool [blocks, block_size, kv_heads, head_dim];
// block_tables [rows, max_blocks]; context_lens [rows] (>= 1). workspace: as many bytes as
// paged_attention_workspace_bytes says (may be null when that is 0). counters: at least
// paged_attention_counters(rows, heads, kv_heads) int32, all zero on entry, and all zero again
// once the kernel has run, so that one buffer serves every call and every replay of a graph
// (calls must not overlap in time: one stream). May be null when the workspace is 0 bytes. The
// launch shape depends only on the sizes passed, never on context_lens' contents, so a CUDA
// graph can capture it.
void paged_attention(Dtype dtype, const void* q, const void* k_pool, const void* v_pool,
                     const std::int32_t* block_tables, const std::int32_t* context_lens, void* out, int rows,
                     int heads, int kv_heads, int head_dim, int block_size, int max_blocks, float scale,
                     void* workspace, std::int32_t* counters, cudaStream_t stream);

// gate_up [rows, 2 * inter]; out [rows, inter].
void silu_mul(Dtype dtype, const void* gate_up, void* out, int rows, int inter, cudaStream_t stream);

// logits [rows, vocab]; uniforms [rows]; tokens [rows]; logprobs [rows]. temperature 0: greedy.
void sample_rows(Dtype dtype, const void* logits, int rows, int vocab, float temperature, const double* uniforms,
                 std::int64_t* tokens, float* logprobs, cudaStream_t stream);

}  // namespace kbrl::model::cuda
