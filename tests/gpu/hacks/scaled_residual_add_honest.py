# kbrl GPU test candidate for examples/problems/1_ScaledResidualAdd: the kernel of
# side_stream_cuda.py and side_stream_torch.py, honestly launched on the current stream. With the
# static checker off, those two must not be timed faster than this one.
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
#include <cstdint>

__global__ void scaled_add_kernel(const float* __restrict__ x, const float* __restrict__ r, float* __restrict__ y,
                                  float alpha, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = x[i] + __fmul_rn(alpha, r[i]);
}

torch::Tensor scaled_residual_add(torch::Tensor x, torch::Tensor residual, double alpha) {
  TORCH_CHECK(x.is_cuda() && residual.is_cuda(), "expected CUDA tensors");
  TORCH_CHECK(x.scalar_type() == at::kFloat && residual.scalar_type() == at::kFloat, "expected float32");
  TORCH_CHECK(x.sizes() == residual.sizes(), "shapes differ");
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto rc = residual.contiguous();
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  if (n == 0) return y;
  constexpr int kThreads = 256;
  const int blocks = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
  scaled_add_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(
      xc.data_ptr<float>(), rc.data_ptr<float>(), y.data_ptr<float>(), static_cast<float>(alpha), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor scaled_residual_add(torch::Tensor x, torch::Tensor residual, double alpha);"

_ext = load_inline(
    name="kbrl_gpu_scaled_residual_add_honest",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["scaled_residual_add"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return _ext.scaled_residual_add(x, residual, float(self.alpha))
