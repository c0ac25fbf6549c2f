# kbrl GPU test candidate for KernelBench level1/40_LayerNorm: nn.LayerNorm(normalized_shape) with
# its affine weight and bias. Rows here are few and huge (16 rows of 64*256*256 values), so each
# row is split over many blocks: block partial sums (then partial sums of squared deviations from
# the mean) go to a buffer and are combined in double precision in a fixed order, so the result
# is deterministic and the variance is a true two-pass one.
import numbers

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

// Sum over the block; the result is valid in thread 0.
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

// The sum of one row's P partials, the same order in every block; valid in every thread.
__device__ double row_total(const double* __restrict__ partials, int64_t row, int P) {
  __shared__ double total;
  if (threadIdx.x < 32) {
    double s = 0.0;
    for (int i = threadIdx.x; i < P; i += 32) s += partials[row * P + i];
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (threadIdx.x == 0) total = s;
  }
  __syncthreads();
  const double t = total;
  __syncthreads();
  return t;
}

struct Chunk {
  int64_t row, begin, end;
};

__device__ __forceinline__ Chunk my_chunk(int64_t N, int P) {
  const int64_t row = blockIdx.x / P;
  const int64_t part = blockIdx.x % P;
  const int64_t len = (N + P - 1) / P;
  const int64_t begin = part * len;
  const int64_t end = begin + len < N ? begin + len : N;
  return {row, begin, end};
}

__global__ void __launch_bounds__(kThreads) partial_sum_kernel(const float* __restrict__ x, double* __restrict__ sums,
                                                               int64_t N, int P) {
  const Chunk c = my_chunk(N, P);
  const float* xr = x + c.row * N;
  float s = 0.f;
  for (int64_t j = c.begin + threadIdx.x; j < c.end; j += kThreads) s += xr[j];
  const double total = block_sum(static_cast<double>(s));
  if (threadIdx.x == 0) sums[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads) partial_m2_kernel(const float* __restrict__ x,
                                                              const double* __restrict__ sums,
                                                              double* __restrict__ m2, int64_t N, int P) {
  const Chunk c = my_chunk(N, P);
  const float mean = static_cast<float>(row_total(sums, c.row, P) / static_cast<double>(N));
  const float* xr = x + c.row * N;
  float s = 0.f;
  for (int64_t j = c.begin + threadIdx.x; j < c.end; j += kThreads) {
    const float d = xr[j] - mean;
    s += d * d;
  }
  const double total = block_sum(static_cast<double>(s));
  if (threadIdx.x == 0) m2[blockIdx.x] = total;
}

__global__ void __launch_bounds__(kThreads) normalize_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                             const float* __restrict__ b,
                                                             const double* __restrict__ sums,
                                                             const double* __restrict__ m2, float* __restrict__ y,
                                                             int64_t N, int P, double eps) {
  const Chunk c = my_chunk(N, P);
  const double mean_d = row_total(sums, c.row, P) / static_cast<double>(N);
  const double var = row_total(m2, c.row, P) / static_cast<double>(N);  // biased, as LayerNorm uses
  const float mean = static_cast<float>(mean_d);
  const float rstd = static_cast<float>(1.0 / sqrt(var + eps));
  const float* xr = x + c.row * N;
  float* yr = y + c.row * N;
  for (int64_t j = c.begin + threadIdx.x; j < c.end; j += kThreads) yr[j] = (xr[j] - mean) * rstd * w[j] + b[j];
}

torch::Tensor layer_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda() && bias.is_cuda(), "layer_norm: expected CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat,
              "layer_norm: expected float32 tensors");
  TORCH_CHECK(weight.sizes() == bias.sizes(), "layer_norm: weight and bias shapes differ");
  const int64_t nd = weight.dim();
  TORCH_CHECK(x.dim() >= nd, "layer_norm: input has fewer dimensions than normalized_shape");
  for (int64_t d = 0; d < nd; ++d)
    TORCH_CHECK(x.size(x.dim() - nd + d) == weight.size(d), "layer_norm: input shape ", x.sizes(),
                " does not end with normalized_shape ", weight.sizes());
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  auto bc = bias.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t N = wc.numel();
  if (xc.numel() == 0) return y;
  const int64_t rows = xc.numel() / N;
  // Enough blocks to fill the GPU, but at least ~4 values per thread in each block.
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int64_t want = (sms * 8 + rows - 1) / rows;
  const int64_t most = std::max<int64_t>(1, N / (kThreads * 4));
  const int P = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, most, 65536})));
  const int64_t blocks = rows * P;
  TORCH_CHECK(blocks <= 0x7fffffff, "layer_norm: too many rows");
  auto sums = torch::empty({blocks}, xc.options().dtype(at::kDouble));
  auto m2 = torch::empty({blocks}, xc.options().dtype(at::kDouble));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const unsigned grid = static_cast<unsigned>(blocks);
  partial_sum_kernel<<<grid, kThreads, 0, stream>>>(xc.data_ptr<float>(), sums.data_ptr<double>(), N, P);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  partial_m2_kernel<<<grid, kThreads, 0, stream>>>(xc.data_ptr<float>(), sums.data_ptr<double>(),
                                                   m2.data_ptr<double>(), N, P);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  normalize_kernel<<<grid, kThreads, 0, stream>>>(xc.data_ptr<float>(), wc.data_ptr<float>(), bc.data_ptr<float>(),
                                                  sums.data_ptr<double>(), m2.data_ptr<double>(),
                                                  y.data_ptr<float>(), N, P, eps);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor layer_norm_forward(torch::Tensor x, torch::Tensor weight, torch::Tensor bias, double eps);"

_ext = load_inline(
    name="kbrl_l1_40_layer_norm",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["layer_norm_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        if isinstance(normalized_shape, numbers.Integral):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(int(s) for s in normalized_shape)
        self.eps = 1e-5  # nn.LayerNorm's default, which the reference uses
        # nn.LayerNorm's initial affine parameters: weight ones, bias zeros.
        self.weight = nn.Parameter(torch.ones(self.normalized_shape))
        self.bias = nn.Parameter(torch.zeros(self.normalized_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.layer_norm_forward(x, self.weight, self.bias, self.eps)
