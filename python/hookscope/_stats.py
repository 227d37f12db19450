"""A captured tensor's statistics, computed in the training process on the tensor's device.

Each capture becomes one row: min, max, mean, std (n-1), L2 norm, zero fraction, NaN count,
Inf count, the histogram's low and high edges, then the counts of its bins. The meanings are
HookScope's (docs/export.md): moments, min, max and norm over the finite values; the histogram
of the finite values in equal bins between the finite min and max, a bin being
min((v - low) * scale, bins - 1) in the values' precision (float32 for float16, bfloat16 and
float32; float64 otherwise).

- On the CPU, HookScope's own kernel (libhookscope_stats, the engine's C++ code, loaded with
  ctypes: nothing is compiled against the user's PyTorch) reads the values in place while the
  hook runs; without it, the same torch ops as on a GPU.
- On a GPU, torch ops write each capture's row into a device buffer allocated once; the step's
  end copies every row to one pinned host buffer (allocated once) and waits once. No hook
  reads anything back, so no hook makes the host wait for the device.
"""

import ctypes
import os

import torch

from ._wire import number_text

HEADER = 10  # min, max, mean, std, l2, zero fraction, nan, inf, low, high
_CHUNK = 1 << 20  # values per pass of the torch-ops path: bounds its temporary memory (~40 MiB)
_ABI = 1
_LIBRARY_NAME = "libhookscope_stats.so"


def _library_candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    named = os.environ.get("HOOKSCOPE_STATS_LIBRARY")
    if named:
        yield named
    yield os.path.join(here, _LIBRARY_NAME)  # installed beside the package (cmake --install)
    root = os.path.normpath(os.path.join(here, "..", ".."))  # a source checkout, built into build/
    yield os.path.join(root, "build", "core", _LIBRARY_NAME)


_native_cache = []


def native_library():
    """HookScope's statistics kernel (ctypes), or None where it is not built or not loadable.

    HOOKSCOPE_STATS_LIBRARY names it; "none" turns it off (the torch-ops path then runs)."""
    if _native_cache:
        return _native_cache[0]
    lib = None
    if os.environ.get("HOOKSCOPE_STATS_LIBRARY", "").lower() != "none":
        for path in _library_candidates():
            if not os.path.isfile(path):
                continue
            try:
                candidate = ctypes.CDLL(path)
                if candidate.hookscope_stats_abi() != _ABI:
                    continue
                candidate.hookscope_stats.restype = ctypes.c_int
                candidate.hookscope_stats.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int,
                                                      ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
                lib = candidate
                break
            except (OSError, AttributeError):
                continue
    _native_cache.append(lib)
    return lib


def _work_dtype(t):
    """The precision HookScope bins a tensor's values in."""
    if t.dtype in (torch.float16, torch.bfloat16, torch.float32):
        return torch.float32
    return torch.float64


def native_row(lib, t, bins, cores=1):
    """A CPU tensor's row through HookScope's kernel (a list of HEADER + bins floats)."""
    x = t.detach()
    if x.is_complex():
        x = x.abs()
    work = _work_dtype(x)
    if x.dtype != work:
        x = x.to(work)
    x = x.contiguous()
    out = (ctypes.c_double * (HEADER + bins))()
    code = 0 if work == torch.float32 else 1
    if lib.hookscope_stats(ctypes.c_void_p(x.data_ptr()), x.numel(), code, bins, cores, out) != 0:
        raise ValueError("HookScope's statistics kernel refused a tensor of %d values" % x.numel())
    return list(out)


