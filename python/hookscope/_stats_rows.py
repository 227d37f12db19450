"""A capture's row: its layout, and the two ways of computing it that need nothing but torch and
HookScope's C++ kernel (the native and torch-ops backends: _backends).

Each capture becomes one row: min, max, mean, std (n-1), L2 norm, zero fraction, NaN count,
Inf count, the histogram's low and high edges, amax (the largest finite |value|), the counts of
finite values that float16 would overflow or flush and that E4M3 and E5M2 would flush after
per-tensor amax scaling, then the counts of its bins (core/kernels/RowLayout.h: the same order
for C++, CUDA and Python, checked by tests/python/test_row_layout.py). The meanings are
HookScope's (docs/export-format.md): moments, min, max and norm over the finite values; the
histogram of the finite values in equal bins between edges that cover the finite min and max, a
bin being min((v - low) * scale, bins - 1) in the values' precision (float32 for float16,
bfloat16 and float32; float64 otherwise), with the fallback bin_plan() says where float32
cannot hold the scale.
"""

import ctypes
import glob
import os
import struct
import sys

import torch

# The row's header by the names a `stats` entry and tensor_statistics() give its fields, in the
# order of core/kernels/RowLayout.h; the bins' counts follow.
LAYOUT = ("min", "max", "mean", "std", "l2", "zeros", "nan", "inf", "lo", "hi", "amax",
          "f16_overflow", "f16_underflow", "e4m3_underflow", "e5m2_underflow")
HEADER = len(LAYOUT)
_COUNTS = ("nan", "inf", "f16_overflow", "f16_underflow", "e4m3_underflow", "e5m2_underflow")
# The float fields, and the precision counts (nan and inf are counts too: docs/export-format.md).
FIELDS = tuple((i, name) for i, name in enumerate(LAYOUT) if name not in _COUNTS)
PRECISION = tuple((i, name) for i, name in enumerate(LAYOUT) if name in _COUNTS[2:])
_CHUNK = 1 << 20  # values per pass of the torch-ops path: bounds its temporary memory (~40 MiB)
_ABI = 2
_LIBRARY_NAME = "libhookscope_stats.so"
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
# A row's float64 values as the wire's bytes (little-endian): where the machine's own order is
# that, a row the kernel wrote is sent as it lies in memory, never made Python floats (a row of
# 271 values: 0.3 us as bytes, 25 us as a list from ctypes, 6.6 us more to pack it again).
RAW_IS_WIRE = sys.byteorder == "little"
_row_structs = {}


def row_struct(width):
    """The struct of a row of `width` float64 values, little-endian (made once a width)."""
    packer = _row_structs.get(width)
    if packer is None:
        packer = _row_structs[width] = struct.Struct("<%dd" % width)
    return packer


def row_values(row):
    """A row as a list of floats, whether it is one already or its raw bytes."""
    if isinstance(row, bytes):
        return list(row_struct(len(row) // 8).unpack(row))
    return row


def row_bytes(row):
    """A row as its little-endian bytes, whether it is a list of floats or its raw bytes."""
    if isinstance(row, bytes):
        return row
    return row_struct(len(row)).pack(*row)


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
                try:  # a step's small captures read in one call (libraries since issue 58)
                    many = candidate.hookscope_stats_many
                    many.restype = ctypes.c_int
                    many.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                     ctypes.c_void_p, ctypes.c_void_p]
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


_row_types = {}


def _row_type(width):
    """ctypes' array of `width` doubles (made once a width)."""
    kind = _row_types.get(width)
    if kind is None:
        kind = _row_types[width] = ctypes.c_double * width
    return kind


def native_row(lib, t, bins, cores=1, shared=None, out=None, raw=False):
    """A CPU tensor's row through HookScope's kernel (a list of HEADER + bins floats, or with
    `raw` where RAW_IS_WIRE, their bytes); shared: (low, high, amax) floats of the whole tensor it
    is a shard of (torch_row's shared). With `out` (a contiguous float64 CPU tensor of HEADER +
    bins), written there instead."""
    if raw and RAW_IS_WIRE and shared is None and out is None and t.dtype is torch.float32 and t.is_contiguous():
        # A capture's common case: its memory read as it is (reading needs no detached view).
        row = _row_type(HEADER + bins)()
        if lib.hookscope_stats(t.data_ptr(), t.numel(), 0, bins, cores, row) != 0:
            raise ValueError("HookScope's statistics kernel refused a tensor of %d values" % t.numel())
        return bytes(row)
    x = t.detach()
    if x.is_complex():
        x = x.abs()
    work = _work_dtype(x)
    if x.dtype != work:
        x = x.to(work)
    x = x.contiguous()
    row = _row_type(HEADER + bins)() if out is None else _row_type(HEADER + bins).from_address(out.data_ptr())
    code = 0 if work == torch.float32 else 1
    if shared is not None:
        status = lib.hookscope_stats_in_range(ctypes.c_void_p(x.data_ptr()), x.numel(), code, bins, cores,
                                              (ctypes.c_double * 3)(*shared), row)
    else:
        status = lib.hookscope_stats(ctypes.c_void_p(x.data_ptr()), x.numel(), code, bins, cores, row)
    if status != 0:
        raise ValueError("HookScope's statistics kernel refused a tensor of %d values" % x.numel())
    if out is not None:
        return None
    if raw and RAW_IS_WIRE:
        return bytes(row)
    return list(row_struct(HEADER + bins).unpack_from(row))


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


def dense(x):
    """Whether x's values fill one stretch of its storage (any order), with no gap or overlap,
    starting at its first element: a kernel reads channels_last and transposed tensors as their
    storage, without a copy."""
    if x.is_contiguous() or x.is_contiguous(memory_format=torch.channels_last):
        return True
    expected = 1
    for size, stride in sorted(((s, st) for s, st in zip(x.shape, x.stride()) if s != 1), key=lambda p: p[1]):
        if stride != expected:
            return False
        expected *= size
    return True
