"""HookScope's CUDA launcher with the CPU standing in for a device, for tests and the host-cost
bench on machines with no GPU: a given driver (a stub), one "device" whose kernels' argument
arrays are the real ones, scratch and slots as CPU tensors (only their addresses are used)."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

from hookscope import _cuda_stats  # noqa: E402


def stand_in(driver, sms=132, read="read", reread="reread"):
    """(CudaStatistics over `driver`, its one place: torch.device("cpu")); read and reread are
    the function handles the driver is given."""
    kernels = _cuda_stats.CudaStatistics(nvrtc=object(), driver=driver)
    place = _cuda_stats._Device.__new__(_cuda_stats._Device)
    place.device, place.index, place.sms = torch.device("cpu"), 0, sms
    place.launches = {suffix: _cuda_stats.launch_pair(driver, read, reread)
                      for suffix in set(_cuda_stats.KERNELS.values())}
    place.scratch, place.counts, place.series = {}, {}, {}
    place.cooperative, place.resident = getattr(driver, "cooperative_launches", False), {}
    place.slots = torch.zeros((2, _cuda_stats.SLOT_WORDS), dtype=torch.float64)
    kernels._devices[place.device] = place
    kernels._stream = lambda index: 77
    return kernels, place
