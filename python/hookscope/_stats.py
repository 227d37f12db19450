"""A captured tensor's statistics, computed in the training process on the tensor's device.

Each capture becomes one row: min, max, mean, std (n-1), L2 norm, zero fraction, NaN count,
Inf count, the histogram's low and high edges, amax (the largest finite |value|), the counts of
finite values that float16 would overflow or flush and that E4M3 and E5M2 would flush after
per-tensor amax scaling, then the counts of its bins. The meanings are
HookScope's (docs/export-format.md): moments, min, max and norm over the finite values; the histogram
of the finite values in equal bins between the finite min and max, a bin being
min((v - low) * scale, bins - 1) in the values' precision (float32 for float16, bfloat16 and
float32; float64 otherwise), with the fallback bin_plan() says where float32 cannot hold the scale.

Three backends compute the same row (HOOKSCOPE_STATS_BACKEND=auto|native|torch|triton forces one):
- native: HookScope's own C++ kernel (libhookscope_stats, the engine's code, loaded with
  ctypes: nothing is compiled against the user's PyTorch) reads CPU values in place while the
  hook runs. auto's choice on the CPU where the library is found.
- triton: two fused Triton kernels (_triton_stats) on a GPU, at the memory's speed. auto's
  choice on CUDA where Triton imports; CPU tensors only under TRITON_INTERPRET=1.
- torch: torch ops, on any device; what runs where neither of the others can.
On a GPU each capture's row is written into a device buffer allocated once; the step's end
copies every row to one pinned host buffer (allocated once) and waits once. No hook reads
anything back, so no hook makes the host wait for the device.
"""

import ctypes
import glob
import os
import threading

import torch

from ._wire import number_text

HEADER = 15  # min, max, mean, std, l2, zero fraction, nan, inf, low, high, amax, the precision counts
# The row's float fields by the names a `stats` entry and tensor_statistics() give them.
FIELDS = ((0, "min"), (1, "max"), (2, "mean"), (3, "std"), (4, "l2"), (5, "zeros"), (8, "lo"), (9, "hi"),
          (10, "amax"))
# The row's counts by their names, beside nan (6) and inf (7) (docs/export-format.md).
PRECISION = ((11, "f16_overflow"), (12, "f16_underflow"), (13, "e4m3_underflow"), (14, "e5m2_underflow"))
_CHUNK = 1 << 20  # values per pass of the torch-ops path: bounds its temporary memory (~40 MiB)
_ABI = 2
_LIBRARY_NAME = "libhookscope_stats.so"
BACKENDS = ("auto", "native", "torch", "triton")
_FLT_MAX = 3.4028234663852886e38
_FLT_MIN = 1.1754943508222875e-38
_DBL_MAX = 1.7976931348623157e308
F16_LARGEST = 65504.0
F16_SMALLEST = 2.0 ** -24      # float16's smallest subnormal
E4M3 = (448.0, 2.0 ** -9)      # an fp8 format's largest value and smallest subnormal
E5M2 = (57344.0, 2.0 ** -16)


def _library_candidates():
    here = os.path.dirname(os.path.abspath(__file__))
    named = os.environ.get("HOOKSCOPE_STATS_LIBRARY")
    if named:
        yield named
    yield os.path.join(here, _LIBRARY_NAME)  # installed beside the package (cmake --install)
    # Built by pip when the package was installed (setup.py: a plain C++ library, no Python API).
    yield from sorted(glob.glob(os.path.join(here, "_hookscope_stats*.so")))
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
                try:  # a shard's row in its whole tensor's range (libraries since the sharded issue)
                    ranged = candidate.hookscope_stats_in_range
                    ranged.restype = ctypes.c_int
                    ranged.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                       ctypes.POINTER(ctypes.c_double), ctypes.POINTER(ctypes.c_double)]
                except AttributeError:
                    pass
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


def native_in_range(lib):
    """Whether HookScope's kernel computes a shard's row in a shared range (native_row's shared)."""
    return lib is not None and hasattr(lib, "hookscope_stats_in_range")


