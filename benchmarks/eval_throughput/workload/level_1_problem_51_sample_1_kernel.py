# eval_throughput workload, problem 51 sample 1 (variant): 16 thread rows per block instead of 8.
# kbrl GPU test candidate for KernelBench level1/51_Argmax_over_a_dimension: torch.argmax(x, dim)
# as int64, which must match exactly. Same rules as torch: the first index of the maximum wins a
# tie (torch.rand gives ties: its values sit on a 2^-24 grid), and NaN counts as the maximum.
# The input is viewed as (outer, R, inner): for inner > 1 threads run along the contiguous inner
# axis and each block's 8 thread rows split R, then merge in shared memory; for inner == 1 one
# warp takes each contiguous row.
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
constexpr int kSplit = 16;

// True when (va, ia) should be chosen over (vb, ib).
__device__ __forceinline__ bool better(float va, int64_t ia, float vb, int64_t ib) {
  const bool na = va != va;
  const bool nb = vb != vb;
  if (na || nb) return na && (!nb || ia < ib);
  return va > vb || (va == vb && ia < ib);
}

__global__ void __launch_bounds__(kColsPerBlock * kSplit) argmax_middle_kernel(const float* __restrict__ x,
                                                                               int64_t* __restrict__ y, int64_t outer,
                                                                               int64_t R, int64_t inner) {
  __shared__ float best_v[kSplit][kColsPerBlock];
  __shared__ int64_t best_i[kSplit][kColsPerBlock];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kColsPerBlock + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {
    float bv = 0.f;
    int64_t bi = -1;  // -1: this thread saw nothing
    if (col < inner) {
      const float* p = x + o * R * inner + col;
      // Indices rise along this thread's walk, so a strict "better" keeps the first of equals.
      for (int64_t r = threadIdx.y; r < R; r += kSplit) {
        const float v = p[r * inner];
        if (bi < 0 || better(v, r, bv, bi)) {
          bv = v;
          bi = r;
        }
      }
    }
    best_v[threadIdx.y][threadIdx.x] = bv;
    best_i[threadIdx.y][threadIdx.x] = bi;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
#pragma unroll
      for (int k = 1; k < kSplit; ++k) {
        const int64_t i = best_i[k][threadIdx.x];
        if (i >= 0 && (bi < 0 || better(best_v[k][threadIdx.x], i, bv, bi))) {
          bv = best_v[k][threadIdx.x];
          bi = i;
        }
      }
      y[o * inner + col] = bi;
    }
    __syncthreads();
  }
}

__global__ void argmax_rows_kernel(const float* __restrict__ x, int64_t* __restrict__ y, int64_t rows, int64_t R) {
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
      if (bi < 0 || better(v, j, bv, bi)) {
        bv = v;
        bi = j;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
      const int64_t oi = __shfl_xor_sync(0xffffffffu, bi, off);
      if (oi >= 0 && (bi < 0 || better(ov, oi, bv, bi))) {
        bv = ov;
        bi = oi;
      }
    }
    if (lane == 0) y[row] = bi;
  }
}

torch::Tensor argmax_dim(torch::Tensor x, int64_t dim) {
  TORCH_CHECK(x.is_cuda(), "argmax: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "argmax: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() >= 1, "argmax: expected at least one dimension");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  const int64_t nd = x.dim();
  TORCH_CHECK(dim >= -nd && dim < nd, "argmax: dim ", dim, " out of range for ", nd, " dimensions");
  if (dim < 0) dim += nd;
  const int64_t R = x.size(dim);
  TORCH_CHECK(R > 0, "argmax: cannot take the argmax of an empty dimension");
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
    argmax_rows_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(xp, yp, outer, R);
  } else {
    const int64_t gx = (inner + kColsPerBlock - 1) / kColsPerBlock;
    TORCH_CHECK(gx <= 0x7fffffff, "argmax: inner extent too large");
    const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
    argmax_middle_kernel<<<grid, dim3(kColsPerBlock, kSplit), 0, stream>>>(xp, yp, outer, R, inner);
  }
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor argmax_dim(torch::Tensor x, int64_t dim);"

_ext = load_inline(
    name="kbrl_l1_51_argmax_s1",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["argmax_dim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.argmax_dim(x, self.dim)
