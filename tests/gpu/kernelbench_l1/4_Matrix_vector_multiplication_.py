# kbrl GPU test candidate for KernelBench level1/4_Matrix_vector_multiplication_: C = A @ B with B a
# (K, 1) column. Memory bound (A is 8 GB): one block per row streams it with float4 loads while B
# stays in L2. Products and sums are in double (cheap on this path, and exact products), so the
# only rounding is the final one to float.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>
#include <cstdint>

constexpr int kThreads = 512;

__device__ double block_sum(double v) {
  __shared__ double warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  __syncthreads();
  return total;
}

// kVec: K % 4 == 0 and both bases 16-byte aligned, so every row of A starts aligned.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const float* __restrict__ A, const float* __restrict__ x,
                                                        float* __restrict__ y, int64_t M, int64_t K) {
  for (int64_t row = blockIdx.x; row < M; row += gridDim.x) {
    const float* a = A + row * K;
    double s = 0.0;
    int64_t tail = 0;
    if (kVec) {
      const float4* a4 = reinterpret_cast<const float4*>(a);
      const float4* x4 = reinterpret_cast<const float4*>(x);
      const int64_t k4 = K / 4;
      for (int64_t j = threadIdx.x; j < k4; j += kThreads) {
        const float4 av = a4[j];
        const float4 xv = __ldg(x4 + j);
        s = fma(static_cast<double>(av.x), static_cast<double>(xv.x), s);
        s = fma(static_cast<double>(av.y), static_cast<double>(xv.y), s);
        s = fma(static_cast<double>(av.z), static_cast<double>(xv.z), s);
        s = fma(static_cast<double>(av.w), static_cast<double>(xv.w), s);
      }
      tail = k4 * 4;
    }
    for (int64_t j = tail + threadIdx.x; j < K; j += kThreads)
      s = fma(static_cast<double>(a[j]), static_cast<double>(__ldg(x + j)), s);
    const double total = block_sum(s);
    if (threadIdx.x == 0) y[row] = static_cast<float>(total);
  }
}

torch::Tensor matvec_fp32(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.is_cuda() && b.is_cuda(), "matvec: expected CUDA tensors");
  TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "matvec: expected float32 inputs");
  TORCH_CHECK(a.dim() == 2, "matvec: A must be a matrix, got ", a.sizes());
  TORCH_CHECK((b.dim() == 2 && b.size(1) == 1) || b.dim() == 1, "matvec: B must be a (K, 1) column or a (K,) vector, got ",
              b.sizes());
  TORCH_CHECK(b.size(0) == a.size(1), "matvec: inner dimensions differ: ", a.sizes(), " x ", b.sizes());
  TORCH_CHECK(a.device() == b.device(), "matvec: inputs on different devices");
  const c10::cuda::OptionalCUDAGuard guard(a.device());
  auto ac = a.contiguous();
  auto bc = b.contiguous();
  const int64_t M = ac.size(0), K = ac.size(1);
  auto y = b.dim() == 2 ? torch::empty({M, 1}, ac.options()) : torch::empty({M}, ac.options());
  if (M == 0) return y;
  const float* ap = ac.data_ptr<float>();
  const float* bp = bc.data_ptr<float>();
  const bool vec = K % 4 == 0 && reinterpret_cast<uintptr_t>(ap) % 16 == 0 && reinterpret_cast<uintptr_t>(bp) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(M, 1 << 20));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    gemv_kernel<true><<<blocks, kThreads, 0, stream>>>(ap, bp, y.data_ptr<float>(), M, K);
  else
    gemv_kernel<false><<<blocks, kThreads, 0, stream>>>(ap, bp, y.data_ptr<float>(), M, K);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor matvec_fp32(torch::Tensor a, torch::Tensor b);"

_ext = load_inline(
    name="kbrl_l1_4_matvec",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["matvec_fp32"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return _ext.matvec_fp32(A, B)