def native_row(lib, t, bins, cores=1, shared=None):
    """A CPU tensor's row through HookScope's kernel (a list of HEADER + bins floats); shared:
    (low, high, amax) floats of the whole tensor it is a shard of (torch_row's shared)."""
    x = t.detach()
    if x.is_complex():
        x = x.abs()
    work = _work_dtype(x)
    if x.dtype != work:
        x = x.to(work)
    x = x.contiguous()
    out = (ctypes.c_double * (HEADER + bins))()
    code = 0 if work == torch.float32 else 1
    if shared is not None:
        status = lib.hookscope_stats_in_range(ctypes.c_void_p(x.data_ptr()), x.numel(), code, bins, cores,
                                              (ctypes.c_double * 3)(*shared), out)
    else:
        status = lib.hookscope_stats(ctypes.c_void_p(x.data_ptr()), x.numel(), code, bins, cores, out)
    if status != 0:
        raise ValueError("HookScope's statistics kernel refused a tensor of %d values" % x.numel())
    return list(out)


def bin_plan(lo, hi, bins, work):
    """How values become bins, for the histogram's edges lo and hi (float64 tensors on the values'
    device): (narrow, k, scale). A value's bin is (v - lo) * scale in the working precision
    (float32 for float16, bfloat16 and float32) where narrow is true: the span and the scale are
    normal float32 numbers. Else it is (v * k - lo * k) * scale in float64, k being 1, or 0.5 where
    the span is past float64's range. Every backend bins by this plan (docs/export-format.md)."""
    span = hi - lo
    positive = span > 0
    # A tensor over a tensor: `bins / tensor` is a reciprocal times bins in torch, one rounding
    # more than the kernels' division.
    count = torch.full_like(span, float(bins))
    if work == torch.float32:
        scale = count / torch.where(positive, span, torch.ones_like(span))
        narrow = (span <= _FLT_MAX) & (scale <= _FLT_MAX) & (scale >= _FLT_MIN)
        return narrow, torch.ones_like(span), scale
    k = torch.where(span <= _DBL_MAX, torch.ones_like(span), torch.full_like(span, 0.5))
    scale = count / torch.where(positive, hi * k - lo * k, torch.ones_like(span))
    return torch.zeros_like(positive), k, scale


def flush_below(amax, fmt, work):
    """Where an fp8 format's underflow begins once the tensor is scaled so that its amax (a
    float64 tensor) becomes the format's largest value: the smallest `work` value w with
    fl64(w * largest) >= fl64(amax * smallest subnormal), so that a finite value counts when
    |v| < w (docs/export-format.md). A tensor on amax's device; 0 for an amax of 0 or NaN."""
    largest, smallest = fmt
    edge = amax * smallest
    c = (edge / largest).to(work)
    up, down = torch.full_like(c, float("inf")), torch.full_like(c, float("-inf"))
    # The quotient rounded to `work` is within two units in the last place of the answer: of
    # c - 2, c - 1, c and c + 1 units, the smallest that reaches the edge.
    below = torch.nextafter(c, down)
    w = torch.nextafter(c, up)
    for candidate in (c, below, torch.nextafter(below, down)):
        w = torch.where(candidate.to(torch.float64) * largest >= edge, candidate, w)
    return torch.where(edge > 0, w, torch.zeros_like(w))


