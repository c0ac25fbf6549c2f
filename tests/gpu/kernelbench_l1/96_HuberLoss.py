# kbrl GPU test candidate for KernelBench level1/96_HuberLoss: F.smooth_l1_loss(predictions, targets)
# with its defaults (beta 1, reduction 'mean'). Each element's term is computed in fp32 as torch
# does; the sum runs in double (per-thread partials, then the blocks' partials in a fixed order),
# so the mean of a billion terms is exact to fp32 rounding and deterministic.
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

__device__ __forceinline__ float smooth_l1(float x, float y, float beta) {
  const float z = fabsf(x - y);
  return z < beta ? 0.5f * z * z / beta : z - 0.5f * beta;
}

__device__ double block_sum(double v) {
  __shared__ double warp_sums[kThreads / 32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0)
    for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
  __syncthreads();
  return total;
}

// kVec: both bases 16-byte aligned.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) partial_kernel(const float* __restrict__ x, const float* __restrict__ y,
                                                           double* __restrict__ partials, int64_t n, float beta) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  double s = 0.0;
  int64_t tail = 0;
  if (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    for (int64_t i = first; i < n / 4; i += stride) {
      const float4 a = x4[i];
      const float4 b = y4[i];
      s += static_cast<double>(smooth_l1(a.x, b.x, beta)) + static_cast<double>(smooth_l1(a.y, b.y, beta)) +
           static_cast<double>(smooth_l1(a.z, b.z, beta)) + static_cast<double>(smooth_l1(a.w, b.w, beta));
    }
    tail = n / 4 * 4;
  }
  for (int64_t i = tail + first; i < n; i += stride) s += static_cast<double>(smooth_l1(x[i], y[i], beta));
  const double total = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads) finish_kernel(const double* __restrict__ partials, int parts, int64_t n,
                                                          float* __restrict__ out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < parts; i += kThreads) s += partials[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) *out = static_cast<float>(total / static_cast<double>(n));
}

torch::Tensor smooth_l1_loss_mean(torch::Tensor predictions, torch::Tensor targets, double beta) {
  TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "smooth_l1_loss: expected CUDA tensors");
  TORCH_CHECK(predictions.scalar_type() == at::kFloat && targets.scalar_type() == at::kFloat,
              "smooth_l1_loss: expected float32 tensors");
  TORCH_CHECK(predictions.sizes() == targets.sizes(), "smooth_l1_loss: shapes differ: ", predictions.sizes(), " and ",
              targets.sizes());
  TORCH_CHECK(predictions.device() == targets.device(), "smooth_l1_loss: inputs on different devices");
  TORCH_CHECK(beta > 0.0, "smooth_l1_loss: this kernel needs beta > 0");
  const c10::cuda::OptionalCUDAGuard guard(predictions.device());
  auto pc = predictions.contiguous();
  auto tc = targets.contiguous();
  auto out = torch::empty({}, pc.options());
  const int64_t n = pc.numel();
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n / 4 + kThreads - 1) / kThreads, sms * 8)));
  auto partials = torch::empty({parts}, pc.options().dtype(at::kDouble));
  const float* xp = pc.data_ptr<float>();
  const float* yp = tc.data_ptr<float>();
  const bool vec = reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  if (vec)
    partial_kernel<true><<<parts, kThreads, 0, stream>>>(xp, yp, partials.data_ptr<double>(), n, static_cast<float>(beta));
  else
    partial_kernel<false><<<parts, kThreads, 0, stream>>>(xp, yp, partials.data_ptr<double>(), n, static_cast<float>(beta));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // n == 0 gives 0 / 0 = NaN, as torch's mean of nothing does.
  finish_kernel<<<1, kThreads, 0, stream>>>(partials.data_ptr<double>(), parts, n, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = "torch::Tensor smooth_l1_loss_mean(torch::Tensor predictions, torch::Tensor targets, double beta);"

_ext = load_inline(
    name="kbrl_l1_96_huber_loss",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["smooth_l1_loss_mean"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.beta = 1.0  # F.smooth_l1_loss's default, which the reference uses

    def forward(self, predictions, targets):
        return _ext.smooth_l1_loss_mean(predictions, targets, self.beta)
