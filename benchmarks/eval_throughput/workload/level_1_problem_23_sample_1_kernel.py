# eval_throughput workload, problem 23 sample 1 (variant): 256 threads per block instead of 512.
# kbrl GPU test candidate for KernelBench level1/23_Softmax: softmax over dim 1 of a 2-D tensor.
# One block per row: a single read computes the row's max and sum of exponentials together
# (online rescaling), a second read writes exp(x - max) / sum.
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

// Folds (m2, s2) into (m, s): s is a sum of exp(v - m) over the values seen so far.
__device__ __forceinline__ void merge_stats(float& m, float& s, float m2, float s2) {
  const float mx = fmaxf(m, m2);
  if (mx == -INFINITY) return;  // nothing but -inf seen on either side: s stays 0
  s = s * expf(m - mx) + s2 * expf(m2 - mx);
  m = mx;
}

__device__ __forceinline__ void add_value(float& m, float& s, float v) {
  if (v > m) {
    s = s * expf(m - v) + 1.f;
    m = v;
  } else if (v != -INFINITY) {
    s += expf(v - m);  // a NaN lands here and makes the row NaN, as in torch
  }
}

// Every thread of the block returns the row's (max, sum).
__device__ void block_stats(float& m, float& s) {
  __shared__ float sh_m[kThreads / 32];
  __shared__ float sh_s[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
    const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
    merge_stats(m, s, m2, s2);
  }
  if (lane == 0) {
    sh_m[warp] = m;
    sh_s[warp] = s;
  }
  __syncthreads();
  if (warp == 0) {
    m = lane < kThreads / 32 ? sh_m[lane] : -INFINITY;
    s = lane < kThreads / 32 ? sh_s[lane] : 0.f;
    for (int o = 16; o > 0; o >>= 1) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
      const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
      merge_stats(m, s, m2, s2);
    }
    if (lane == 0) {
      sh_m[0] = m;
      sh_s[0] = s;
    }
  }
  __syncthreads();
  m = sh_m[0];
  s = sh_s[0];
  __syncthreads();  // the shared slots are reused by the next row
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) softmax_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float m = -INFINITY, s = 0.f;
    if (kVec) {
      const float4* x4 = reinterpret_cast<const float4*>(xr);
      for (int64_t j = threadIdx.x; j < cols / 4; j += kThreads) {
        const float4 v = x4[j];
        add_value(m, s, v.x);
        add_value(m, s, v.y);
        add_value(m, s, v.z);
        add_value(m, s, v.w);
      }
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += kThreads) add_value(m, s, xr[j]);
    }
    block_stats(m, s);
    const float inv = 1.f / s;
    if (kVec) {
      const float4* x4 = reinterpret_cast<const float4*>(xr);
      float4* y4 = reinterpret_cast<float4*>(yr);
      for (int64_t j = threadIdx.x; j < cols / 4; j += kThreads) {
        float4 v = x4[j];
        v.x = expf(v.x - m) * inv;
        v.y = expf(v.y - m) * inv;
        v.z = expf(v.z - m) * inv;
        v.w = expf(v.w - m) * inv;
        y4[j] = v;
      }
    } else {
      for (int64_t j = threadIdx.x; j < cols; j += kThreads) yr[j] = expf(xr[j] - m) * inv;
    }
  }
}

// Softmax over the last dimension of a contiguous float tensor viewed as (rows, cols).
torch::Tensor softmax_lastdim(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "softmax: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "softmax: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1, "softmax: expected at least one dimension");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t cols = xc.size(-1);
  if (xc.numel() == 0) return y;
  const int64_t rows = xc.numel() / cols;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool vec = cols % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  const int64_t max_blocks = static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 32;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, max_blocks));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    softmax_rows_kernel<true><<<blocks, kThreads, 0, stream>>>(xp, yp, rows, cols);
  else
    softmax_rows_kernel<false><<<blocks, kThreads, 0, stream>>>(xp, yp, rows, cols);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor softmax_lastdim(torch::Tensor x);"

_ext = load_inline(
    name="kbrl_l1_23_softmax_s1",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["softmax_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The reference normalizes over dim 1; for a 2-D input that is the last, contiguous one.
        if x.dim() == 2:
            return _ext.softmax_lastdim(x)
        return _ext.softmax_lastdim(x.movedim(1, -1)).movedim(-1, 1).contiguous()
