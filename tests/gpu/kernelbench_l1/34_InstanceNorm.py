# kbrl GPU test candidate for KernelBench level1/34_InstanceNorm: nn.InstanceNorm2d(num_features) with
# its defaults (no affine parameters, no running statistics, eps 1e-5): every (image, channel) plane
# is normalized with its own mean and biased variance. One block per plane: sums of x and x*x in
# double (no cancellation in the single statistics pass), then (x - mean) * invstd.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>
#include <cmath>
#include <cstdint>

constexpr int kThreads = 512;

// Sums of two values over the block; valid in every thread.
__device__ void block_sum2(double& a, double& b) {
  __shared__ double sa[kThreads / 32], sb[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if (lane == 0) {
    sa[warp] = a;
    sb[warp] = b;
  }
  __syncthreads();
  a = 0.0;
  b = 0.0;
  for (int w = 0; w < kThreads / 32; ++w) {  // every thread, the same order
    a += sa[w];
    b += sb[w];
  }
  __syncthreads();
}

// kVec: HW % 4 == 0 and both bases 16-byte aligned, so every plane starts aligned.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) instance_norm_kernel(const float* __restrict__ x, float* __restrict__ y,
                                                                 int64_t planes, int64_t HW, double eps) {
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    const float* xp = x + plane * HW;
    float* yp = y + plane * HW;
    double s = 0.0, q = 0.0;
    int64_t tail = 0;
    if (kVec) {
      const float4* x4 = reinterpret_cast<const float4*>(xp);
      for (int64_t j = threadIdx.x; j < HW / 4; j += kThreads) {
        const float4 v = x4[j];
        const double a = v.x, b = v.y, c = v.z, d = v.w;
        s += (a + b) + (c + d);
        q += fma(a, a, b * b) + fma(c, c, d * d);
      }
      tail = HW / 4 * 4;
    }
    for (int64_t j = tail + threadIdx.x; j < HW; j += kThreads) {
      const double v = xp[j];
      s += v;
      q = fma(v, v, q);
    }
    block_sum2(s, q);
    const double mean = s / static_cast<double>(HW);
    double var = q / static_cast<double>(HW) - mean * mean;  // biased, as instance norm uses
    var = var > 0.0 ? var : 0.0;
    const float m = static_cast<float>(mean);
    const float r = static_cast<float>(1.0 / sqrt(var + eps));
    if (kVec) {
      const float4* x4 = reinterpret_cast<const float4*>(xp);
      float4* y4 = reinterpret_cast<float4*>(yp);
      for (int64_t j = threadIdx.x; j < HW / 4; j += kThreads) {
        const float4 v = x4[j];
        y4[j] = make_float4((v.x - m) * r, (v.y - m) * r, (v.z - m) * r, (v.w - m) * r);
      }
    }
    for (int64_t j = tail + threadIdx.x; j < HW; j += kThreads) yp[j] = (xp[j] - m) * r;
  }
}

torch::Tensor instance_norm_forward(torch::Tensor x, double eps) {
  TORCH_CHECK(x.is_cuda(), "instance_norm: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "instance_norm: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() == 4 || x.dim() == 3, "instance_norm: expected an (N, C, H, W) or (C, H, W) input, got ", x.sizes());
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto y = torch::empty_like(xc);
  if (xc.numel() == 0) return y;
  const int64_t HW = xc.size(-1) * xc.size(-2);
  TORCH_CHECK(HW > 1, "instance_norm: expected more than 1 spatial element per channel, got input ", x.sizes());
  const int64_t planes = xc.numel() / HW;
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool vec = HW % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>(planes, 1 << 20));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    instance_norm_kernel<true><<<blocks, kThreads, 0, stream>>>(xp, yp, planes, HW, eps);
  else
    instance_norm_kernel<false><<<blocks, kThreads, 0, stream>>>(xp, yp, planes, HW, eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor instance_norm_forward(torch::Tensor x, double eps);"

_ext = load_inline(
    name="kbrl_l1_34_instance_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["instance_norm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        # nn.InstanceNorm2d's defaults: affine=False and track_running_stats=False, so no parameters
        # or buffers, and batch statistics in training and eval alike.
        self.num_features = num_features
        self.eps = 1e-5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.instance_norm_forward(x, self.eps)
