import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

torch::Tensor run(torch::Tensor input) {
  auto out = torch::empty_like(input);
  const float* x = input.data_ptr<float>();
  float* y = out.data_ptr<float>();
  for (int64_t i = 0; i < input.numel(); ++i) y[i] = x[i] / (1.f + std::fabs(x[i]));
  return out;
}
"""
ext = load_inline("elementwise", source, functions=["run"])


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return ext.run(x.contiguous())
