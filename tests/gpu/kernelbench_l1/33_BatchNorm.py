# kbrl GPU test candidate for KernelBench level1/33_BatchNorm: nn.BatchNorm2d as the reference runs it,
# in training mode: each channel is normalized with its batch mean and biased variance, and the
# running statistics are updated the way torch does (momentum 0.1, unbiased variance,
# num_batches_tracked + 1). In eval mode the running statistics are used instead.
# Statistics: per-(image, channel) partial sums of x and x*x in double, combined in a fixed order,
# so the single pass loses nothing to cancellation and the result is deterministic.
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

constexpr int kThreads = 256;

// Sums of two values over the block; valid in thread 0.
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
  if (threadIdx.x == 0) {
    a = 0.0;
    b = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) {
      a += sa[w];
      b += sb[w];
    }
  }
  __syncthreads();
}

// Block (n, c) (blockIdx.x = n, blockIdx.y = c) sums the HW values of image n, channel c.
__global__ void __launch_bounds__(kThreads) partial_stats_kernel(const float* __restrict__ x, double* __restrict__ psum,
                                                                 double* __restrict__ psq, int64_t N, int64_t C,
                                                                 int64_t HW) {
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
      const float* xp = x + (n * C + c) * HW;
      double s = 0.0, q = 0.0;
      for (int64_t j = threadIdx.x; j < HW; j += kThreads) {
        const double v = static_cast<double>(xp[j]);
        s += v;
        q = fma(v, v, q);
      }
      block_sum2(s, q);
      if (threadIdx.x == 0) {
        psum[c * N + n] = s;
        psq[c * N + n] = q;
      }
    }
  }
}

// One block per channel: the batch statistics (from the partials, in a fixed order) or the running
// ones become the channel's mean, scale (invstd * weight) and shift (bias); in training the
// running statistics are updated.
__global__ void __launch_bounds__(kThreads) finalize_kernel(const double* __restrict__ psum,
                                                            const double* __restrict__ psq,
                                                            const float* __restrict__ weight,
                                                            const float* __restrict__ bias, float* running_mean,
                                                            float* running_var, const int64_t* num_batches_tracked,
                                                            float* __restrict__ mean_out, float* __restrict__ scale,
                                                            float* __restrict__ shift, int64_t N, int64_t C, int64_t count, bool training,
                                                            double momentum, double eps) {
  for (int64_t c = blockIdx.x; c < C; c += gridDim.x) {
    double mean, var;
    if (training) {
      double s = 0.0, q = 0.0;
      for (int64_t i = threadIdx.x; i < N; i += kThreads) {
        s += psum[c * N + i];
        q += psq[c * N + i];
      }
      block_sum2(s, q);
      if (threadIdx.x != 0) continue;
      mean = s / static_cast<double>(count);
      var = q / static_cast<double>(count) - mean * mean;  // biased, for normalizing
      var = var > 0.0 ? var : 0.0;
      if (running_mean != nullptr) {
        // momentum < 0 stands for None: a cumulative average over the batches seen so far.
        const double m = momentum >= 0.0 ? momentum : 1.0 / static_cast<double>(*num_batches_tracked + 1);
        const double unbiased = count > 1 ? var * static_cast<double>(count) / static_cast<double>(count - 1) : NAN;
        running_mean[c] = static_cast<float>((1.0 - m) * running_mean[c] + m * mean);
        running_var[c] = static_cast<float>((1.0 - m) * running_var[c] + m * unbiased);
      }
    } else {
      if (threadIdx.x != 0) continue;
      mean = running_mean[c];
      var = running_var[c];
    }
    const double invstd = 1.0 / sqrt(var + eps);
    const double w = weight != nullptr ? weight[c] : 1.0;
    const double b = bias != nullptr ? bias[c] : 0.0;
    mean_out[c] = static_cast<float>(mean);
    scale[c] = static_cast<float>(invstd * w);
    shift[c] = static_cast<float>(b);
  }
}

__global__ void increment_kernel(int64_t* counter) { *counter += 1; }

// y = (x - mean[c]) * scale[c] + shift[c], centred first as torch does (no cancellation when the
// mean is large next to the spread); block (n, c) as in partial_stats_kernel.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) normalize_kernel(const float* __restrict__ x, const float* __restrict__ mean,
                                                             const float* __restrict__ scale,
                                                             const float* __restrict__ shift, float* __restrict__ y,
                                                             int64_t N, int64_t C, int64_t HW) {
  for (int64_t c = blockIdx.y; c < C; c += gridDim.y) {
    const float m = mean[c];
    const float a = scale[c];
    const float b = shift[c];
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
      const int64_t base = (n * C + c) * HW;
      int64_t tail = 0;
      if (kVec) {
        const float4* x4 = reinterpret_cast<const float4*>(x + base);
        float4* y4 = reinterpret_cast<float4*>(y + base);
        for (int64_t j = threadIdx.x; j < HW / 4; j += kThreads) {
          const float4 v = x4[j];
          y4[j] = make_float4(fmaf(v.x - m, a, b), fmaf(v.y - m, a, b), fmaf(v.z - m, a, b), fmaf(v.w - m, a, b));
        }
        tail = HW / 4 * 4;
      }
      for (int64_t j = tail + threadIdx.x; j < HW; j += kThreads) y[base + j] = fmaf(x[base + j] - m, a, b);
    }
  }
}

