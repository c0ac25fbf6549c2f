# kbrl GPU test candidate for KernelBench level1/44_Average_Pooling_1D: nn.AvgPool1d(kernel_size,
# stride, padding) with its defaults (count_include_pad=True, ceil_mode=False). One thread per
# output sums its window in order and divides by the window's size counted with padding, as
# torch's kernel does; neighbouring outputs share their inputs through L1.
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
#include <vector>

// Threads run along a row's outputs (x), blocks over rows (y): no per-element division.
__global__ void avg_pool1d_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t rows, int64_t L,
                                  int64_t L_out, int64_t k, int64_t stride, int64_t pad) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (o >= L_out) return;
  int64_t start = o * stride - pad;
  int64_t end = start + k < L + pad ? start + k : L + pad;
  const int64_t pool_size = end - start;  // padding counts (count_include_pad)
  start = start > 0 ? start : 0;
  end = end < L ? end : L;
  const float divisor = static_cast<float>(pool_size);
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const float* xr = x + row * L;
    float s = 0.f;
    for (int64_t j = start; j < end; ++j) s += __ldg(xr + j);
    y[row * L_out + o] = start < end ? s / divisor : 0.f;
  }
}

torch::Tensor avg_pool1d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding) {
  TORCH_CHECK(x.is_cuda(), "avg_pool1d: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "avg_pool1d: expected float32, got ", x.scalar_type());
  TORCH_CHECK(x.dim() == 3 || x.dim() == 2, "avg_pool1d: expected a (N, C, L) or (C, L) input, got ", x.sizes());
  TORCH_CHECK(kernel_size >= 1 && stride >= 1 && padding >= 0, "avg_pool1d: invalid parameters");
  TORCH_CHECK(padding <= kernel_size / 2, "avg_pool1d: padding should be at most half of the kernel size");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  const int64_t L = xc.size(-1);
  TORCH_CHECK(L + 2 * padding >= kernel_size, "avg_pool1d: input shorter than the window");
  const int64_t L_out = (L + 2 * padding - kernel_size) / stride + 1;
  std::vector<int64_t> sizes(xc.sizes().begin(), xc.sizes().end());
  sizes.back() = L_out;
  auto y = torch::empty(sizes, xc.options());
  if (y.numel() == 0) return y;
  const int64_t rows = xc.numel() / L;
  constexpr int kThreads = 256;
  const int64_t gx = (L_out + kThreads - 1) / kThreads;
  TORCH_CHECK(gx <= 0x7fffffff, "avg_pool1d: output too long for this kernel's grid");
  const dim3 grid(static_cast<unsigned>(gx), static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  avg_pool1d_kernel<<<grid, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      xc.data_ptr<float>(), y.data_ptr<float>(), rows, L, L_out, kernel_size, stride, padding);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor avg_pool1d_forward(torch::Tensor x, int64_t kernel_size, int64_t stride, int64_t padding);"

_ext = load_inline(
    name="kbrl_l1_44_avg_pool1d",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["avg_pool1d_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int, stride: int = 1, padding: int = 0):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride  # nn.AvgPool1d's default
        self.padding = padding

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.avg_pool1d_forward(x, self.kernel_size, self.stride, self.padding)
