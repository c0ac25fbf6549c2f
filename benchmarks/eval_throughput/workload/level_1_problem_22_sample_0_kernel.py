# kbrl GPU test candidate for KernelBench level1/22_Tanh: an honest elementwise CUDA kernel.
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

struct TanhOp {
  __device__ __forceinline__ float operator()(float v) const { return tanhf(v); }
};

// Grid-stride over n elements; kVec reads and writes float4 (caller checked 16-byte alignment).
template <bool kVec, typename Op>
__global__ void unary_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n, Op op) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  int64_t tail_start = 0;
  if (kVec) {
    const int64_t n4 = n / 4;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    float4* y4 = reinterpret_cast<float4*>(y);
    for (int64_t i = first; i < n4; i += stride) {
      float4 v = x4[i];
      v.x = op(v.x);
      v.y = op(v.y);
      v.z = op(v.z);
      v.w = op(v.w);
      y4[i] = v;
    }
    tail_start = n4 * 4;
  }
  for (int64_t i = tail_start + first; i < n; i += stride) y[i] = op(x[i]);
}

torch::Tensor tanh_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "tanh_forward: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "tanh_forward: expected float32, got ", x.scalar_type());
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  if (n == 0) return y;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool vec = (reinterpret_cast<uintptr_t>(xp) % 16 == 0) && (reinterpret_cast<uintptr_t>(yp) % 16 == 0);
  constexpr int kThreads = 256;
  const int64_t work = vec ? (n + 3) / 4 : n;
  const int64_t max_blocks = static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 16;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, max_blocks)));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    unary_kernel<true><<<blocks, kThreads, 0, stream>>>(xp, yp, n, TanhOp{});
  else
    unary_kernel<false><<<blocks, kThreads, 0, stream>>>(xp, yp, n, TanhOp{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor tanh_forward(torch::Tensor x);"

_ext = load_inline(
    name="kbrl_l1_22_tanh",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["tanh_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.tanh_forward(x)
