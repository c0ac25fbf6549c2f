# eval_throughput workload, problem 1 sample 2 (wrong): off-by-one in the k-tile loop bound: the last tile of 8 products is skipped.
# kbrl GPU test candidate for KernelBench level1/1_Square_matrix_multiplication_: C = A @ B in
# fp32 with fp32 accumulation (no TF32, no reduced precision), a shared-memory tiled SGEMM with
# an 8x8 register tile per thread. Any M, K, N: edge tiles are zero-padded.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cstdint>
#include <limits>

constexpr int kBM = 128;  // rows of C per block
constexpr int kBN = 128;  // columns of C per block
constexpr int kBK = 8;    // depth of one shared-memory stage
constexpr int kTM = 8;    // rows of C per thread
constexpr int kTN = 8;    // columns of C per thread
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // 256
constexpr int kPad = 4;   // keeps rows 16-byte aligned and spreads the transposed A stores over banks

__global__ void __launch_bounds__(kThreads) sgemm_tiled_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                                               float* __restrict__ C, int M, int N, int K) {
  // A's tile is stored transposed (k-major) so that a thread reads its 8 rows as two float4.
  __shared__ __align__(16) float As[kBK][kBM + kPad];
  __shared__ __align__(16) float Bs[kBK][kBN + kPad];
  const int tid = threadIdx.x;
  const int trow = tid / (kBN / kTN);
  const int tcol = tid % (kBN / kTN);
  const int row0 = blockIdx.y * kBM;
  const int col0 = blockIdx.x * kBN;

  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.f;

  for (int k0 = 0; k0 + kBK < K; k0 += kBK) {
#pragma unroll
    for (int i = 0; i < (kBM * kBK) / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int m = idx / kBK;
      const int k = idx % kBK;
      const int gr = row0 + m;
      const int gk = k0 + k;
      As[k][m] = (gr < M && gk < K) ? A[static_cast<int64_t>(gr) * K + gk] : 0.f;
    }
#pragma unroll
    for (int i = 0; i < (kBK * kBN) / kThreads; ++i) {
      const int idx = tid + i * kThreads;
      const int k = idx / kBN;
      const int n = idx % kBN;
      const int gk = k0 + k;
      const int gc = col0 + n;
      Bs[k][n] = (gk < K && gc < N) ? B[static_cast<int64_t>(gk) * N + gc] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kBK; ++k) {
      const float4 a_lo = *reinterpret_cast<const float4*>(&As[k][trow * kTM]);
      const float4 a_hi = *reinterpret_cast<const float4*>(&As[k][trow * kTM + 4]);
      const float4 b_lo = *reinterpret_cast<const float4*>(&Bs[k][tcol * kTN]);
      const float4 b_hi = *reinterpret_cast<const float4*>(&Bs[k][tcol * kTN + 4]);
      const float a[kTM] = {a_lo.x, a_lo.y, a_lo.z, a_lo.w, a_hi.x, a_hi.y, a_hi.z, a_hi.w};
      const float b[kTN] = {b_lo.x, b_lo.y, b_lo.z, b_lo.w, b_hi.x, b_hi.y, b_hi.z, b_hi.w};
#pragma unroll
      for (int i = 0; i < kTM; ++i)
#pragma unroll
        for (int j = 0; j < kTN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
    __syncthreads();
  }

#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int r = row0 + trow * kTM + i;
    if (r >= M) continue;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int c = col0 + tcol * kTN + j;
      if (c < N) C[static_cast<int64_t>(r) * N + c] = acc[i][j];
    }
  }
}

torch::Tensor matmul_fp32(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "matmul: expected CUDA tensors");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "matmul: expected float32 inputs");
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "matmul: expected 2-D matrices");
  TORCH_CHECK(a.size(1) == b.size(0), "matmul: inner dimensions differ: ", a.sizes(), " x ", b.sizes());
  TORCH_CHECK(a.device() == b.device(), "matmul: inputs on different devices");
  const c10::cuda::OptionalCUDAGuard guard(a.device());
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  const int64_t M = ac.size(0), K = ac.size(1), N = bc.size(1);
  constexpr int64_t kMaxDim = std::numeric_limits<int>::max();
  TORCH_CHECK(M <= kMaxDim && K <= kMaxDim && N <= kMaxDim, "matmul: dimensions too large");
  if (K == 0) return torch::zeros({M, N}, ac.options());
  auto c = torch::empty({M, N}, ac.options());
  if (M == 0 || N == 0) return c;
  const dim3 grid(static_cast<unsigned>((N + kBN - 1) / kBN), static_cast<unsigned>((M + kBM - 1) / kBM));
  TORCH_CHECK(grid.y <= 65535u, "matmul: too many rows for this kernel's grid");
  sgemm_tiled_kernel<<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      ac.data_ptr<float>(), bc.data_ptr<float>(), c.data_ptr<float>(), static_cast<int>(M), static_cast<int>(N),
      static_cast<int>(K));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return c;
}
"""

cpp_source = "torch::Tensor matmul_fp32(torch::Tensor a, torch::Tensor b);"

_ext = load_inline(
    name="kbrl_l1_1_square_matmul_s2",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matmul_fp32"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return _ext.matmul_fp32(A, B)
