# eval_throughput workload, problem 89 sample 2 (wrong): the carry from earlier tiles is left out.
# kbrl GPU test candidate for KernelBench level1/89_cumsum: torch.cumsum(x, dim). The scan runs
# over the last, contiguous dimension (another dim is moved there and back). One block per row
# walks it in tiles of 1024 values: each thread scans its 4 consecutive values, warps scan their
# threads' totals with shuffles, the block scans the warp totals, and a running carry joins the
# tiles.
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

constexpr int kThreads = 256;
constexpr int kItems = 4;
constexpr int kTile = kThreads * kItems;
constexpr int kWarps = kThreads / 32;

template <bool kVec>
__global__ void __launch_bounds__(kThreads) cumsum_rows_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                               int64_t rows, int64_t L) {
  __shared__ float warp_incl[kWarps];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * L;
    float* yr = y + r * L;
    float carry = 0.f;  // sum of all earlier tiles; every thread holds the same value
    for (int64_t base = 0; base < L; base += kTile) {
      const int64_t j = base + static_cast<int64_t>(threadIdx.x) * kItems;
      float v[kItems];
      if (kVec && j + kItems <= L) {
        const float4 q = *reinterpret_cast<const float4*>(xr + j);
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
      } else {
#pragma unroll
        for (int i = 0; i < kItems; ++i) v[i] = j + i < L ? xr[j + i] : 0.f;
      }
#pragma unroll
      for (int i = 1; i < kItems; ++i) v[i] += v[i - 1];
      // Inclusive scan of the thread totals within the warp, then shifted to exclusive.
      float incl = v[kItems - 1];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float up = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += up;
      }
      float excl = __shfl_up_sync(0xffffffffu, incl, 1);
      if (lane == 0) excl = 0.f;
      if (lane == 31) warp_incl[warp] = incl;
      __syncthreads();
      if (warp == 0) {
        float w = lane < kWarps ? warp_incl[lane] : 0.f;
#pragma unroll
        for (int o = 1; o < kWarps; o <<= 1) {
          const float up = __shfl_up_sync(0xffffffffu, w, o);
          if (lane >= o) w += up;
        }
        if (lane < kWarps) warp_incl[lane] = w;
      }
      __syncthreads();
      const float offset = (warp > 0 ? warp_incl[warp - 1] : 0.f) + excl;
#pragma unroll
      for (int i = 0; i < kItems; ++i) v[i] += offset;
      if (kVec && j + kItems <= L) {
        *reinterpret_cast<float4*>(yr + j) = make_float4(v[0], v[1], v[2], v[3]);
      } else {
#pragma unroll
        for (int i = 0; i < kItems; ++i)
          if (j + i < L) yr[j + i] = v[i];
      }
      carry += warp_incl[kWarps - 1];
      __syncthreads();  // warp_incl is rewritten by the next tile
    }
  }
}

torch::Tensor cumsum_lastdim(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "cumsum: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "cumsum: expected float32, got ", x.scalar_type());
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const int64_t L = xc.dim() == 0 ? 1 : xc.size(-1);
  const int64_t rows = xc.numel() / L;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // Row starts are 16-byte aligned when the base is and L is a multiple of 4.
  const bool vec = L % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = static_cast<int>(std::min<int64_t>(rows, sms * 16));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    cumsum_rows_kernel<true><<<blocks, kThreads, 0, stream>>>(xp, yp, rows, L);
  else
    cumsum_rows_kernel<false><<<blocks, kThreads, 0, stream>>>(xp, yp, rows, L);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor cumsum_lastdim(torch::Tensor x);"

_ext = load_inline(
    name="kbrl_l1_89_cumsum_s2",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["cumsum_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 0:
            return _ext.cumsum_lastdim(x)
        dim = self.dim % x.dim()
        if dim == x.dim() - 1:
            return _ext.cumsum_lastdim(x)
        return _ext.cumsum_lastdim(x.movedim(dim, -1)).movedim(-1, dim).contiguous()
