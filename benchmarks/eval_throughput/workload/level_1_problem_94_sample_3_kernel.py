# eval_throughput workload, problem 94 sample 3 (compile_error): function called with too many arguments.
# kbrl GPU test candidate for KernelBench level1/94_MSELoss: mean((p - t)^2) over ~1e9 values,
# returned as a 0-dim float32 tensor. Each block writes its partial sum (float per thread, double
# across the block) and one block adds the partials in a fixed order: deterministic, and far more
# accurate than the 1e-4 tolerance needs.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/ExpandUtils.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>
#include <cstdint>
#include <limits>

constexpr int kThreads = 256;

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
  return total;
}

__device__ __forceinline__ float sq_diff(float p, float t) {
  const float d = p - t;
  return d * d;
}

template <bool kVec>
__global__ void __launch_bounds__(kThreads) mse_partial_kernel(const float* __restrict__ p, const float* __restrict__ t,
                                                               double* __restrict__ partials, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  float s = 0.f;
  int64_t tail = 0;
  if (kVec) {
    const float4* p4 = reinterpret_cast<const float4*>(p);
    const float4* t4 = reinterpret_cast<const float4*>(t);
    for (int64_t i = first; i < n / 4; i += stride) {
      const float4 a = p4[i];
      const float4 b = t4[i];
      s += (sq_diff(a.x, b.x) + sq_diff(a.y, b.y)) + (sq_diff(a.z, b.z) + sq_diff(a.w, b.w));
    }
    tail = n / 4 * 4;
  }
  for (int64_t i = tail + first; i < n; i += stride) s += sq_diff(p[i], t[i]);
  const double total = block_sum(static_cast<double>(s), kThreads);
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads) mean_of_partials_kernel(const double* __restrict__ partials, int count,
                                                                    int64_t n, float* __restrict__ out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) s += partials[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) *out = static_cast<float>(total / static_cast<double>(n));
}

torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets) {
  TORCH_CHECK(predictions.is_cuda() && targets.is_cuda(), "mse: expected CUDA tensors");
  TORCH_CHECK(predictions.scalar_type() == at::kFloat && targets.scalar_type() == at::kFloat,
              "mse: expected float32 tensors");
  const c10::cuda::OptionalCUDAGuard guard(predictions.device());
  // Broadcasting as in (p - t): same-shape inputs (the problem's case) are read in place.
  torch::Tensor p = predictions, t = targets;
  if (p.sizes() != t.sizes()) {
    const auto shape = at::infer_size(p.sizes(), t.sizes());
    p = p.expand(shape);
    t = t.expand(shape);
  }
  p = p.contiguous();
  t = t.contiguous();
  const int64_t n = p.numel();
  auto out = torch::empty({}, p.options());
  if (n == 0) return out.fill_(std::numeric_limits<float>::quiet_NaN());  // mean of nothing, as torch
  const float* pp = p.data_ptr<float>();
  const float* tp = t.data_ptr<float>();
  const bool vec = reinterpret_cast<uintptr_t>(pp) % 16 == 0 && reinterpret_cast<uintptr_t>(tp) % 16 == 0;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t work = vec ? (n + 3) / 4 : n;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, sms * 8)));
  auto partials = torch::empty({blocks}, p.options().dtype(at::kDouble));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    mse_partial_kernel<true><<<blocks, kThreads, 0, stream>>>(pp, tp, partials.data_ptr<double>(), n);
  else
    mse_partial_kernel<false><<<blocks, kThreads, 0, stream>>>(pp, tp, partials.data_ptr<double>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  mean_of_partials_kernel<<<1, kThreads, 0, stream>>>(partials.data_ptr<double>(), blocks, n, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = "torch::Tensor mse_forward(torch::Tensor predictions, torch::Tensor targets);"

_ext = load_inline(
    name="kbrl_l1_94_mse_loss_s3",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["mse_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return _ext.mse_forward(predictions, targets)
