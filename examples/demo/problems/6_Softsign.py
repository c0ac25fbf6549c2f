import torch
import torch.nn as nn


class Model(nn.Module):
    """Elementwise softsign: out = x / (1.0 + torch.abs(x))."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / (1.0 + torch.abs(x))


def get_inputs():
    return [torch.randn(64, 1024)]


def get_init_inputs():
    return []
