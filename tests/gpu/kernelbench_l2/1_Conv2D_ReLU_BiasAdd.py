# kbrl GPU test candidate for KernelBench level2/1_Conv2D_ReLU_BiasAdd: the convolution stays
# PyTorch's (cuDNN); ReLU and the bias add are one pass of a CUDA kernel over the convolution's
# output, in place. A legitimate level-2 answer under the `kernelbench` and `fusion` static-check
# policies, refused under `strict` (docs/static-checks.md, "Policies").
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <algorithm>
#include <cstdint>

// NaN stays NaN, as torch.relu leaves it.
__device__ __forceinline__ float relu(float v) { return v < 0.f ? 0.f : v; }

// y[n, c, h, w] = relu(y) + bias[c], over a contiguous NCHW tensor; kVec handles four
// elements of one plane at a time (the caller checked that a plane is a multiple of four long
// and that the pointer is 16-byte aligned).
template <bool kVec>
__global__ void relu_bias_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t n,
                                 int64_t plane, int64_t channels) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (kVec) {
    float4* y4 = reinterpret_cast<float4*>(y);
    const int64_t n4 = n / 4, plane4 = plane / 4;
    for (int64_t i = first; i < n4; i += stride) {
      const float b = bias[(i / plane4) % channels];
      float4 v = y4[i];
      v.x = relu(v.x) + b;
      v.y = relu(v.y) + b;
      v.z = relu(v.z) + b;
      v.w = relu(v.w) + b;
      y4[i] = v;
    }
  } else {
    for (int64_t i = first; i < n; i += stride) {
      y[i] = relu(y[i]) + bias[(i / plane) % channels];
    }
  }
}

torch::Tensor relu_bias_(torch::Tensor y, torch::Tensor bias) {
  TORCH_CHECK(y.is_cuda() && bias.is_cuda(), "relu_bias_: expected CUDA tensors");
  TORCH_CHECK(y.scalar_type() == at::kFloat && bias.scalar_type() == at::kFloat, "relu_bias_: expected float32");
  TORCH_CHECK(y.dim() == 4 && y.is_contiguous(), "relu_bias_: expected a contiguous NCHW tensor");
  TORCH_CHECK(bias.numel() == y.size(1), "relu_bias_: one bias per channel");
  const c10::cuda::OptionalCUDAGuard guard(y.device());
  auto b = bias.contiguous();
  const int64_t n = y.numel();
  if (n == 0) return y;
  const int64_t plane = y.size(2) * y.size(3);
  float* yp = y.data_ptr<float>();
  const bool vec = plane % 4 == 0 && reinterpret_cast<uintptr_t>(yp) % 16 == 0;
  constexpr int kThreads = 256;
  const int64_t work = vec ? n / 4 : n;
  const int64_t max_blocks = static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 16;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((work + kThreads - 1) / kThreads, max_blocks)));
  cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  if (vec)
    relu_bias_kernel<true><<<blocks, kThreads, 0, stream>>>(yp, b.data_ptr<float>(), n, plane, y.size(1));
  else
    relu_bias_kernel<false><<<blocks, kThreads, 0, stream>>>(yp, b.data_ptr<float>(), n, plane, y.size(1));
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor relu_bias_(torch::Tensor y, torch::Tensor bias);"

_ext = load_inline(
    name="kbrl_l2_1_conv_relu_bias",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["relu_bias_"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, bias_shape):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        y = self.conv(x).contiguous()
        return _ext.relu_bias_(y, self.bias.view(-1))
