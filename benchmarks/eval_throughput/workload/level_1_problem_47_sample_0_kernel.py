# kbrl GPU test candidate for KernelBench level1/47_Sum_reduction_over_a_dimension:
# torch.sum(x, dim, keepdim=True) for any dim. The input is viewed as (outer, R, inner) with R the
# reduced size. inner > 1: threads run along the contiguous inner axis (coalesced) and the R axis
# is split over the block's 8 thread rows, then combined in shared memory. inner == 1: one warp
# per contiguous row.
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
#include <vector>

constexpr int kColsPerBlock = 32;
constexpr int kSplit = 8;  // thread rows sharing one column's R axis

__global__ void __launch_bounds__(kColsPerBlock * kSplit) sum_middle_kernel(const float* __restrict__ x,
                                                                            float* __restrict__ y, int64_t outer,
                                                                            int64_t R, int64_t inner) {
  __shared__ float part[kSplit][kColsPerBlock + 1];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    float total = 0.f;
    if (col < inner) {
      const float* p = x + o * R * inner + col;
      // Four independent accumulators keep several loads in flight per thread.
      float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
      int64_t r = threadIdx.y;
      for (; r + 3 * kSplit < R; r += 4 * kSplit) {
        s0 += p[r * inner];
        s1 += p[(r + kSplit) * inner];
        s2 += p[(r + 2 * kSplit) * inner];
        s3 += p[(r + 3 * kSplit) * inner];
      }
      for (; r < R; r += kSplit) s0 += p[r * inner];
      total = (s0 + s1) + (s2 + s3);
    }
    part[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
      float s = 0.f;
#pragma unroll
      for (int k = 0; k < kSplit; ++k) s += part[k][threadIdx.x];
      y[o * inner + col] = s;
    }
    __syncthreads();
  }
}

// inner == 1: row r is x[r*R .. r*R+R), one warp per row.
__global__ void sum_rows_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t R) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps_per_block + (threadIdx.x >> 5);
  const int64_t step = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t row = first; row < rows; row += step) {
    const float* p = x + row * R;
    float s = 0.f;
    for (int64_t j = lane; j < R; j += 32) s += p[j];
    for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
    if (lane == 0) y[row] = s;
  }
}

torch::Tensor sum_keepdim(torch::Tensor x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "sum: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "sum: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1, "sum: expected at least one dimension");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  const int64_t nd = x.dim();
  TORCH_CHECK(dim >= -nd && dim < nd, "sum: dim ", dim, " out of range for ", nd, " dimensions");
  if (dim < 0) dim += nd;
  auto xc = x.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
  for (int64_t d = dim + 1; d < nd; ++d) inner *= xc.size(d);
  const int64_t R = xc.size(dim);
  std::vector<int64_t> out_sizes(xc.sizes().begin(), xc.sizes().end());
  out_sizes[dim] = 1;
  auto y = torch::empty(out_sizes, xc.options());
  if (y.numel() == 0) return y;
  if (R == 0) return y.zero_();
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  if (inner == 1) {
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((outer + kThreads / 32 - 1) / (kThreads / 32), sms * 32);
    sum_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(xp, yp, outer, R);
  } else {
    const int64_t gx = (inner + kColsPerBlock - 1) / kColsPerBlock;
    TORCH_CHECK(gx <= 0x7fffffff, "sum: inner extent too large");
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
    sum_middle_kernel<<<grid, dim3(kColsPerBlock, kSplit), 0, stream>>>(xp, yp, outer, R, inner);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor sum_keepdim(torch::Tensor x, int64_t dim);"

_ext = load_inline(
    name="kbrl_l1_47_sum_dim",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["sum_keepdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.sum_keepdim(x, self.dim)
