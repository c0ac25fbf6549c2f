# kbrl GPU test candidate for KernelBench level1/39_L2Norm_: x / torch.norm(x, p=2, dim=1, keepdim=True).
# The input is viewed as (outer, R, inner) around dim 1. Rows (inner == 1, the problem's 2-D case):
# one block per row sums x*x in double (no overflow or underflow of the squares for any float) and
# then divides the row. Otherwise one thread per (outer, inner) column takes the norm and a second
# kernel divides. An all-zero row gives 0/0 = NaN, as in the reference.
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

constexpr int kThreads = 512;

// What the row is divided by, from the sum of x*x over R values.
__device__ __forceinline__ float denominator(double sum_sq, int64_t) { return static_cast<float>(sqrt(sum_sq)); }

// Sum over the block; valid in every thread.
__device__ double block_sum(double v) {
  __shared__ double warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];  // every thread, the same order
  __syncthreads();
  return total;
}

__global__ void __launch_bounds__(kThreads) normalize_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                  int64_t rows, int64_t R) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* xr = x + row * R;
    float* yr = y + row * R;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < R; j += kThreads) {
      const double v = xr[j];
      s = fma(v, v, s);
    }
    const float d = denominator(block_sum(s), R);
    for (int64_t j = threadIdx.x; j < R; j += kThreads) yr[j] = xr[j] / d;
  }
}

// One thread per (outer, inner) column; neighbouring threads read neighbouring inner values.
__global__ void column_denominator_kernel(const float* __restrict__ x, float* __restrict__ d, int64_t outer, int64_t R,
                                          int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < outer * inner; i += step) {
    const int64_t o = i / inner;
    const int64_t c = i - o * inner;
    const float* p = x + o * R * inner + c;
    double s = 0.0;
    for (int64_t r = 0; r < R; ++r) {
      const double v = p[r * inner];
      s = fma(v, v, s);
    }
    d[i] = denominator(s, R);
  }
}

__global__ void divide_columns_kernel(const float* __restrict__ x, const float* __restrict__ d, float* __restrict__ y,
                                      int64_t n, int64_t R, int64_t inner) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t c = i % inner;
    const int64_t o = i / (R * inner);
    y[i] = x[i] / d[o * inner + c];
  }
}

torch::Tensor l2_normalize_dim1(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "l2_normalize: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "l2_normalize: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 2, "l2_normalize: expected at least 2 dimensions (it normalizes over dim 1), got ", x.sizes());
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const int64_t outer = xc.size(0), R = xc.size(1);
  const int64_t inner = xc.numel() / (outer * R);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  if (inner == 1) {
    normalize_rows_kernel<<<static_cast<unsigned>(std::min<int64_t>(outer, 1 << 20)), kThreads, 0, stream>>>(
        xc.data_ptr<float>(), y.data_ptr<float>(), outer, R);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
  }
  auto d = torch::empty({outer * inner}, xc.options());
  constexpr int kColThreads = 256;
  const int64_t cols = outer * inner;
  column_denominator_kernel<<<static_cast<unsigned>(std::min<int64_t>((cols + kColThreads - 1) / kColThreads, sms * 32)),
                              kColThreads, 0, stream>>>(xc.data_ptr<float>(), d.data_ptr<float>(), outer, R, inner);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  const int64_t n = xc.numel();
  divide_columns_kernel<<<static_cast<unsigned>(std::min<int64_t>((n + kColThreads - 1) / kColThreads, sms * 32)),
                          kColThreads, 0, stream>>>(xc.data_ptr<float>(), d.data_ptr<float>(), y.data_ptr<float>(), n,
                                                    R, inner);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor l2_normalize_dim1(torch::Tensor x);"

_ext = load_inline(
    name="kbrl_l1_39_l2_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["l2_normalize_dim1"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.l2_normalize_dim1(x)