def torch_row(t, bins, row, shared=None):
    """Writes a tensor's row into `row` (float64, HEADER + bins, on t's device) with torch ops
    only, in passes of at most _CHUNK values, without reading anything back to the host.

    shared: (low, high, amax), float64 tensors on t's device, for a shard of a larger tensor:
    the histogram between those edges and the fp8 counts scaled by that amax (the whole
    tensor's), the rest the shard's own (as RawStats's computeRawStatsInRange)."""
    x = t.detach()
    if x.is_complex():
        x = x.abs()
    n = x.numel()
    f64 = torch.float64
    nan = float("nan")
    if n == 0:
        row.zero_()
        row[0:3].fill_(nan)
        row[10] = nan
        if shared is not None:
            row[8:10].copy_(torch.stack(list(shared[:2])))
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
    nan_t = torch.full((), nan, dtype=f64, device=dev)
    amax = torch.where(some, torch.maximum(low.abs(), high.abs()), nan_t)
    scale_amax = amax
    if shared is not None:
        lo, hi, scale_amax = shared
    work = _work_dtype(x)
    narrow, k, scale = bin_plan(lo, hi, bins, work)
    lo_w, scale_w = lo.to(work), scale.to(work)
    on_cpu = dev.type == "cpu"
    if on_cpu:  # the host may look: only the plan that applies is computed
        narrow = bool(narrow)
    spare = bins  # non-finite values land one past the last bin, which is dropped
    hist = torch.zeros(bins + 1, dtype=torch.int64, device=dev)
    m2 = torch.zeros((), dtype=f64, device=dev)
    e4m3_below, e5m2_below = flush_below(scale_amax, E4M3, work), flush_below(scale_amax, E5M2, work)
    precision = torch.zeros(4, dtype=torch.int64, device=dev)  # f16 over, f16 under, e4m3, e5m2
    for c in chunks:
        v, finite = single or prepared(c)
        d = (v - mean).masked_fill(~finite, 0.0)
        m2 += (d * d).sum()
        a = (v if work == f64 else c.to(work)).abs()  # NaN compares false below, Inf is kept out
        nonzero = a > 0
        precision += torch.stack([((a > F16_LARGEST) & finite).sum(), (nonzero & (a < F16_SMALLEST)).sum(),
                                  (nonzero & (a < e4m3_below)).sum(), (nonzero & (a < e5m2_below)).sum()])
        if work == torch.float32 and (not on_cpu or narrow):
            at = (c.to(work) - lo_w) * scale_w
            if not on_cpu:  # the wide plan beside it, chosen per tensor without reading it back
                at = torch.where(narrow, at.to(f64), (v * k - lo * k) * scale)
        else:
            at = (v * k - lo * k) * scale
        # NaN-safe: a position that is NaN (0 x inf) becomes 0, never an index out of range.
        at = torch.where(at > 0, at, torch.zeros_like(at)).clamp(max=bins - 1).masked_fill(~finite, spare)
        index = at.to(torch.int64)
        hist.scatter_add_(0, index, torch.ones(1, dtype=torch.int64, device=dev).expand(index.numel()))
    std = torch.where(counts[0] > 1, torch.sqrt(m2 / (finite_count - 1).clamp(min=1)), torch.zeros_like(m2))
    # Values, none of them finite: no spread and no norm to show (0 would read as vanishing).
    std = torch.where(some, std, nan_t)
    l2 = torch.where(some, torch.sqrt(squares), nan_t)
    head = torch.stack([
        torch.where(some, low, nan_t), torch.where(some, high, nan_t), torch.where(some, mean, nan_t), std,
        l2, counts[3].to(f64) / n, counts[1].to(f64), (counts[2] - counts[1]).to(f64), lo, hi, amax,
        *precision.to(f64)])
    row[:HEADER].copy_(head)
    row[HEADER:].copy_(hist[:bins])


def requested_backend():
    """HOOKSCOPE_STATS_BACKEND, or "auto"; a value it cannot be is refused with what it can be."""
    name = os.environ.get("HOOKSCOPE_STATS_BACKEND", "auto").strip().lower() or "auto"
    if name not in BACKENDS:
        raise ValueError("HOOKSCOPE_STATS_BACKEND=%s: use one of %s" % (name, ", ".join(BACKENDS)))
    return name


def _interpreting():
    return os.environ.get("TRITON_INTERPRET") == "1"


_triton_cache = []


def triton_statistics():
    """The Triton kernels' launcher, or (None, why) where Triton does not import."""
    if not _triton_cache:
        try:
            from . import _triton_stats
            _triton_cache.append((_triton_stats.TritonStatistics(), None))
        except Exception as exc:  # no Triton, or one too old for the kernels
            _triton_cache.append((None, "Triton does not import (%s: %s)" % (type(exc).__name__, exc)))
    return _triton_cache[0]


_OUT_OF_MEMORY = getattr(torch.cuda, "OutOfMemoryError", MemoryError)


class CapturedInGraph(RuntimeError):
    """A hook ran while its stream was being captured into a CUDA graph: nothing is launched."""


class BackendError(ValueError):
    """A backend that was asked for by name cannot compute a tensor's row."""


