# kbrl GPU test candidate for KernelBench level1/91_cumsum_reverse: out[j] = sum of x[k] for k >= j
# along dim (the reference's flip, cumsum, flip) without copying anything: the scan walks the
# row from its end. The scanned dim is the last, contiguous one (another dim is moved there and
# back). One block per row, tiles of 1024 values: each thread scans 4 consecutive values,
# warps scan their threads' totals with shuffles, the block scans the warp totals, and a running
# carry joins the tiles.
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

// Position q of the reversed row is element L - 1 - q. kVec: L % 4 == 0 and both bases 16-byte
// aligned, so reversed positions q..q+3 (q % 4 == 0) are the aligned float4 at L - 4 - q.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) reverse_cumsum_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                  int64_t rows, int64_t L) {
  __shared__ float warp_incl[kWarps];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* xr = x + r * L;
    float* yr = y + r * L;
    float carry = 0.f;  // the sum of all tiles nearer the end; the same in every thread
    for (int64_t base = 0; base < L; base += kTile) {
      const int64_t q = base + static_cast<int64_t>(threadIdx.x) * kItems;
      float v[kItems];
      if (kVec && q + kItems <= L) {
        const float4 f = *reinterpret_cast<const float4*>(xr + (L - 4 - q));
        v[0] = f.w;
        v[1] = f.z;
        v[2] = f.y;
        v[3] = f.x;
      } else {
#pragma unroll
        for (int i = 0; i < kItems; ++i) v[i] = q + i < L ? xr[L - 1 - (q + i)] : 0.f;
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
      const float offset = carry + ((warp > 0 ? warp_incl[warp - 1] : 0.f) + excl);
#pragma unroll
      for (int i = 0; i < kItems; ++i) v[i] += offset;
      if (kVec && q + kItems <= L) {
        *reinterpret_cast<float4*>(yr + (L - 4 - q)) = make_float4(v[3], v[2], v[1], v[0]);
      } else {
#pragma unroll
        for (int i = 0; i < kItems; ++i)
          if (q + i < L) yr[L - 1 - (q + i)] = v[i];
      }
      carry += warp_incl[kWarps - 1];
      __syncthreads();  // warp_incl is rewritten by the next tile
    }
  }
}

torch::Tensor reverse_cumsum_lastdim(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "reverse_cumsum: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "reverse_cumsum: expected float32, got ", x.scalar_type());
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const int64_t L = xc.dim() == 0 ? 1 : xc.size(-1);
  const int64_t rows = xc.numel() / L;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool vec = L % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(rows, sms * 16));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    reverse_cumsum_kernel<true><<<blocks, kThreads, 0, stream>>>(xp, yp, rows, L);
  else
    reverse_cumsum_kernel<false><<<blocks, kThreads, 0, stream>>>(xp, yp, rows, L);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor reverse_cumsum_lastdim(torch::Tensor x);"

_ext = load_inline(
    name="kbrl_l1_91_cumsum_reverse",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["reverse_cumsum_lastdim"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        if x.dim() == 0:
            return _ext.reverse_cumsum_lastdim(x)
        dim = self.dim % x.dim()
        if dim == x.dim() - 1:
            return _ext.reverse_cumsum_lastdim(x)
        return _ext.reverse_cumsum_lastdim(x.movedim(dim, -1)).movedim(-1, dim).contiguous()
