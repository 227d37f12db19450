"""One series' captures of a 51M-value bf16 tensor through the CUDA statistics kernels, for a
profiler to look at (the third capture is a one-read capture of a warm series):

    ncu --clock-control none --kernel-name regex:hs_read_bf16 --launch-skip 2 --launch-count 1 \\
        --section SpeedOfLight --section WarpStateStats python3 tests/bench/cuda_kernel_probe.py
"""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from hookscope import _stats  # noqa: E402

step = _stats.StepStatistics(bins=64, backend="cuda")
x = torch.randn(51_380_224, device="cuda").bfloat16()
for _ in range(4):
    step.add('"module":0', x)
    step.take()
torch.cuda.synchronize()
print("probe done")
