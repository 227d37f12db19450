#!/usr/bin/env python3
"""Host time of one capture on the CUDA kernels' path, with no GPU: from the hook's entry
(CaptureSink.capture: the capture's identity, the lock, the backend's choice, the same-tensor
check, the row's place) to the capture's launches queued, with cuLaunchKernel and
cuLaunchCooperativeKernel replaced by a C function that returns at once (libc's ffs: a real
ctypes foreign call with the same converted arguments, so its cost is counted). Each capture's
tensor has VALUES values (512 by default: one block, one launch; 1,000,000: a grid of every
multiprocessor, one cooperative launch, or with --no-cooperative the read and the re-read). Also:
what torch._dynamo.disable's wrapper adds to a call when Dynamo is loaded (torchvision loads it)
and nothing is being compiled.

    python tests/bench/capture_host_bench.py [CAPTURES_A_STEP] [STEPS] [VALUES] [--no-cooperative]

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

    def __init__(self, cooperative_launches=True):
        libc = ctypes.CDLL(None)
        arguments = [ctypes.c_void_p, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint, ctypes.c_uint,
                     ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        self.launch = ctypes.CFUNCTYPE(ctypes.c_int, *arguments)(("ffs", libc))
        self.launch_cooperative = ctypes.CFUNCTYPE(ctypes.c_int, *arguments[:-1])(("ffs", libc))
        self.cooperative_launches = cooperative_launches
        self.copy = lambda *args: 0

    def resident(self, function, threads, shared):
        return 3

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
    values = int(sys.argv[3]) if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else 512
    driver = StubDriver(cooperative_launches="--no-cooperative" not in sys.argv)
    _backends._launchers["cuda"] = (stand_in(driver, read=0, reread=0)[0], None)
    _backends.CudaBackend.unavailable = lambda self, device: None  # the CPU stands in for the device
    sink = Sink()
    g = torch.Generator().manual_seed(0)
    if values <= 4096:
        tensors = [torch.randn(values, generator=g).bfloat16() for _ in range(captures)]
    else:  # views of one buffer: each its own tensor, no memory a capture
        whole = torch.zeros(values + captures, dtype=torch.bfloat16)
        tensors = [whole[i:i + values] for i in range(captures)]
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
    launched = "one cooperative launch" if values > 65536 and driver.cooperative_launches else (
        "one launch" if values <= 65536 else "two launches")
    print("RESULT host us per capture of %d values, hook entered to %s queued (launch stubbed): %.1f"
          % (values, launched, hook))
    print("RESULT a cuLaunchKernel ctypes call: %.1f" % ctypes_call)

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