def torch_row(t, bins, row):
    """Writes a tensor's row into `row` (float64, HEADER + bins, on t's device) with torch ops
    only, in passes of at most _CHUNK values, without reading anything back to the host."""
    x = t.detach()
    if x.is_complex():
        x = x.abs()
    n = x.numel()
    f64 = torch.float64
    nan = float("nan")
    if n == 0:
        row.zero_()
        row[0:3].fill_(nan)
        return
    flat = x.reshape(-1)
    chunks = flat.split(_CHUNK) if n > _CHUNK else (flat,)
    dev = x.device
    total = torch.zeros((), dtype=f64, device=dev)
    squares = torch.zeros((), dtype=f64, device=dev)
    low = torch.full((), float("inf"), dtype=f64, device=dev)
    high = torch.full((), float("-inf"), dtype=f64, device=dev)
    counts = torch.zeros(4, dtype=torch.int64, device=dev)  # finite, nan, non-finite, zeros

    def prepared(c):  # the values in float64 and where they are finite
        v = c.to(f64)
        return v, torch.isfinite(v)
    # One pass's worth (most tensors): kept for the second pass instead of made again.
    single = prepared(chunks[0]) if len(chunks) == 1 else None
    for c in chunks:
        v, finite = single or prepared(c)
        bad = ~finite
        counts += torch.stack([finite.sum(), torch.isnan(v).sum(), bad.sum(), (v == 0).sum()])
        kept = v.masked_fill(bad, 0.0)
        total += kept.sum()
        squares += (kept * kept).sum()
        low = torch.minimum(low, v.masked_fill(bad, float("inf")).amin())
        high = torch.maximum(high, v.masked_fill(bad, float("-inf")).amax())
    finite_count = counts[0].to(f64)
    some = counts[0] > 0
    mean = total / finite_count  # NaN with no finite value
    # The histogram's range: the finite min and max, widened around a single value.
    lo = torch.where(some, low, torch.zeros_like(low))
    hi = torch.where(some, high, torch.zeros_like(high))
    pad = torch.clamp(lo.abs() * 1e-6, min=0.5)
    flat_range = some & (hi <= lo)
    lo = torch.where(flat_range, lo - pad, lo)
    hi = torch.where(flat_range, hi + pad, hi)
    scale = bins / torch.where(hi > lo, hi - lo, torch.ones_like(hi))
    work = _work_dtype(x)
    lo_w, scale_w = lo.to(work), scale.to(work)
    spare = bins  # non-finite values land one past the last bin, which is dropped
    hist = torch.zeros(bins + 1, dtype=torch.int64, device=dev)
    m2 = torch.zeros((), dtype=f64, device=dev)
    for c in chunks:
        v, finite = single or prepared(c)
        d = (v - mean).masked_fill(~finite, 0.0)
        m2 += (d * d).sum()
        w = c.to(work)
        at = ((w - lo_w) * scale_w).clamp(0, bins - 1).masked_fill(~finite, spare)
        index = at.to(torch.int64)
        hist.scatter_add_(0, index, torch.ones(1, dtype=torch.int64, device=dev).expand(index.numel()))
    std = torch.where(counts[0] > 1, torch.sqrt(m2 / (finite_count - 1).clamp(min=1)), torch.zeros_like(m2))
    nan_t = torch.full((), nan, dtype=f64, device=dev)
    head = torch.stack([
        torch.where(some, low, nan_t), torch.where(some, high, nan_t), torch.where(some, mean, nan_t), std,
        torch.sqrt(squares), counts[3].to(f64) / n, counts[1].to(f64), (counts[2] - counts[1]).to(f64), lo, hi])
    row[:HEADER].copy_(head)
    row[HEADER:].copy_(hist[:bins])


class StepStatistics:
    """One step's captures: their identifying fields (JSON text) and their rows."""

    def __init__(self, bins=64, use_native=True):
        self.bins = bins
        self._lib = native_library() if use_native else None
        self.backend = "hookscope kernel" if self._lib is not None else "torch ops"
        self._entries = []  # [fields, row list or None, (device, row index) or None]
        self._device = {}   # device -> [rows tensor, count]
        self._pinned = {}   # device -> pinned host rows, grown by doubling, reused
        self.rows_bytes = 0  # device memory held by the row buffers

    def set_bins(self, bins):
        if bins != self.bins and not self._entries:
            self.bins = bins
            self._device = {}
            self._pinned = {}
            self.rows_bytes = 0

    def __len__(self):
        return len(self._entries)

    def add(self, fields, tensor, defer=False):
        """Computes `tensor`'s row now (the values as they are at this moment)."""
        width = HEADER + self.bins
        if tensor.device.type == "cpu" and not defer:
            if self._lib is not None:
                row = native_row(self._lib, tensor, self.bins)
            else:
                out = torch.empty(width, dtype=torch.float64)
                torch_row(tensor, self.bins, out)
                row = out.tolist()
            self._entries.append([fields, row, None])
            return
        device = tensor.device
        slot = self._device.get(device)
        if slot is None or slot[1] == slot[0].shape[0]:
            capacity = 256 if slot is None else 2 * slot[0].shape[0]
            rows = torch.empty((capacity, width), dtype=torch.float64, device=device)
            if slot is not None:
                rows[:slot[1]].copy_(slot[0][:slot[1]])
            self.rows_bytes += rows.numel() * 8 - (slot[0].numel() * 8 if slot is not None else 0)
            slot = self._device[device] = [rows, 0 if slot is None else slot[1]]
        torch_row(tensor, self.bins, slot[0][slot[1]])
        self._entries.append([fields, None, (device, slot[1])])
        slot[1] += 1

    def take(self):
        """Every entry of the step as (fields, row); device rows come back with one copy and
        one wait per device."""
        host = {}
        for device, (rows, count) in self._device.items():
            if count == 0:
                continue
            pinned = self._pinned.get(device)
            if pinned is None or pinned.shape[0] < count:
                pinned = torch.empty(rows.shape, dtype=torch.float64,
                                     pin_memory=device.type == "cuda" and torch.cuda.is_available())
                self._pinned[device] = pinned
            pinned[:count].copy_(rows[:count], non_blocking=True)
            if device.type == "cuda":
                torch.cuda.current_stream(device).synchronize()
            host[device] = pinned[:count].tolist()
        out = []
        for fields, row, place in self._entries:
            out.append((fields, row if place is None else host[place[0]][place[1]]))
        self._entries = []
        for slot in self._device.values():
            slot[1] = 0
        return out


def entry_text(fields, row, bins):
    """A `stats` entry as JSON text (written by hand: json.dumps costs more than the rest)."""
    head = ",".join('"%s":%s' % (name, number_text(row[i])) for i, name in
                    ((0, "min"), (1, "max"), (2, "mean"), (3, "std"), (4, "l2"), (5, "zeros"), (8, "lo"), (9, "hi")))
    hist = ",".join(str(int(v)) for v in row[HEADER:HEADER + bins])
    return '{%s,%s,"nan":%d,"inf":%d,"hist":[%s]}' % (fields, head, int(row[6]), int(row[7]), hist)
