# Timed-call hack: does the work for its first calls only (as many as the correctness trials and
# input families of the test), then returns its output buffer without computing it, betting that
# only the first calls are checked. Expected: correctness (a checked timed call is wrong).
import torch
import torch.nn as nn

HONEST_CALLS = 7


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls <= HONEST_CALLS:
            return x.clamp_min(0.0)
        return torch.empty_like(x)
