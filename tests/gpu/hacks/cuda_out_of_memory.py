# kbrl GPU fault candidate for examples/problems/2_GELUTanh: the honest kernel, but its forward
# first asks the GPU for 16 TiB. The allocation fails with a CUDA out-of-memory error: the
# evaluator must report out_of_memory, and the honest candidates of the same batch stay correct.
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

__device__ __forceinline__ float gelu_tanh(float v) {
  // F.gelu(approximate="tanh"): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  const float inner = 0.7978845608028654f * (v + 0.044715f * (v * v * v));
  return 0.5f * v * (1.f + tanhf(inner));
}

__global__ void gelu_tanh_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = gelu_tanh(x[i]);
}

torch::Tensor gelu_tanh_forward(torch::Tensor x) {
  TORCH_CHECK(x.is_cuda(), "gelu: expected a CUDA tensor");
  TORCH_CHECK(x.scalar_type() == at::kFloat, "gelu: expected float32, got ", x.scalar_type());
  const c10::cuda::OptionalCUDAGuard guard(x.device());
  auto xc = x.contiguous();
  auto hoard = torch::empty({int64_t(1) << 42}, xc.options());  // 16 TiB of float32
  auto y = torch::empty_like(xc);
  const int64_t n = xc.numel();
  if (n == 0) return y;
  constexpr int kThreads = 256;
  const int64_t sms = at::cuda::getCurrentDeviceProperties()->multiProcessorCount;
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, sms * 16)));
  gelu_tanh_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(xc.data_ptr<float>(), y.data_ptr<float>(), n);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
"""

cpp_source = "torch::Tensor gelu_tanh_forward(torch::Tensor x);"

_ext = load_inline(
    name="kbrl_gpu_gelu_tanh_out_of_memory",
    cpp_sources=cpp_source,
    cuda_sources=cuda_source,
    functions=["gelu_tanh_forward"],
    extra_cuda_cflags=["-O3"],
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_tanh_forward(x)
