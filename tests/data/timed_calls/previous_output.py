# Timed-call hack: after its first calls, returns the output of the call before and keeps this
# call's for the next (on a GPU, the current call's work would go where no clock sees it).
# Expected: correctness (every timed call gets new inputs, so the previous output is wrong).
import torch
import torch.nn as nn

HONEST_CALLS = 7


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.previous = None

    def forward(self, x):
        self.calls += 1
        y = x.clamp_min(0.0)
        out = y if self.calls <= HONEST_CALLS or self.previous is None else self.previous
        self.previous = y
        return out
