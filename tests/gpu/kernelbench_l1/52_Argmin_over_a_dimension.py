# kbrl GPU test candidate for KernelBench level1/52_Argmin_over_a_dimension: torch.argmin(x, dim) as
# int64, which must match exactly. torch's rules: the first index of the minimum wins a tie
# (torch.rand's values sit on a 2^-24 grid, so ties happen) and NaN counts as the minimum (the
# first NaN wins). The input is viewed as (outer, R, inner): for inner > 1 a block's 32 x 8 threads
# take 32 neighbouring columns and its 8 thread rows split R, merging in shared memory; for
# inner == 1 one warp takes each contiguous row.
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
constexpr int kSplit = 8;

// Whether candidate (va, ia) beats the current (vb, ib); ib < 0 means nothing seen yet.
__device__ __forceinline__ bool beats(float va, int64_t ia, float vb, int64_t ib) {
  if (ib < 0) return true;
  const bool na = va != va;
  const bool nb = vb != vb;
  if (na || nb) return na && (!nb || ia < ib);
  return va < vb || (va == vb && ia < ib);
}

__global__ void __launch_bounds__(kColsPerBlock * kSplit) argmin_middle_kernel(const float* __restrict__ x,
                                                                               int64_t* __restrict__ y, int64_t outer,
                                                                               int64_t R, int64_t inner) {
  __shared__ float part_v[kSplit][kColsPerBlock];
  __shared__ int64_t part_i[kSplit][kColsPerBlock];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    float bv = 0.f;
    int64_t bi = -1;
    if (col < inner) {
      const float* p = x + o * R * inner + col;
      // Indices rise along this thread's walk, so a strict "beats" keeps the first of equals.
      for (int64_t r = threadIdx.y; r < R; r += kSplit) {
        const float v = p[r * inner];
        if (beats(v, r, bv, bi)) {
          bv = v;
          bi = r;
        }
      }
    }
    part_v[threadIdx.y][threadIdx.x] = bv;
    part_i[threadIdx.y][threadIdx.x] = bi;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
#pragma unroll
      for (int k = 1; k < kSplit; ++k) {
        const int64_t i = part_i[k][threadIdx.x];
        if (i >= 0 && beats(part_v[k][threadIdx.x], i, bv, bi)) {
          bv = part_v[k][threadIdx.x];
          bi = i;
        }
      }
      y[o * inner + col] = bi;
    }
    __syncthreads();
  }
}

__global__ void argmin_rows_kernel(const float* __restrict__ x, int64_t* __restrict__ y, int64_t rows, int64_t R) {
  const int lane = threadIdx.x & 31;
  const int64_t warps_per_block = blockDim.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * warps_per_block + (threadIdx.x >> 5);
  const int64_t step = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t row = first; row < rows; row += step) {
    const float* p = x + row * R;
    float bv = 0.f;
    int64_t bi = -1;
    for (int64_t j = lane; j < R; j += 32) {
      const float v = p[j];
      if (beats(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (oi >= 0 && beats(ov, oi, bv, bi)) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) y[row] = bi;
  }
}

torch::Tensor argmin_dim(torch::Tensor x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "argmin: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "argmin: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1, "argmin: expected at least one dimension");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  const int64_t nd = x.dim();
  TORCH_CHECK(dim >= -nd && dim < nd, "argmin: dim ", dim, " out of range for ", nd, " dimensions");
  if (dim < 0) dim += nd;
  const int64_t R = x.size(dim);
  TORCH_CHECK(R > 0, "argmin: cannot take the argmin of an empty dimension");
  auto xc = x.contiguous();
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= xc.size(d);
  for (int64_t d = dim + 1; d < nd; ++d) inner *= xc.size(d);
  std::vector<int64_t> out_sizes;
  for (int64_t d = 0; d < nd; ++d)
    if (d != dim) out_sizes.push_back(xc.size(d));
  auto y = torch::empty(out_sizes, xc.options().dtype(at::kLong));
  if (y.numel() == 0) return y;
  const float* xp = xc.data_ptr<float>();
  int64_t* yp = y.data_ptr<int64_t>();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  if (inner == 1) {
    constexpr int kThreads = 256;
    const int64_t blocks = std::min<int64_t>((outer + kThreads / 32 - 1) / (kThreads / 32), sms * 32);
    argmin_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(xp, yp, outer, R);
  } else {
    const int64_t gx = (inner + kColsPerBlock - 1) / kColsPerBlock;
    TORCH_CHECK(gx <= 0x7fffffff, "argmin: inner extent too large");
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
    argmin_middle_kernel<<<grid, dim3(kColsPerBlock, kSplit), 0, stream>>>(xp, yp, outer, R, inner);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor argmin_dim(torch::Tensor x, int64_t dim);"

_ext = load_inline(
    name="kbrl_l1_52_argmin",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["argmin_dim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.argmin_dim(x, self.dim)
