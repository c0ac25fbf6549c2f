# kbrl GPU test candidate for KernelBench level1/82_conv_depthwise_2D_square_input_square_kernel:
# nn.Conv2d(C, C, k, stride, padding, groups=C) (optional bias). Each output is k*k fp32 FMAs over
# its own channel; a block computes a 32 x 32 output tile of one plane from an input tile staged in
# shared memory (zero outside the image), so every input value is read from memory about once.
import math

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <algorithm>
#include <cstdint>
#include <limits>

constexpr int kTile = 32;     // output tile is kTile x kTile
constexpr int kRowsPer = 4;   // output rows per thread: a 32 x 8 thread block covers 32 x 32
constexpr int kThreadsX = 32;
constexpr int kThreadsY = kTile / kRowsPer;

struct DwArgs {
  const float* x;     // N x C x H x W
  const float* w;     // C x 1 x k x k
  const float* bias;  // C or nullptr
  float* out;         // N x C x OH x OW
  int64_t planes;     // N * C
  int C, H, W, OH, OW, k, stride, pad;
  int in_tile;        // (kTile - 1) * stride + k: the input tile's side
};

__global__ void __launch_bounds__(kThreadsX * kThreadsY) depthwise_conv2d_kernel(DwArgs p) {
  extern __shared__ float smem[];
  float* tile = smem;                        // in_tile x in_tile
  float* wk = smem + p.in_tile * p.in_tile;  // k x k
  const int tid = threadIdx.y * kThreadsX + threadIdx.x;
  const int nthreads = kThreadsX * kThreadsY;
  const int oh0 = blockIdx.y * kTile;
  const int ow0 = blockIdx.x * kTile;
  const int ih0 = oh0 * p.stride - p.pad;
  const int iw0 = ow0 * p.stride - p.pad;
  const int kk = p.k * p.k;
  for (int64_t plane = blockIdx.z; plane < p.planes; plane += gridDim.z) {
    const int c = static_cast<int>(plane % p.C);
    const float* xp = p.x + plane * p.H * p.W;
    for (int i = tid; i < kk; i += nthreads) wk[i] = p.w[static_cast<int64_t>(c) * kk + i];
    for (int i = tid; i < p.in_tile * p.in_tile; i += nthreads) {
      const int r = i / p.in_tile;
      const int s = i - r * p.in_tile;
      const int ih = ih0 + r;
      const int iw = iw0 + s;
      tile[i] = (ih >= 0 && ih < p.H && iw >= 0 && iw < p.W) ? xp[static_cast<int64_t>(ih) * p.W + iw] : 0.f;
    }
    __syncthreads();
    const int ow = ow0 + threadIdx.x;
    const float b = p.bias != nullptr ? p.bias[c] : 0.f;
    float* op = p.out + plane * p.OH * p.OW;
#pragma unroll
    for (int j = 0; j < kRowsPer; ++j) {
      const int ty = threadIdx.y + j * kThreadsY;
      const int oh = oh0 + ty;
      if (oh < p.OH && ow < p.OW) {
        const float* t = tile + (ty * p.stride) * p.in_tile + threadIdx.x * p.stride;
        float acc = 0.f;
        for (int u = 0; u < p.k; ++u)
          for (int v = 0; v < p.k; ++v) acc = fmaf(t[u * p.in_tile + v], wk[u * p.k + v], acc);
        op[static_cast<int64_t>(oh) * p.OW + ow] = p.bias != nullptr ? acc + b : acc;
      }
    }
    __syncthreads();  // the tile is refilled for the next plane
  }
}

