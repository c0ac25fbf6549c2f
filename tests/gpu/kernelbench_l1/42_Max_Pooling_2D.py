# kbrl GPU test candidate for KernelBench level1/42_Max_Pooling_2D: nn.MaxPool2d(kernel_size, stride,
# padding, dilation) without ceil_mode. One thread per output; padding never wins (positions
# outside the image are skipped, as torch does), and NaN propagates: torch's test
# `v > max || isnan(v)` is used as is. Neighbouring outputs share their inputs through L1.
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
#include <vector>

struct PoolArgs {
  const float* x;  // planes x H x W
  float* y;        // planes x OH x OW
  int64_t planes;
  int H, W, OH, OW, k, stride, pad, dil;
};

__global__ void max_pool2d_kernel(PoolArgs p) {
  const int ow = blockIdx.x * blockDim.x + threadIdx.x;
  const int oh = blockIdx.y * blockDim.y + threadIdx.y;
  if (ow >= p.OW || oh >= p.OH) return;
  const int h0 = oh * p.stride - p.pad;
  const int w0 = ow * p.stride - p.pad;
  for (int64_t plane = blockIdx.z; plane < p.planes; plane += gridDim.z) {
    const float* xp = p.x + plane * p.H * p.W;
    float m = -INFINITY;
    for (int u = 0; u < p.k; ++u) {
      const int h = h0 + u * p.dil;
      if (h < 0 || h >= p.H) continue;
      const float* row = xp + static_cast<int64_t>(h) * p.W;
      for (int v = 0; v < p.k; ++v) {
        const int w = w0 + v * p.dil;
        if (w < 0 || w >= p.W) continue;
        const float val = __ldg(row + w);
        if (val > m || val != val) m = val;
      }
    }
    p.y[plane * p.OH * p.OW + static_cast<int64_t>(oh) * p.OW + ow] = m;
  }
}

torch::Tensor max_pool2d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding,
                                 int64_t dilation) {
  TORCH_CHECK(x.is_cuda(), "max_pool2d: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "max_pool2d: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() == 4 || x.dim() == 3, "max_pool2d: expected a (N, C, H, W) or (C, H, W) input, got ", x.sizes());
  TORCH_CHECK(kernel_size >= 1 && stride >= 1 && dilation >= 1 && padding >= 0, "max_pool2d: invalid parameters");
  TORCH_CHECK(padding <= ((kernel_size - 1) * dilation + 1) / 2, "max_pool2d: padding should be at most half of the effective kernel size");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  const int64_t H = xc.size(-2), W = xc.size(-1);
  const int64_t span = (kernel_size - 1) * dilation + 1;
  TORCH_CHECK(H + 2 * padding >= span && W + 2 * padding >= span, "max_pool2d: input smaller than the window");
  const int64_t OH = (H + 2 * padding - span) / stride + 1;
  const int64_t OW = (W + 2 * padding - span) / stride + 1;
  std::vector<int64_t> sizes(xc.sizes().begin(), xc.sizes().end());
  sizes[sizes.size() - 2] = OH;
  sizes[sizes.size() - 1] = OW;
  auto y = torch::empty(sizes, xc.options());
  if (y.numel() == 0) return y;
  constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
  TORCH_CHECK(H <= kMaxInt && W <= kMaxInt && H * stride + span <= kMaxInt && W * stride + span <= kMaxInt,
              "max_pool2d: sizes too large");
  PoolArgs p{xc.data_ptr<float>(), y.data_ptr<float>(), xc.numel() / (H * W), static_cast<int>(H), static_cast<int>(W),
             static_cast<int>(OH), static_cast<int>(OW), static_cast<int>(kernel_size), static_cast<int>(stride),
             static_cast<int>(padding), static_cast<int>(dilation)};
  const dim3 block(32, 8);
  const dim3 grid(static_cast<unsigned>((OW + 31) / 32), static_cast<unsigned>((OH + 7) / 8),
                  static_cast<unsigned>(std::min<int64_t>(p.planes, 65535)));
  TORCH_CHECK(grid.y <= 65535u, "max_pool2d: output too tall for this kernel's grid");
  max_pool2d_kernel<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(p);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = (
    "torch::Tensor max_pool2d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding, "
    "int64_t dilation);"
)

_ext = load_inline(
    name="kbrl_l1_42_max_pool2d",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["max_pool2d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int, padding: int, dilation: int):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride  # nn.MaxPool2d's default
        self.padding = padding
        self.dilation = dilation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.max_pool2d_forward(x, self.kernel_size, self.stride, self.padding, self.dilation)