class StepStatistics:
    """One step's captures: their identifying fields (JSON text) and their rows.

    backend: "auto" (HOOKSCOPE_STATS_BACKEND by default), or one of BACKENDS to force. A forced
    backend that cannot take a tensor raises BackendError with strict=True; otherwise that
    tensor gets auto's choice and `fallbacks` says so once."""

    def __init__(self, bins=64, use_native=True, backend=None, strict=False):
        self.bins = bins
        self.fallbacks = []         # messages for the script's output: each said once
        if backend is None:
            try:
                backend = requested_backend()
            except ValueError as exc:  # a training run is not stopped for a misspelt variable
                self.fallbacks.append("%s; auto is used" % exc)
                backend = "auto"
        if backend not in BACKENDS:
            raise ValueError("backend %r: use one of %s" % (backend, ", ".join(BACKENDS)))
        self.requested = backend
        self.strict = strict
        self._lib = native_library() if use_native and backend != "torch" else None
        self._triton_failed = None  # why the Triton kernels stopped being used, once they failed
        self._entries = []  # [fields, row list or None, (device, row index) or None, backend]
        self._device = {}   # device -> [rows tensor, count]
        self._pinned = {}   # device -> pinned host rows, grown by doubling, reused
        self._streams = {}  # device -> CUDA streams rows were written on this step
        self.rows_bytes = 0  # device memory held by the row buffers

    @property
    def backend(self):
        """Which backend computes CPU captures, and CUDA captures where this machine has a GPU."""
        text = "cpu: %s" % self.choose(torch.device("cpu"))
        if torch.cuda.is_available():
            text += "; cuda: %s" % self.choose(torch.device("cuda"))
        return text

    def slower_fallback(self):
        """A line for the script's output where auto's choice is a slower fallback (torch ops
        where HookScope's C++ kernel or Triton is missing) with what it costs; else None."""
        if self.requested != "auto":
            return None
        notes = []
        if self.choose(torch.device("cpu")) == "torch":
            notes.append("HookScope's C++ kernel was not found, so torch ops compute CPU statistics: an attached "
                         "step costs about 3x a plain one instead of about 1.1x (installing the hookscope package "
                         "with pip and a C++ compiler builds the kernel)")
        if torch.cuda.is_available() and self.choose(torch.device("cuda")) == "torch":
            notes.append("%s, so torch ops compute GPU statistics: an attached step costs tens of times a plain "
                         "one" % triton_statistics()[1])
        return "; ".join(notes) or None

    def choose(self, device):
        """The backend that computes a tensor's row on `device`."""
        wanted = self.requested
        if device.type == "cpu":
            if wanted == "torch" or (wanted == "triton" and _interpreting() and self._usable_triton()):
                return wanted
            if wanted in ("auto", "native") and self._lib is not None:
                return "native"
            if wanted != "auto":
                self._cannot(wanted, device)
            return "native" if self._lib is not None else "torch"
        if wanted in ("auto", "triton") and device.type == "cuda" and self._usable_triton():
            return "triton"
        if wanted not in ("auto", "torch"):
            self._cannot(wanted, device)
        return "torch"

    def _usable_triton(self):
        return self._triton_failed is None and triton_statistics()[0] is not None

    def _cannot(self, wanted, device):
        if wanted == "triton" and self._triton_failed:
            return  # said when they failed
        if wanted == "native":
            why = ("HookScope's C++ kernel is not built (pip install the hookscope package with a C++ "
                   "compiler, or build HookScope)" if device.type == "cpu" else
                   "HookScope's C++ kernel reads CPU memory only")
        elif triton_statistics()[0] is None:
            why = triton_statistics()[1]
        elif device.type == "cpu":
            why = "the Triton kernels run on CPU tensors only under TRITON_INTERPRET=1"
        else:
            why = "the Triton kernels run on CUDA devices"
        message = "the %s statistics backend cannot compute a %s tensor's row: %s" % (wanted, device.type, why)
        if self.strict:
            raise BackendError(message)
        if message not in self.fallbacks:
            self.fallbacks.append(message)

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
        if tensor.is_cuda and torch.cuda.is_current_stream_capturing():
            raise CapturedInGraph("captured into a CUDA graph: HookScope sees nothing on replay")
        width = HEADER + self.bins
        backend = self.choose(tensor.device)
        if tensor.device.type == "cpu" and not defer and backend != "triton":
            if backend == "native":
                row = native_row(self._lib, tensor, self.bins)
            else:
                out = torch.empty(width, dtype=torch.float64)
                torch_row(tensor, self.bins, out)
                row = out.tolist()
            self._entries.append([fields, row, None, backend])
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
        row = slot[0][slot[1]]
        if backend != "triton":
            backend = "torch"  # what writes into a row buffer on any device
        if device.type == "cuda":
            # The kernels run on the current stream; the tensor's memory is kept until they are
            # done there, and the step's end waits for every stream that wrote a row.
            stream = torch.cuda.current_stream(device)
            tensor.record_stream(stream)
            slot[0].record_stream(stream)
            self._streams.setdefault(device, set()).add(stream)
        if backend == "triton":
            backend = self._triton_row(tensor, row)
        if backend == "torch":
            torch_row(tensor, self.bins, row)
        self._entries.append([fields, None, (device, slot[1]), backend])
        slot[1] += 1

    def add_row(self, fields, row, backend="sharded"):
        """An entry whose row was computed elsewhere (a shard's, at the step's end: _sharded)."""
        self._entries.append([fields, row, None, backend])

    def _triton_row(self, tensor, row):
        """Computes the row with the Triton kernels; "torch" where they failed (from now on)."""
        try:
            triton_statistics()[0].row(tensor, self.bins, row)
            return "triton"
        except Exception as exc:
            if self.strict or isinstance(exc, _OUT_OF_MEMORY):
                raise  # out of memory: this capture is a gap; the kernels stay for the next one
            self._triton_failed = "the Triton kernels failed (%s: %s)" % (type(exc).__name__, exc)
            self.fallbacks.append(self._triton_failed + "; torch ops compute the statistics from now on, "
                                  "several times slower on a GPU")
            return "torch"

    def take(self, with_backend=False):
        """Every entry of the step as (fields, row), or (fields, row, backend); device rows come
        back with one copy and one wait per device."""
        host = {}
        for device, (rows, count) in self._device.items():
            if count == 0:
                continue
            pinned = self._pinned.get(device)
            if pinned is None or pinned.shape[0] < count:
                pinned = torch.empty(rows.shape, dtype=torch.float64,
                                     pin_memory=device.type == "cuda" and torch.cuda.is_available())
                self._pinned[device] = pinned
            if device.type == "cuda":
                current = torch.cuda.current_stream(device)
                for stream in self._streams.pop(device, ()):
                    if stream != current:
                        current.wait_stream(stream)
            pinned[:count].copy_(rows[:count], non_blocking=True)
            if device.type == "cuda":
                torch.cuda.current_stream(device).synchronize()
            host[device] = pinned[:count].tolist()
        out = []
        for fields, row, place, backend in self._entries:
            row = row if place is None else host[place[0]][place[1]]
            out.append((fields, row, backend) if with_backend else (fields, row))
        self._entries = []
        for slot in self._device.values():
            slot[1] = 0
        return out