torch::Tensor depthwise_conv2d_forward(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias,
                                       int64_t stride, int64_t padding) {
  TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "depthwise_conv2d: expected CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat, "depthwise_conv2d: expected float32");
  TORCH_CHECK(x.dim() == 4, "depthwise_conv2d: expected an NCHW input, got ", x.sizes());
  TORCH_CHECK(weight.dim() == 4 && weight.size(0) == x.size(1) && weight.size(1) == 1 && weight.size(2) == weight.size(3),
              "depthwise_conv2d: weight ", weight.sizes(), " is not (C, 1, k, k) for input ", x.sizes());
  TORCH_CHECK(x.device() == weight.device(), "depthwise_conv2d: inputs on different devices");
  TORCH_CHECK(stride >= 1 && padding >= 0, "depthwise_conv2d: invalid stride or padding");
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), k = weight.size(2);
  TORCH_CHECK(H + 2 * padding >= k && W + 2 * padding >= k, "depthwise_conv2d: input smaller than the kernel");
  const int64_t OH = (H + 2 * padding - k) / stride + 1;
  const int64_t OW = (W + 2 * padding - k) / stride + 1;
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto wc = weight.contiguous();
  torch::Tensor bc;
  if (bias.has_value() && bias->defined()) {
    TORCH_CHECK(bias->is_cuda() && bias->scalar_type() == at::kFloat && bias->numel() == C,
                "depthwise_conv2d: bias must be a float32 CUDA tensor of ", C, " values");
    bc = bias->contiguous();
  }
  auto out = torch::empty({N, C, OH, OW}, xc.options());
  if (out.numel() == 0) return out;
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  TORCH_CHECK(H <= kMaxInt && W <= kMaxInt && C <= kMaxInt && (kTile - 1) * stride + k <= 4096,
              "depthwise_conv2d: sizes too large for this kernel");
  const int in_tile = static_cast<int>((kTile - 1) * stride + k);
  const size_t smem = static_cast<size_t>(in_tile * in_tile + k * k) * sizeof(float);
  TORCH_CHECK(smem <= 227 * 1024, "depthwise_conv2d: stride and kernel too large for the shared-memory tile");
  if (smem > 48 * 1024)
    C10_CUDA_CHECK(cudaFuncSetAttribute(depthwise_conv2d_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(smem)));
  DwArgs p{xc.data_ptr<float>(), wc.data_ptr<float>(), bc.defined() ? bc.data_ptr<float>() : nullptr,
           out.data_ptr<float>(), N * C, static_cast<int>(C), static_cast<int>(H), static_cast<int>(W),
           static_cast<int>(OH), static_cast<int>(OW), static_cast<int>(k), static_cast<int>(stride),
           static_cast<int>(padding), in_tile};
  const dim3 grid(static_cast<unsigned>((OW + kTile - 1) / kTile), static_cast<unsigned>((OH + kTile - 1) / kTile),
                  static_cast<unsigned>(std::min<int64_t>(N * C, 65535)));
  TORCH_CHECK(grid.y <= 65535u, "depthwise_conv2d: output too tall for this kernel's grid");
  depthwise_conv2d_kernel<<<grid, dim3(kThreadsX, kThreadsY), smem, at::cuda::getCurrentCUDAStream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return out;
}
"""

cpp_source = (
    "torch::Tensor depthwise_conv2d_forward(torch::Tensor x, torch::Tensor weight, c10::optional<torch::Tensor> bias, "
    "int64_t stride, int64_t padding);"
)

_ext = load_inline(
    name="kbrl_l1_82_depthwise_conv2d",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["depthwise_conv2d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, kernel_size: int, stride: int = 1, padding: int = 0, bias: bool = False):
        super().__init__()
        self.stride, self.padding = stride, padding
        # nn.Conv2d(C, C, k, groups=C)'s parameters, created and initialised in the same order and
        # with the same draws (kaiming_uniform_ with a = sqrt(5), then the bias from the fan-in k*k).
        self.weight = nn.Parameter(torch.empty(in_channels, 1, kernel_size, kernel_size))
        self.bias = nn.Parameter(torch.empty(in_channels)) if bias else None
        nn.init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = kernel_size * kernel_size
            if fan_in != 0:
                bound = 1 / math.sqrt(fan_in)
                nn.init.uniform_(self.bias, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.depthwise_conv2d_forward(x, self.weight, self.bias, self.stride, self.padding)
