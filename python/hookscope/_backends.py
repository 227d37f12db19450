"""The statistics backends behind one seam: each says why it cannot run on a device (None where it
can) and writes a tensor's row (_stats's layout) into a float64 tensor on the tensor's device;
choose() picks one. The rows mean the same whichever computes them (the oracle tests).

- native: HookScope's C++ kernel (libhookscope_stats through ctypes) on CPU values.
- torch: torch ops, on any device, for what nothing else runs.
- triton: two fused Triton kernels (_triton_stats) on CUDA devices; on CPU tensors under
  TRITON_INTERPRET=1 (the tests).
- cuda: HookScope's CUDA kernels (stats_kernels.cu, _cuda_stats): compiled by NVRTC at first
  use, one read for most captures. Shards of a sharded tensor (a shared range) go to the next.
"""

import os

import torch

from ._cuda_stats import KERNELS as CUDA_DTYPES
from ._stats_rows import HEADER, dense, native_in_range, native_library, native_row, torch_row

NAMES = ("auto", "native", "torch", "triton", "cuda")
# What "auto" tries, in order, by device type; the torch ops run anywhere.
PREFERENCE = {"cpu": ("native", "torch"), "cuda": ("cuda", "triton", "torch")}
# What an attached step costs against a plain one where auto falls back (docs/performance.md).
COSTS = {
    ("cpu", "torch"): "about 3x a plain one instead of about 1.1x",
    ("cuda", "triton"): "2.6x (gpt2) to 4.2x (resnet50) a plain one on an H200, where the memory allows about 1.1x",
    ("cuda", "torch"): "tens of times a plain one",
}


def _interpreting():
    return os.environ.get("TRITON_INTERPRET") == "1"


class Backend:
    """One way of computing rows. `failed` holds why it stopped being used after an error."""

    name = None
    title = None          # what it is called in a message ("torch ops ... compute")
    shared_ranges = True  # whether row() bins between a shared (low, high, amax): a shard's row
    host_rows = False     # whether a CPU capture's row is computed at once, as a list (host_row)

    def __init__(self):
        self.failed = None

    def unavailable(self, device):
        """Why this backend cannot compute a row on `device`; None where it can."""
        return self.failed

    def row(self, tensor, bins, out, shared=None, series=None):
        """Writes tensor's row into `out` (float64, HEADER + bins, on tensor's device). shared:
        (low, high, amax) floats of a whole tensor that `tensor` is a shard of. series: a key
        naming the capture's series (its history may let a backend read the values once)."""
        raise NotImplementedError

    def host_row(self, tensor, bins, shared=None, raw=False):
        """A CPU tensor's row as a list, computed now (raw: its bytes where the backend can, as
        _stats_rows.row_bytes makes them)."""
        out = torch.empty(HEADER + bins, dtype=torch.float64)
        self.row(tensor, bins, out, shared)
        return out.tolist()

    def write_row(self, tensor, bins, rows, index, series=None):
        """tensor's row into rows[index] (a step's row buffer on tensor's device)."""
        self.row(tensor, bins, rows[index], series=series)

    def copy_row(self, rows, source, destination):
        """rows[destination] = rows[source], on the rows' device (a tensor read already this step)."""
        rows[destination].copy_(rows[source])


class NativeBackend(Backend):
    name = "native"
    title = "HookScope's C++ kernel"
    host_rows = True

    def __init__(self, lib):
        super().__init__()
        self.lib = lib

    def unavailable(self, device):
        if self.lib is None:
            return ("HookScope's C++ kernel was not found (installing the hookscope package with pip and a C++ "
                    "compiler builds it)")
        if device.type != "cpu":
            return "HookScope's C++ kernel reads CPU memory only"
        return self.failed

    def host_row(self, tensor, bins, shared=None, raw=False):
        if shared is not None and not native_in_range(self.lib):  # an older library
            return TORCH.host_row(tensor, bins, shared)
        return native_row(self.lib, tensor, bins, shared=shared, raw=raw)

    def row(self, tensor, bins, out, shared=None, series=None):
        if shared is not None and not native_in_range(self.lib):
            TORCH.row(tensor, bins, out, shared)
            return
        native_row(self.lib, tensor, bins, shared=shared, out=out)


class TorchBackend(Backend):
    name = "torch"
    title = "torch ops"
    host_rows = True

    def row(self, tensor, bins, out, shared=None, series=None):
        given = None if shared is None else \
            tuple(torch.tensor(v, dtype=torch.float64, device=tensor.device) for v in shared)
        torch_row(tensor, bins, out, given)


