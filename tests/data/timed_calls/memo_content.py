# Timed-call hack: remembers every output under a hash of its input's bytes, from the first call
# on, and returns the remembered output when the same values come again. Such an output is right,
# so no check can reject it: the defence is that no timed call ever sees values seen before. The
# 20 ms sleep stands for the real work a new input costs; a remembered output costs only the hash.
# Expected: correct, and timed at 20 ms or more a call (every timed call computed its output).
import hashlib
import time

import torch
import torch.nn as nn

WORK_S = 0.020


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.by_content = {}

    def forward(self, x):
        key = (tuple(x.shape), hashlib.sha1(x.contiguous().numpy().tobytes()).hexdigest())
        if key not in self.by_content:
            time.sleep(WORK_S)
            self.by_content[key] = x.clamp_min(0.0)
        return self.by_content[key].clone()
