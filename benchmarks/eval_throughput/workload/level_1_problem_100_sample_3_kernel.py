# eval_throughput workload, problem 100 sample 3 (compile_error): member function used without calling it.
# kbrl GPU test candidate for KernelBench level1/100_HingeLoss: mean(clamp(1 - p * t, min=0)).
# The problem broadcasts targets of shape (D,) against predictions of shape (B, D): the kernel
# walks (rows, D) and reads the targets row with a row stride of 0 instead of materializing the
# broadcast. Partial sums per block, then one block adds them in double in a fixed order.
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

__device__ __forceinline__ float hinge(float p, float t) {
  // Rounded product first, as the reference computes p * t before 1 - (.); NaN stays NaN.
  const float v = 1.f - __fmul_rn(p, t);
  return v < 0.f ? 0.f : v;
}

// p is (rows, D) contiguous; the targets of row r start at t + r * t_row_stride (0: broadcast).
template <bool kVec>
__global__ void __launch_bounds__(kThreads) hinge_partial_kernel(const float* __restrict__ p, const float* __restrict__ t,
                                                                 double* __restrict__ partials, int64_t rows,
                                                                 int64_t D, int64_t t_row_stride) {
  float s = 0.f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* pr = p + r * D;
    const float* tr = t + r * t_row_stride;
    int64_t tail = 0;
    if (kVec) {
      const float4* p4 = reinterpret_cast<const float4*>(pr);
      const float4* t4 = reinterpret_cast<const float4*>(tr);
      for (int64_t j = threadIdx.x; j < D / 4; j += kThreads) {
        const float4 a = p4[j];
        const float4 b = t4[j];
        s += (hinge(a.x, b.x) + hinge(a.y, b.y)) + (hinge(a.z, b.z) + hinge(a.w, b.w));
      }
      tail = D / 4 * 4;
    }
    for (int64_t j = tail + threadIdx.x; j < D; j += kThreads) s += hinge(pr[j], tr[j]);
  }
  const double total = block_sum(static_cast<double>(s));
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads) mean_of_partials_kernel(const double* __restrict__ partials, int count,
                                                                    int64_t n, float* __restrict__ out) {
  double s = 0.0;
  for (int i = threadIdx.x; i < count; i += kThreads) s += partials[i];
  const double total = block_sum(s);
  if (threadIdx.x == 0) *out = static_cast<float>(total / static_cast<double>(n));
}

torch::Tensor hinge_forward(torch::Tensor predictions, torch::Tensor targets) {
  TORCH_CHECK(predictions.is_cuda && targets.is_cuda(), "hinge: expected CUDA tensors");
  TORCH_CHECK(predictions.scalar_type() == at::kFloat && targets.scalar_type() == at::kFloat,
              "hinge: expected float32 tensors");
  const c10::cuda::OptionalCUDAGuard guard(predictions.device());
  const auto shape = at::infer_size(predictions.sizes(), targets.sizes());
  torch::Tensor p, t;
  int64_t t_row_stride;
  const int64_t D = shape.empty() ? 1 : shape.back();
  if (predictions.sizes() == shape && targets.sizes() == shape) {
    p = predictions.contiguous();
    t = targets.contiguous();
    t_row_stride = D;
  } else if (predictions.sizes() == shape && targets.dim() == 1 && targets.size(0) == D) {
    p = predictions.contiguous();
    t = targets.contiguous();
    t_row_stride = 0;  // the problem's case: one row of targets for every row of predictions
  } else {
    p = predictions.expand(shape).contiguous();
    t = targets.expand(shape).contiguous();
    t_row_stride = D;
  }
  const int64_t n = p.numel();
  auto out = torch::empty({}, p.options());
  if (n == 0) return out.fill_(std::numeric_limits<float>::quiet_NaN());  // mean of nothing, as torch
  const int64_t rows = n / D;
  const float* pp = p.data_ptr<float>();
  const float* tp = t.data_ptr<float>();
  const bool vec = D % 4 == 0 && reinterpret_cast<uintptr_t>(pp) % 16 == 0 && reinterpret_cast<uintptr_t>(tp) % 16 == 0;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(rows, sms * 8)));
  auto partials = torch::empty({blocks}, p.options().dtype(at::kDouble));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    hinge_partial_kernel<true><<<blocks, kThreads, 0, stream>>>(pp, tp, partials.data_ptr<double>(), rows, D, t_row_stride);
  else
    hinge_partial_kernel<false><<<blocks, kThreads, 0, stream>>>(pp, tp, partials.data_ptr<double>(), rows, D, t_row_stride);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  mean_of_partials_kernel<<<1, kThreads, 0, stream>>>(partials.data_ptr<double>(), blocks, n, out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = "torch::Tensor hinge_forward(torch::Tensor predictions, torch::Tensor targets);"

_ext = load_inline(
    name="kbrl_l1_100_hinge_loss_s3",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["hinge_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return _ext.hinge_forward(predictions, targets)