_public = {}
_public_lock = threading.Lock()


def tensor_statistics(tensor, bins=64, backend="auto"):
    """What HookScope records for `tensor` (a hooked capture's row, through the same code) as a
    dict: min, max, mean, std (n-1), l2, zeros (the fraction of exact zeros), nan and inf
    (counts), lo and hi (the histogram's edges), hist (`bins` counts of the finite values),
    amax (the largest finite |value|), f16_overflow, f16_underflow, e4m3_underflow and
    e5m2_underflow (counts of the finite values those formats would lose: docs/export-format.md)
    and backend ("native", "torch" or "triton": which one computed it).

    Min, max and the moments are over the finite values (NaN where there is none). backend
    "auto" picks as a hooked capture does; a named one that cannot take the tensor raises
    ValueError saying why. On a GPU this waits for the device (it returns numbers)."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError("tensor_statistics needs a torch.Tensor, not %s" % type(tensor).__name__)
    if not isinstance(bins, int) or not 1 <= bins <= 4096:
        raise ValueError("bins must be an integer from 1 to 4096, not %r" % (bins,))
    if tensor.layout != torch.strided:
        raise ValueError("tensor_statistics needs a dense (strided) tensor, not a %s one" % tensor.layout)
    with _public_lock:
        step = _public.get((bins, backend))
        if step is None:
            step = _public[(bins, backend)] = StepStatistics(bins=bins, backend=backend, strict=True)
        try:
            step.add("", tensor.detach())
        finally:
            taken = step.take(with_backend=True)
    _, row, used = taken[0]
    out = {name: row[i] for i, name in FIELDS}
    out.update(nan=int(row[6]), inf=int(row[7]), hist=[int(v) for v in row[HEADER:HEADER + bins]], backend=used)
    out.update((name, int(row[i])) for i, name in PRECISION)
    return out


def entry_text(fields, row, bins):
    """A `stats` entry as JSON text (written by hand: json.dumps costs more than the rest)."""
    head = ",".join('"%s":%s' % (name, number_text(row[i])) for i, name in FIELDS)
    counts = ",".join('"%s":%d' % (name, int(row[i])) for i, name in PRECISION)
    hist = ",".join(str(int(v)) for v in row[HEADER:HEADER + bins])
    return '{%s,%s,"nan":%d,"inf":%d,%s,"hist":[%s]}' % (fields, head, int(row[6]), int(row[7]), counts, hist)
