#!/usr/bin/env python3
"""Host time of one capture on the CUDA kernels' path, with no GPU: from the hook's entry
(CaptureSink.capture: the capture's identity, the lock, the backend's choice, the same-tensor
check, the row's place) to the two kernels queued, with cuLaunchKernel replaced by a C function
of the same arity that returns at once (libc's ffs: a real ctypes foreign call with the same 11
converted arguments, so its cost is counted). Also: what torch._dynamo.disable's wrapper adds to
a call when Dynamo is loaded (torchvision loads it) and nothing is being compiled.

    python tests/bench/capture_host_bench.py [CAPTURES_A_STEP] [STEPS]

On a GPU the same path adds the current stream's raw handle (one call into torch) and the real
launch: docs/performance.md has both. Prints RESULT lines.
"""
import ctypes
import importlib
import os
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import torch  # noqa: E402

from cuda_stand_in import stand_in  # noqa: E402
from hookscope import _backends, _capture, _stats  # noqa: E402


class StubDriver:
    """The driver's launch and copy as C calls that do nothing (ffs(0) is 0: success)."""

    def __init__(self):
        libc = ctypes.CDLL(None)
        self.launch = libc.ffs
        self.launch.argtypes = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                                ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p]
        self.launch.restype = ctypes.c_int
        self.copy = lambda *args: 0

    def check(self, status, what):
        assert status == 0, what


class Sink(_capture.CaptureSink):
    """CaptureSink as an attached script has it, every capture deferred to the device-row path."""

    def __init__(self):
        self.lock = threading.RLock()
        self._stats = _stats.StepStatistics(bins=64, backend="cuda", strict=True)
        self._defer_all = True
        self._step = 0

    def _warn_once(self, key, message):
        pass


def main():
    captures = int(sys.argv[1]) if len(sys.argv) > 1 else 338  # resnet50, every module hooked
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    _backends._launchers["cuda"] = (stand_in(StubDriver(), read=0, reread=0)[0], None)
    _backends.CudaBackend.unavailable = lambda self, device: None  # the CPU stands in for the device
    sink = Sink()
    g = torch.Generator().manual_seed(0)
    tensors = [torch.randn(64, 8, generator=g).bfloat16() for _ in range(captures)]
    per_step = []
    for step in range(steps):
        started = time.perf_counter()
        for i, t in enumerate(tensors):
            sink.capture(i, 0, "activation", 0, t)
        per_step.append(time.perf_counter() - started)
        assert len(sink._stats.take()) == captures
    per_step.sort()
    hook = per_step[len(per_step) // 2] / captures * 1e6
    launch = sink._stats._backends["cuda"]._kernels._devices[torch.device("cpu")].launches["bf16"][0]
    started = time.perf_counter()
    for _ in range(20000):
        launch(396, 6000, 0)
    ctypes_call = (time.perf_counter() - started) / 20000 * 1e6
    print("RESULT host us per capture, hook entered to both kernels queued (launch stubbed): %.1f" % hook)
    print("RESULT of which the two cuLaunchKernel ctypes calls: %.1f" % (2 * ctypes_call))

    importlib.import_module("torch._dynamo")  # what torchvision's import does

    def plain(a, b, c, d, e):
        return a

    wrapped = torch._dynamo.disable(plain)
    for name, fn in (("a plain call", plain), ("dynamo.disable's wrapper", wrapped)):
        started = time.perf_counter()
        for _ in range(20000):
            fn(1, 2, 3, 4, 5)
        print("RESULT us per call through %s: %.2f" % (name, (time.perf_counter() - started) / 20000 * 1e6))
    print("RESULT captures a step %d, steps %d, torch %s" % (captures, steps, torch.__version__))


if __name__ == "__main__":
    main()
