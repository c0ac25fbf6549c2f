# Timed-call hack: remembers each output under its input's address (data_ptr) and, after its
# first calls, returns the remembered output whenever an address comes again, betting that a
# timing loop hands it the same buffers with the same values. The evaluator hands it the same
# buffers with new values every call. Expected: correctness (the output of an earlier call).
import torch
import torch.nn as nn

HONEST_CALLS = 7


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.by_address = {}

    def forward(self, x):
        self.calls += 1
        key = (x.data_ptr(), tuple(x.shape))
        if self.calls > HONEST_CALLS and key in self.by_address:
            return self.by_address[key]
        y = x.clamp_min(0.0)
        self.by_address[key] = y
        return y