_launchers = {}  # "triton", "cuda" -> (launcher or None, why not): made once a process


def triton_launcher():
    """The Triton kernels' launcher, or (None, why) where Triton does not import."""
    if "triton" not in _launchers:
        try:
            from . import _triton_stats
            _launchers["triton"] = (_triton_stats.TritonStatistics(), None)
        except Exception as exc:  # no Triton, or one too old for the kernels
            _launchers["triton"] = (None, "Triton does not import (%s: %s)" % (type(exc).__name__, exc))
    return _launchers["triton"]


def cuda_launcher():
    """The CUDA kernels' launcher (NVRTC and the driver loaded), or (None, why not)."""
    if "cuda" not in _launchers:
        if getattr(torch.version, "hip", None):
            _launchers["cuda"] = (None, "this PyTorch is a ROCm build (HookScope's CUDA kernels are for NVIDIA GPUs)")
        else:
            try:
                from . import _cuda_stats
                _launchers["cuda"] = (_cuda_stats.CudaStatistics(), None)
            except Exception as exc:  # no NVRTC, no driver library
                _launchers["cuda"] = (None, "HookScope's CUDA kernels cannot run (%s)" % exc)
    return _launchers["cuda"]


class TritonBackend(Backend):
    name = "triton"
    title = "the Triton kernels"

    def kernels(self):
        return triton_launcher()[0]

    def unavailable(self, device):
        if self.kernels() is None:
            return triton_launcher()[1]
        if self.failed:
            return self.failed
        if device.type == "cpu" and not _interpreting():
            return "the Triton kernels run on CPU tensors only under TRITON_INTERPRET=1"
        if device.type not in ("cpu", "cuda"):
            return "the Triton kernels run on CUDA devices"
        return None

    def row(self, tensor, bins, out, shared=None, series=None):
        kernels = self.kernels()
        if shared is None:
            kernels.row(tensor, bins, out)
            return
        with kernels._lock:
            own_amax = None
            for name, launch in kernels.launches(tensor, bins, out):
                if name == "pass 2" and shared is not None:  # pass 2 reads the edges and amax from the row
                    own_amax = out[10].clone()
                    out[8:11].copy_(torch.tensor(shared, dtype=torch.float64))
                launch()
            if own_amax is not None:
                out[10] = own_amax


class CudaBackend(Backend):
    name = "cuda"
    title = "HookScope's CUDA kernels"
    shared_ranges = False

    @property
    def _kernels(self):
        return cuda_launcher()[0]

    def unavailable(self, device):
        if device.type != "cuda":
            return "HookScope's CUDA kernels run on NVIDIA GPUs"
        if self._kernels is None:
            return cuda_launcher()[1]
        return self.failed

    def row(self, tensor, bins, out, shared=None, series=None):
        self.row_at(tensor, bins, out.data_ptr(), series)

    def row_at(self, tensor, bins, address, series=None):
        """Queues tensor's row into device memory at `address` (the hot path: no view, no tensor
        made for a dense tensor of a dtype the kernels read)."""
        x = tensor
        if x.dtype not in CUDA_DTYPES or not dense(x):
            x = x.detach()
            if x.is_complex():
                x = x.abs()
            x = x.reshape(-1).to(x.dtype if x.dtype in CUDA_DTYPES else torch.float64).contiguous()
        self._kernels.row(x, bins, address, series)

    def write_row(self, tensor, bins, rows, index, series=None):
        self.row_at(tensor, bins, rows.data_ptr() + index * rows.shape[1] * 8, series)

    def copy_row(self, rows, source, destination):
        width = rows.shape[1] * 8
        base = rows.data_ptr()
        self._kernels.copy_row(rows.device, base + destination * width, base + source * width, width)

    def kernels_loaded(self):
        return _launchers.get("cuda", (None,))[0] is not None

    def queue_reads(self, device):
        self._kernels.queue_reads(device)

    def reads(self):
        return self._kernels.reads()


TORCH = TorchBackend()


def make_backends(use_native=True):
    """One of each backend (the native one with HookScope's C++ kernel where it loads)."""
    return {"native": NativeBackend(native_library() if use_native else None), "torch": TORCH,
            "triton": TritonBackend(), "cuda": CudaBackend()}
