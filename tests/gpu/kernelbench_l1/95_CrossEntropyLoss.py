# kbrl GPU test candidate for KernelBench level1/95_CrossEntropyLoss: F.cross_entropy(logits, targets)
# with its defaults (class indices, ignore_index -100, reduction 'mean' over the rows not ignored).
# One warp per row reads it once: an online log-sum-exp (running maximum, sum rescaled when the
# maximum grows), so huge logits cannot overflow, then loss = lse - logit[target]. Row losses are
# summed in double in a fixed order. A target outside [0, C) other than -100 (an error in torch)
# gives NaN.
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
constexpr int kWarps = kThreads / 32;

// Running (max, sum of exp(x - max)) pairs. An empty pair is (-inf, 0). A NaN logit makes the sum
// NaN, and NaN stays.
struct Lse {
  float m, s;
};

__device__ __forceinline__ void lse_add(Lse& a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.f;  // (-inf, 0) becomes (x, 1): 0 * exp(-inf) = 0
    a.m = x;
  } else {
    a.s += expf(x - a.m);  // NaN x: exp(NaN) = NaN
  }
}

__device__ __forceinline__ Lse lse_merge(Lse a, Lse b) {
  if (b.m == -INFINITY) return {a.m, a.s + b.s};  // b.s is 0, or NaN to pass on
  if (a.m == -INFINITY) return {b.m, b.s + a.s};
  const float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

// Warp w of block b takes rows b * kWarps + w, then strides by the grid.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) row_loss_kernel(const float* __restrict__ logits,
                                                            const int64_t* __restrict__ targets,
                                                            double* __restrict__ row_loss, int64_t rows, int64_t C,
                                                            int64_t ignore_index) {
  const int lane = threadIdx.x & 31;
  const int64_t step = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5); row < rows; row += step) {
    const float* x = logits + row * C;
    Lse acc{-INFINITY, 0.f};
    int64_t tail = 0;
    if (kVec) {
      const float4* x4 = reinterpret_cast<const float4*>(x);
      for (int64_t j = lane; j < C / 4; j += 32) {
        const float4 v = x4[j];
        lse_add(acc, v.x);
        lse_add(acc, v.y);
        lse_add(acc, v.z);
        lse_add(acc, v.w);
      }
      tail = C / 4 * 4;
    }
    for (int64_t j = tail + lane; j < C; j += 32) lse_add(acc, x[j]);
    for (int o = 16; o > 0; o >>= 1) {
      const Lse other{__shfl_xor_sync(0xffffffffu, acc.m, o), __shfl_xor_sync(0xffffffffu, acc.s, o)};
      acc = lse_merge(acc, other);
    }
    if (lane == 0) {
      const int64_t t = targets[row];
      double loss;
      if (t == ignore_index)
        loss = 0.0;
      else if (t < 0 || t >= C)
        loss = NAN;
      else
        loss = static_cast<double>(acc.m) + log(static_cast<double>(acc.s)) - static_cast<double>(x[t]);
      row_loss[row] = loss;
    }
  }
}

// One block: the mean over the rows whose target is not ignored; 0 / 0 = NaN when all are, as in torch.
__global__ void __launch_bounds__(kThreads) mean_kernel(const double* __restrict__ row_loss,
                                                        const int64_t* __restrict__ targets, int64_t rows,
                                                        int64_t ignore_index, float* __restrict__ out) {
  __shared__ double sums[kWarps];
  __shared__ long long counts[kWarps];
  double s = 0.0;
  long long cnt = 0;
  for (int64_t i = threadIdx.x; i < rows; i += kThreads) {
    if (targets[i] == ignore_index) continue;
    s += row_loss[i];
    ++cnt;
  }
  for (int o = 16; o > 0; o >>= 1) {
    s += __shfl_xor_sync(0xffffffffu, s, o);
    cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
  }
  if ((threadIdx.x & 31) == 0) {
    sums[threadIdx.x >> 5] = s;
    counts[threadIdx.x >> 5] = cnt;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    long long n = 0;
    for (int w = 0; w < kWarps; ++w) {
      total += sums[w];
      n += counts[w];
    }
    *out = static_cast<float>(total / static_cast<double>(n));
  }
}

torch::Tensor cross_entropy_mean(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index) {
  TORCH_CHECK(logits.is_cuda() && targets.is_cuda(), "cross_entropy: expected CUDA tensors");
  TORCH_CHECK(logits.scalar_type() == at::kFloat, "cross_entropy: expected float32 logits, got ", logits.scalar_type());
  TORCH_CHECK(targets.scalar_type() == at::kLong, "cross_entropy: expected int64 class indices, got ",
              targets.scalar_type());
  TORCH_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "cross_entropy: expected logits (N, C) and targets (N,), got ", logits.sizes(), " and ", targets.sizes());
  TORCH_CHECK(logits.device() == targets.device(), "cross_entropy: inputs on different devices");
  const c10::cuda::OptionalCUDAGuard guard(logits.device());
  auto xc = logits.contiguous();
  auto tc = targets.contiguous();
  const int64_t rows = xc.size(0), C = xc.size(1);
  TORCH_CHECK(C > 0, "cross_entropy: no classes");
  auto out = torch::empty({}, xc.options());
  auto row_loss = torch::empty({std::max<int64_t>(rows, 1)}, xc.options().dtype(at::kDouble));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (rows > 0) {
    const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((rows + kWarps - 1) / kWarps, sms * 16));
    const float* xp = xc.data_ptr<float>();
    const bool vec = C % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0;
    if (vec)
      row_loss_kernel<true><<<blocks, kThreads, 0, stream>>>(xp, tc.data_ptr<int64_t>(), row_loss.data_ptr<double>(),
                                                             rows, C, ignore_index);
    else
      row_loss_kernel<false><<<blocks, kThreads, 0, stream>>>(xp, tc.data_ptr<int64_t>(), row_loss.data_ptr<double>(),
                                                              rows, C, ignore_index);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  mean_kernel<<<1, kThreads, 0, stream>>>(row_loss.data_ptr<double>(), tc.data_ptr<int64_t>(), rows, ignore_index,
                                          out.data_ptr<float>());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = "torch::Tensor cross_entropy_mean(torch::Tensor logits, torch::Tensor targets, int64_t ignore_index);"

_ext = load_inline(
    name="kbrl_l1_95_cross_entropy",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["cross_entropy_mean"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.ignore_index = -100  # F.cross_entropy's default, which the reference uses

    def forward(self, predictions, targets):
        return _ext.cross_entropy_mean(predictions, targets, self.ignore_index)
