import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise clamp: out = torch.clamp(x, -1.0, 1.0)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp(x, -1.0, 1.0)


def get_inputs():
    return [torch.randn(64, 1024)]


def get_init_inputs():
    return []