torch::Tensor batch_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, torch::Tensor running_mean,
                                 torch::Tensor running_var, torch::Tensor num_batches_tracked, bool training,
                                 double momentum, double eps) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda() && running_mean.is_cuda() && running_var.is_cuda() &&
                  num_batches_tracked.is_cuda(),
              "batch_norm: expected CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat &&
                  running_mean.scalar_type() == at::kFloat && running_var.scalar_type() == at::kFloat,
              "batch_norm: expected float32 tensors");
  TORCH_CHECK(num_batches_tracked.scalar_type() == at::kLong && num_batches_tracked.numel() == 1,
              "batch_norm: num_batches_tracked must be one int64");
  TORCH_CHECK(x.dim() >= 2, "batch_norm: expected an (N, C, ...) input, got ", x.sizes());
  const int64_t N = x.size(0), C = x.size(1);
  TORCH_CHECK(weight.numel() == C && bias.numel() == C && running_mean.numel() == C && running_var.numel() == C,
              "batch_norm: parameters do not have ", C, " channels");
  TORCH_CHECK(running_mean.is_contiguous() && running_var.is_contiguous(),
              "batch_norm: running statistics must be contiguous (they are updated in place)");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t HW = N * C == 0 ? 0 : xc.numel() / (N * C);
  const int64_t count = N * HW;
  TORCH_CHECK(!training || count > 1, "batch_norm: expected more than 1 value per channel when training, got input ",
              x.sizes());
  if (xc.numel() == 0) return y;
  auto opts = xc.options();
  auto mean = torch::empty({C}, opts);
  auto scale = torch::empty({C}, opts);
  auto shift = torch::empty({C}, opts);
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(N, 1 << 20)), static_cast<unsigned>(std::min<int64_t>(C, 65535)));
  torch::Tensor psum, psq;
  if (training) {
    psum = torch::empty({C, N}, opts.dtype(at::kDouble));
    psq = torch::empty({C, N}, opts.dtype(at::kDouble));
    partial_stats_kernel<<<grid, kThreads, 0, stream>>>(xc.data_ptr<float>(), psum.data_ptr<double>(),
                                                         psq.data_ptr<double>(), N, C, HW);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  finalize_kernel<<<static_cast<unsigned>(std::min<int64_t>(C, 1 << 20)), kThreads, 0, stream>>>(
      training ? psum.data_ptr<double>() : nullptr, training ? psq.data_ptr<double>() : nullptr, wc.data_ptr<float>(),
      bc.data_ptr<float>(), running_mean.data_ptr<float>(), running_var.data_ptr<float>(),
      num_batches_tracked.data_ptr<int64_t>(), mean.data_ptr<float>(), scale.data_ptr<float>(), shift.data_ptr<float>(), N,
      C, count, training,
      momentum, eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  if (training) {
    increment_kernel<<<1, 1, 0, stream>>>(num_batches_tracked.data_ptr<int64_t>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
  const float* xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  const bool vec = HW % 4 == 0 && reinterpret_cast<uintptr_t>(xp) % 16 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  if (vec)
    normalize_kernel<true><<<grid, kThreads, 0, stream>>>(xp, mean.data_ptr<float>(), scale.data_ptr<float>(),
                                                          shift.data_ptr<float>(), yp, N, C, HW);
  else
    normalize_kernel<false><<<grid, kThreads, 0, stream>>>(xp, mean.data_ptr<float>(), scale.data_ptr<float>(),
                                                           shift.data_ptr<float>(), yp, N, C, HW);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = (
    "torch::Tensor batch_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, "
    "torch::Tensor running_mean, torch::Tensor running_var, torch::Tensor num_batches_tracked, bool training, "
    "double momentum, double eps);"
)

_ext = load_inline(
    name="kbrl_l1_33_batch_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["batch_norm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        # nn.BatchNorm2d(num_features)'s defaults, parameters and buffers, in its order.
        self.num_features = num_features
        self.eps = 1e-5
        self.momentum = 0.1
        self.weight = nn.Parameter(torch.ones(num_features))
        self.bias = nn.Parameter(torch.zeros(num_features))
        self.register_buffer("running_mean", torch.zeros(num_features))
        self.register_buffer("running_var", torch.ones(num_features))
        self.register_buffer("num_batches_tracked", torch.tensor(0, dtype=torch.long))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        momentum = -1.0 if self.momentum is None else float(self.momentum)
        return _ext.batch_norm_forward(x, self.weight, self.bias, self.running_mean, self.running_var,
                                       self.num_batches_tracked, self.training, momentum, self.eps)
