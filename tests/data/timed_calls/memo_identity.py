# Timed-call hack: remembers each output under the input tensor object itself (id) and, after its
# first calls, returns the remembered output when the same object comes again. The evaluator
# passes the same tensor objects with new values every timed call. Expected: correctness.
import torch
import torch.nn as nn

HONEST_CALLS = 7


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.by_object = {}

    def forward(self, x):
        self.calls += 1
        if self.calls > HONEST_CALLS and id(x) in self.by_object:
            return self.by_object[id(x)][1]
        y = x.clamp_min(0.0)
        self.by_object[id(x)] = (x, y)  # the input too, so its id is not reused by another object
        return y
