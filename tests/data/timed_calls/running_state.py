# Timed-call hack: keeps a state across calls that leaks into its outputs after its first calls
# (an accumulator that is no longer cleared, say), by a hundredth more every call. Expected:
# correctness (the checked timed calls drift away from the reference).
import torch
import torch.nn as nn

HONEST_CALLS = 7


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.drift = 0.0

    def forward(self, x):
        self.calls += 1
        if self.calls > HONEST_CALLS:
            self.drift += 0.01
        return x.clamp_min(0.0) + self.drift
