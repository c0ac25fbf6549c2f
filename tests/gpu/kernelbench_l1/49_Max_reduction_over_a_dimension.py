# kbrl GPU test candidate for KernelBench level1/49_Max_reduction_over_a_dimension: torch.max(x, dim)[0].
# The input is viewed as (outer, R, inner). For inner > 1 a block's 32 x 8 threads take 32
# neighbouring inner columns (coalesced reads), its 8 thread rows split R and merge in shared
# memory; for inner == 1 one warp takes each contiguous row. NaN propagates as in torch: a NaN
# anywhere in the reduced values makes the result NaN.
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
#include <vector>

constexpr int kColsPerBlock = 32;
constexpr int kSplit = 8;

// The larger of the two, NaN winning (once NaN, always NaN: v > NaN is false).
__device__ __forceinline__ float max_nan(float m, float v) { return (v > m || v != v) ? v : m; }

__global__ void __launch_bounds__(kColsPerBlock * kSplit) max_middle_kernel(const float* __restrict__ x,
                                                                            float* __restrict__ y, int64_t outer,
                                                                            int64_t R, int64_t inner) {
  __shared__ float part[kSplit][kColsPerBlock];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    float m = -INFINITY;
    if (col < inner) {
      const float* p = x + o * R * inner + col;
      for (int64_t r = threadIdx.y; r < R; r += kSplit) m = max_nan(m, p[r * inner]);
    }
    part[threadIdx.y][threadIdx.x] = m;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
#pragma unroll
      for (int k = 1; k < kSplit; ++k) m = max_nan(m, part[k][threadIdx.x]);
      y[o * inner + col] = m;
    }
    __syncthreads();
  }
}

__global__ void max_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t R) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps_per_block + (threadIdx.x >> 5);
  const int64_t step = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t row = first; row < rows; row += step) {
    const float* p = x + row * R;
    float m = -INFINITY;
    for (int64_t j = lane; j < R; j += 32) m = max_nan(m, p[j]);
    for (int off = 16; off > 0; off >>= 1) m = max_nan(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0) y[row] = m;
  }
}

torch::Tensor max_dim(torch::Tensor x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "max_dim: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "max_dim: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1, "max_dim: expected at least one dimension");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  const int64_t nd = x.dim();
  TORCH_CHECK(dim >= -nd && dim < nd, "max_dim: dim ", dim, " out of range for ", nd, " dimensions");
  if (dim < 0) dim += nd;
  const int64_t R = x.size(dim);
  TORCH_CHECK(R > 0, "max_dim: cannot reduce an empty dimension");
  auto xc = x.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
  for (int64_t d = dim + 1; d < nd; ++d) inner *= xc.size(d);
  std::vector<int64_t> out_sizes;
  for (int64_t d = 0; d < nd; ++d)
    if (d != dim) out_sizes.push_back(xc.size(d));
  auto y = torch::empty(out_sizes, xc.options());
  if (y.numel() == 0) return y;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  if (inner == 1) {
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((outer + kThreads / 32 - 1) / (kThreads / 32), sms * 32);
    max_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(xp, yp, outer, R);
  } else {
    const int64_t gx = (inner + kColsPerBlock - 1) / kColsPerBlock;
    TORCH_CHECK(gx <= 0x7fffffff, "max_dim: inner extent too large");
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
    max_middle_kernel<<<grid, dim3(kColsPerBlock, kSplit), 0, stream>>>(xp, yp, outer, R, inner);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor max_dim(torch::Tensor x, int64_t dim);"

_ext = load_inline(
    name="kbrl_l1_49_max_dim",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["max_dim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.max_dim(x, self.dim)
