# kbrl GPU test candidate for KernelBench level1/12_Matmul_with_diagonal_matrices_: diag(A) @ B, which
# is B with row i scaled by A[i] (the reference's A.unsqueeze(1) * B). One product per element, as
# the reference computes it, so the result is exact to the same rounding; rows stream as float4.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>
#include <cstdint>

// Blocks walk the rows; kVec: M % 4 == 0 and both bases 16-byte aligned (every row is then aligned).
template <bool kVec>
__global__ void row_scale_kernel(const float* __restrict__ d, const float* __restrict__ B, float* __restrict__ C,
                                 int64_t N, int64_t M) {
  for (int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const float s = d[row];
    const float* b = B + row * M;
    float* c = C + row * M;
    int64_t tail = 0;
    if (kVec) {
      const float4* b4 = reinterpret_cast<const float4*>(b);
      float4* c4 = reinterpret_cast<float4*>(c);
      const int64_t m4 = M / 4;
      for (int64_t j = threadIdx.x; j < m4; j += blockDim.x) {
        const float4 v = b4[j];
        c4[j] = make_float4(s * v.x, s * v.y, s * v.z, s * v.w);
      }
      tail = m4 * 4;
    }
    for (int64_t j = tail + threadIdx.x; j < M; j += blockDim.x) c[j] = s * b[j];
  }
}

torch::Tensor diag_matmul(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "diag_matmul: expected CUDA tensors");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "diag_matmul: expected float32 inputs");
  TORCH_CHECK(a.dim() == 1 && b.dim() == 2 && b.size(0) == a.size(0),
              "diag_matmul: expected A of shape (N,) and B of shape (N, M), got ", a.sizes(), " and ", b.sizes());
  TORCH_CHECK(a.device() == b.device(), "diag_matmul: inputs on different devices");
  const c10::cuda::OptionalCUDAGuard guard(a.device());
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  auto c = torch::empty_like(bc);
  const int64_t N = bc.size(0), M = bc.size(1);
  if (c.numel() == 0) return c;
  const float* bp = bc.data_ptr<float>();
  float* cp = c.data_ptr<float>();
  const bool vec = M % 4 == 0 && reinterpret_cast<uintptr_t>(bp) % 16 == 0 && reinterpret_cast<uintptr_t>(cp) % 16 == 0;
  constexpr int kThreads = 256;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(N, sms * 32));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    row_scale_kernel<true><<<blocks, kThreads, 0, stream>>>(ac.data_ptr<float>(), bp, cp, N, M);
  else
    row_scale_kernel<false><<<blocks, kThreads, 0, stream>>>(ac.data_ptr<float>(), bp, cp, N, M);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return c;
}
"""

cpp_source = "torch::Tensor diag_matmul(torch::Tensor a, torch::Tensor b);"

_ext = load_inline(
    name="kbrl_l1_12_diag_matmul",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["diag_matmul"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return _ext.diag_matmul(A, B)
