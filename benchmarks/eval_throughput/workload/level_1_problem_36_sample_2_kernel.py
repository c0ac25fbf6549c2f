# eval_throughput workload, problem 36 sample 2 (wrong): divides the sum of squares by C - 1.
# kbrl GPU test candidate for KernelBench level1/36_RMSNorm_: x / sqrt(mean(x^2 over dim 1) + eps)
# for x of shape (B, C, *). Viewed as (B, C, S): one thread per (b, s) column walks the C values
# (stride S, so neighbouring threads read neighbouring addresses). For C <= 64 the column is kept
# in registers between the sum and the write, so x is read from memory once.
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
#include <cmath>
#include <cstdint>

constexpr int kThreads = 256;

template <int kMaxC>
__global__ void __launch_bounds__(kThreads) rms_norm_cached_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                   int64_t B, int C, int64_t S, float eps) {
  const int64_t columns = B * S;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < columns; col += stride) {
    const int64_t b = col / S;
    const int64_t s = col - b * S;
    const int64_t base = b * C * S + s;
    float v[kMaxC];
    float sum_sq = 0.f;
#pragma unroll
    for (int c = 0; c < kMaxC; ++c) {
      if (c < C) {
        v[c] = x[base + c * S];
        sum_sq += v[c] * v[c];
      }
    }
    const float rms = sqrtf(sum_sq / static_cast<float>(C - 1) + eps);
#pragma unroll
    for (int c = 0; c < kMaxC; ++c)
      if (c < C) y[base + c * S] = v[c] / rms;
  }
}

// Any C: two passes over the column.
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                            int64_t B, int64_t C, int64_t S, float eps) {
  const int64_t columns = B * S;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; col < columns; col += stride) {
    const int64_t b = col / S;
    const int64_t s = col - b * S;
    const int64_t base = b * C * S + s;
    float sum_sq = 0.f;
    for (int64_t c = 0; c < C; ++c) {
      const float v = x[base + c * S];
      sum_sq += v * v;
    }
    const float rms = sqrtf(sum_sq / static_cast<float>(C - 1) + eps);
    for (int64_t c = 0; c < C; ++c) y[base + c * S] = x[base + c * S] / rms;
  }
}

torch::Tensor rms_norm_dim1(torch::Tensor x, double eps) {
  TORCH_CHECK(x.is_cuda(), "rms_norm: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "rms_norm: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 2, "rms_norm: expected (batch, features, ...)");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const int64_t B = xc.size(0);
  const int64_t C = xc.size(1);
  const int64_t S = xc.numel() / (B * C);
  const int64_t columns = B * S;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((columns + kThreads - 1) / kThreads, sms * 16)));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const float e = static_cast<float>(eps);
  if (C <= 16)
    rms_norm_cached_kernel<16><<<blocks, kThreads, 0, stream>>>(xp, yp, B, static_cast<int>(C), S, e);
  else if (C <= 64)
    rms_norm_cached_kernel<64><<<blocks, kThreads, 0, stream>>>(xp, yp, B, static_cast<int>(C), S, e);
  else
    rms_norm_kernel<<<blocks, kThreads, 0, stream>>>(xp, yp, B, C, S, e);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor rms_norm_dim1(torch::Tensor x, double eps);"

_ext = load_inline(
    name="kbrl_l1_36_rms_norm_s2",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["rms_norm_dim1"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.rms_norm_dim1(x, float(self.eps))
