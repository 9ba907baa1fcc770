"""Stage timing of the decode loop: wall-clock laps that mean the same on CPU and CUDA.

On CUDA kernels run asynchronously, so a lap that did not wait for them would charge a stage's
work to whichever later stage synchronizes first; `StageTimer` synchronizes the device at every
boundary. The decode loop, replay and the cost measurements share it, so their stage times are
comparable.
"""

import time

import torch


class StageTimer:
    """Wall-clock stage times; synchronizes the GPU at each boundary on CUDA."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.t = self.now()

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    def lap(self) -> float:
        t, self.t = self.t, self.now()
        return self.t - t
