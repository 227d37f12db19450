"""A capture's row computed on the GPU by two fused Triton kernels, at the memory's speed.

Imported only where Triton imports (it ships with PyTorch's CUDA builds): nothing here is
compiled by HookScope's build. The row's meanings are _stats's (docs/export-format.md).

- Pass 1 reads the values once: per program the finite min and max (in the values' working
  precision), the sum and the sum of squares (float64, from block sums in the working
  precision: a block that overflows it is summed again in float64), the finite, zero, NaN and
  Inf counts. The last program to finish (an acquire-release counter) folds every program's
  partials in one fixed order, so results are the same run to run, and writes the row's head:
  min, max, mean, L2, zero fraction, NaN, Inf and the histogram's low and high edges.
- Pass 2 reads the values once more, and the low and high edges and the mean from the row in
  device memory (no host synchronisation): per program a histogram (tl.histogram, one atomic
  per bin per program into int64 counters), the second moment about the mean and the sum of
  the differences (the corrected two-pass algorithm: it takes out what pass 1's mean is off by).
  Its last program folds them, writes mean, std and the counts, and sets the counters back to zero.
  The same pass counts the finite values float16 would overflow or flush, and those E4M3 and
  E5M2 would flush after scaling the tensor's amax (pass 1's) to the format's largest value.

Two launches a capture; the scratch they share (partials, counters) is allocated once per
device and stream and left zeroed by the kernels themselves.
"""

import threading

import torch
import triton
import triton.language as tl

from ._stats_rows import HEADER, dense  # the row's layout (core/kernels/RowLayout.h)

BLOCK = 2048          # values a program reads per iteration (at most 118 registers a thread on sm_90, no spills)
WARPS = 8
PROGRAMS_PER_SM = 4   # programs per multiprocessor, at most
PARTIALS = 8          # pass 1's per program: min, max, sum, squares, zeros, nan, inf (one spare); pass 2's six

_INF = tl.constexpr(float("inf"))
_FLT_MAX = tl.constexpr(3.4028234663852886e38)
_FLT_MIN = tl.constexpr(1.1754943508222875e-38)
_DBL_MAX = tl.constexpr(1.7976931348623157e308)
_TINY_SUM = tl.constexpr(2.0 ** -80)
_CLOSE_SPAN = tl.constexpr(2.0 ** -20)
_NPART = tl.constexpr(PARTIALS)
_HEADER = tl.constexpr(HEADER)
_F16_LARGEST = tl.constexpr(65504.0)
_F16_SMALLEST = tl.constexpr(2.0 ** -24)


@triton.jit
def _sums(f, nonzero):
    """Sum and sum of squares of a block (its non-finite values already zero) as float64:
    summed in the block's precision, again in float64 where that overflowed, or where squares
    may have underflowed (below 2^-80 with a non-zero value: no float32 square under 2^-126
    then moves the sum by more than 2^-35 of itself)."""
    s = tl.sum(f, axis=0).to(tl.float64)
    q = tl.sum(f * f, axis=0).to(tl.float64)
    if (s != s) | (q != q) | (tl.abs(s) == _INF) | (q == _INF) | (nonzero & (q < _TINY_SUM)):
        g = f.to(tl.float64)
        s = tl.sum(g, axis=0)
        q = tl.sum(g * g, axis=0)
    return s, q


@triton.jit
def _clamped_index(at, top):
    """A bin position as a bin index in [0, top]: NaN to 0, never out of range on any backend."""
    at = tl.where(at > 0, at, 0.0)
    at = tl.minimum(at, top)
    return at.to(tl.int32)


@triton.jit
def _flush_below(amax, largest: tl.constexpr, smallest: tl.constexpr, WORK: tl.constexpr, WIDE: tl.constexpr):
    """_stats.flush_below: the smallest WORK value w with fl64(w * largest) >= fl64(amax * smallest),
    found among the quotient rounded to WORK and its neighbours (units in the last place, by
    their bits: w is positive); 0 for an amax of 0 or NaN."""
    edge = amax * smallest
    c = (edge / largest).to(WORK)
    if WIDE:
        bits = c.to(tl.int64, bitcast=True)
    else:
        bits = c.to(tl.int32, bitcast=True)
    w = (bits + 1).to(WORK, bitcast=True)
    for k in tl.static_range(3):
        candidate = tl.maximum(bits - k, 0).to(WORK, bitcast=True)
        w = tl.where(candidate.to(tl.float64) * largest >= edge, candidate, w)
    return tl.where(edge > 0, w, 0.0).to(WORK)


@triton.jit
def _blocks(n, pid, programs, BLOCK: tl.constexpr):
    """How many blocks a program reads: programs take the blocks of BLOCK values in turn."""
    return tl.cdiv(n - pid * BLOCK, programs * BLOCK)


@triton.jit
def _load_block(x_ptr, n, i, pid, programs, WORK: tl.constexpr, BLOCK: tl.constexpr):
    """A program's i-th block in the working precision: (values, start, inside n, finite).
    Offsets are int64, for tensors past 2^31 values."""
    start = (pid.to(tl.int64) + i * programs.to(tl.int64)) * BLOCK
    inside = start + tl.arange(0, BLOCK) < n
    v = tl.load(x_ptr + start + tl.arange(0, BLOCK), mask=inside, other=0).to(WORK)
    return v, start, inside, inside & (tl.abs(v) < _INF)  # NaN compares false


@triton.jit(do_not_specialize=["n"])
def stats_pass1(x_ptr, n, row_ptr, part_ptr, count_ptr,
                WORK: tl.constexpr, BLOCK: tl.constexpr, PMAX: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    # Min and max are kept per lane and reduced once; a block's sums and its zero, NaN and Inf
    # counts (16 bits each, packed in one int64) are reduced per block.
    lo = tl.full([BLOCK], float("inf"), WORK)
    hi = tl.full([BLOCK], float("-inf"), WORK)
    total = tl.zeros((), tl.float64)
    squares = tl.zeros((), tl.float64)
    zeros = tl.zeros((), tl.int64)
    nans = tl.zeros((), tl.int64)
    infs = tl.zeros((), tl.int64)
    for i in range(0, _blocks(n, pid, programs, BLOCK)):
        v, start, inside, ok = _load_block(x_ptr, n, i, pid, programs, WORK, BLOCK)
        lo = tl.minimum(lo, tl.where(ok, v, float("inf")))
        hi = tl.maximum(hi, tl.where(ok, v, float("-inf")))
        packed = tl.sum((inside & (v == 0)).to(tl.int64) + ((inside & (v != v)).to(tl.int64) << 16)
                        + ((tl.abs(v) == _INF).to(tl.int64) << 32), axis=0)
        block_zeros = packed & 0xFFFF
        block_nans = (packed >> 16) & 0xFFFF
        block_infs = packed >> 32
        zeros += block_zeros
        nans += block_nans
        infs += block_infs
        values = tl.minimum(n - start, BLOCK)
        s, q = _sums(tl.where(ok, v, 0.0), block_zeros + block_nans + block_infs < values)
        total += s
        squares += q
    mine = part_ptr + pid * _NPART
    tl.store(mine + 0, tl.min(lo, axis=0).to(tl.float64))
    tl.store(mine + 1, tl.max(hi, axis=0).to(tl.float64))
    tl.store(mine + 2, total)
    tl.store(mine + 3, squares)
    tl.store(mine + 4, zeros.to(tl.float64))
    tl.store(mine + 5, nans.to(tl.float64))
    tl.store(mine + 6, infs.to(tl.float64))
    tl.debug_barrier()
    if tl.atomic_add(count_ptr, 1, sem="acq_rel") == programs - 1:
        tl.debug_barrier()
        p = tl.arange(0, PMAX)
        have = p < programs
        parts = part_ptr + p * _NPART
        lo64 = tl.min(tl.load(parts + 0, mask=have, other=float("inf"), volatile=True), axis=0)
        hi64 = tl.max(tl.load(parts + 1, mask=have, other=float("-inf"), volatile=True), axis=0)
        total = tl.sum(tl.load(parts + 2, mask=have, other=0.0, volatile=True), axis=0)
        squares = tl.sum(tl.load(parts + 3, mask=have, other=0.0, volatile=True), axis=0)
        zero_count = tl.sum(tl.load(parts + 4, mask=have, other=0.0, volatile=True), axis=0)
        nan_count = tl.sum(tl.load(parts + 5, mask=have, other=0.0, volatile=True), axis=0)
        inf_count = tl.sum(tl.load(parts + 6, mask=have, other=0.0, volatile=True), axis=0)
        count = n.to(tl.float64) - nan_count - inf_count
        some = count > 0
        nan = float("nan")
        # The histogram's range: the finite min and max, widened around a single value.
        low = tl.where(some, lo64, 0.0)
        high = tl.where(some, hi64, 0.0)
        flat = some & (high <= low)
        pad = tl.maximum(tl.abs(low) * 1e-6, 0.5)
        low = tl.where(flat, low - pad, low)
        high = tl.where(flat, high + pad, high)
        tl.store(row_ptr + 0, tl.where(some, lo64, nan))
        tl.store(row_ptr + 1, tl.where(some, hi64, nan))
        tl.store(row_ptr + 2, total / count)  # NaN with no finite value
        tl.store(row_ptr + 3, 0.0)
        tl.store(row_ptr + 4, tl.sqrt(squares))
        tl.store(row_ptr + 5, zero_count / n.to(tl.float64))
        tl.store(row_ptr + 6, nan_count)
        tl.store(row_ptr + 7, inf_count)
        tl.store(row_ptr + 8, low)
        tl.store(row_ptr + 9, high)
        tl.store(row_ptr + 10, tl.where(some, tl.maximum(tl.abs(lo64), tl.abs(hi64)), nan))
        tl.atomic_xchg(count_ptr, 0)


@triton.jit(do_not_specialize=["n", "bins"])
def stats_pass2(x_ptr, n, bins, row_ptr, part_ptr, hist_ptr, count_ptr,
                WORK: tl.constexpr, WIDE: tl.constexpr, BLOCK: tl.constexpr, PMAX: tl.constexpr,
                NUM_BINS: tl.constexpr):
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    mean = tl.load(row_ptr + 2)
    low = tl.load(row_ptr + 8)
    high = tl.load(row_ptr + 9)
    span = high - low
    # How a value becomes a bin (docs/export-format.md): (v - low) * scale in the working
    # precision; float32 only where its scale and span are normal float32 numbers, else in
    # float64, where a span past float64's range is halved first (k).
    if WIDE:
        k = tl.where(span <= _DBL_MAX, 1.0, 0.5)
        scale = bins / tl.where(span > 0, high * k - low * k, 1.0)
        narrow = False
    else:
        k = tl.full((), 1.0, tl.float64)
        scale = bins / tl.where(span > 0, span, 1.0)
        narrow = (span <= _FLT_MAX) & (scale <= _FLT_MAX) & (scale >= _FLT_MIN)
    low_w = low.to(WORK)
    scale_w = scale.to(WORK)
    # The mean as two working-precision parts: a difference from the rounded mean alone would
    # carry its rounding (half an ulp of 1000 is a third of a spread of 1e-4 around it).
    mean_w = mean.to(WORK)
    mean_rest = (mean - mean_w.to(tl.float64)).to(WORK)
    close = span < _CLOSE_SPAN
    top = (bins - 1).to(tl.float32)
    amax = tl.load(row_ptr + 10)
    e4m3_below = _flush_below(amax, 448.0, 2.0 ** -9, WORK, WIDE)
    e5m2_below = _flush_below(amax, 57344.0, 2.0 ** -16, WORK, WIDE)
    f16_over = tl.zeros((), tl.int64)
    f16_under = tl.zeros((), tl.int64)
    e4m3 = tl.zeros((), tl.int64)
    e5m2 = tl.zeros((), tl.int64)
    # Lanes that hold no finite value are counted in bin 0; the last program takes them out.
    hist = tl.zeros([NUM_BINS], tl.int32)
    m2 = tl.zeros((), tl.float64)
    residual = tl.zeros((), tl.float64)  # the sum of the differences: what the mean is off by, times n
    for i in range(0, _blocks(n, pid, programs, BLOCK)):
        v, _, _, ok = _load_block(x_ptr, n, i, pid, programs, WORK, BLOCK)
        if close:  # squares of differences this small underflow float32: float64 for them all
            d = tl.where(ok, v.to(tl.float64) - mean, 0.0)
            residual += tl.sum(d, axis=0)
            m2 += tl.sum(d * d, axis=0)
        else:
            s, q = _sums(tl.where(ok, (v - mean_w) - mean_rest, 0.0), False)
            residual += s
            m2 += q
        if narrow:
            index = _clamped_index((v - low_w) * scale_w, top)
        else:
            index = _clamped_index((v.to(tl.float64) * k - low * k) * scale, top.to(tl.float64))
        hist += tl.histogram(tl.where(ok, index, 0), NUM_BINS)
        # A block's four counts (16 bits each, packed in one int64) in one reduction.
        a = tl.abs(v)
        nonzero = ok & (a > 0)
        packed = tl.sum((ok & (a > _F16_LARGEST)).to(tl.int64)
                        + ((nonzero & (a < _F16_SMALLEST)).to(tl.int64) << 16)
                        + ((nonzero & (a < e4m3_below)).to(tl.int64) << 32)
                        + ((nonzero & (a < e5m2_below)).to(tl.int64) << 48), axis=0)
        f16_over += packed & 0xFFFF
        f16_under += (packed >> 16) & 0xFFFF
        e4m3 += (packed >> 32) & 0xFFFF
        e5m2 += (packed >> 48) & 0xFFFF
    slots = tl.arange(0, NUM_BINS)
    tl.atomic_add(hist_ptr + slots, hist.to(tl.int64), mask=slots < bins)
    mine = part_ptr + pid * _NPART
    tl.store(mine + 0, m2)
    tl.store(mine + 1, residual)
    tl.store(mine + 2, f16_over.to(tl.float64))
    tl.store(mine + 3, f16_under.to(tl.float64))
    tl.store(mine + 4, e4m3.to(tl.float64))
    tl.store(mine + 5, e5m2.to(tl.float64))
    tl.debug_barrier()
    if tl.atomic_add(count_ptr, 1, sem="acq_rel") == programs - 1:
        tl.debug_barrier()
        p = tl.arange(0, PMAX)
        have = p < programs
        parts = part_ptr + p * _NPART
        m2 = tl.sum(tl.load(parts + 0, mask=have, other=0.0, volatile=True), axis=0)
        residual = tl.sum(tl.load(parts + 1, mask=have, other=0.0, volatile=True), axis=0)
        for j in tl.static_range(4):
            tl.store(row_ptr + 11 + j, tl.sum(tl.load(parts + 2 + j, mask=have, other=0.0, volatile=True), axis=0))
        count = n.to(tl.float64) - tl.load(row_ptr + 6) - tl.load(row_ptr + 7)
        # The corrected two-pass algorithm: the mean from pass 1's float32 block sums may be off
        # by a part of a tight spread; the differences' own sum says by how much.
        some = count > 0
        shift = tl.where(some, residual / tl.maximum(count, 1.0), 0.0)
        m2 = tl.maximum(m2 - shift * residual, 0.0)
        tl.store(row_ptr + 2, mean + shift)
        std = tl.where(count > 1, tl.sqrt(m2 / tl.maximum(count - 1.0, 1.0)), 0.0)
        # Values, none of them finite: no spread and no norm to show (0 would read as vanishing).
        tl.store(row_ptr + 3, tl.where(some, std, float("nan")))
        tl.store(row_ptr + 4, tl.where(some, tl.load(row_ptr + 4), float("nan")))
        lanes = tl.sum(tl.where(have, _blocks(n, p, programs, BLOCK), 0).to(tl.int64), axis=0) * BLOCK
        counts = tl.atomic_xchg(hist_ptr + slots, 0, mask=slots < bins)
        counts = tl.where(slots == 0, counts - (lanes - count.to(tl.int64)), counts)
        tl.store(row_ptr + _HEADER + slots, counts.to(tl.float64), mask=slots < bins)
        tl.atomic_xchg(count_ptr, 0)


_DIRECT = {torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int16, torch.int32,
           torch.int64, torch.uint8}


def _next_power_of_two(n):
    return 1 << max(0, int(n) - 1).bit_length()


def flat_values(t):
    """t's values as a flat tensor Triton can read, without a copy where t is dense (channels_last
    and transposed tensors read as their storage), and its working precision."""
    x = t.detach()
    if x.is_complex():
        x = x.abs()
    if x.dtype == torch.bool:
        x = x.view(torch.uint8)
    wide = x.dtype not in (torch.float32, torch.float16, torch.bfloat16)
    if x.dtype not in _DIRECT:
        x = x.to(torch.float64)
    if dense(x):
        x = x.as_strided((x.numel(),), (1,), x.storage_offset())
    else:
        x = x.reshape(-1).contiguous()
    return x, (tl.float64 if wide else tl.float32), wide


class TritonStatistics:
    """Launches the two passes; holds their scratch per device and stream."""

    def __init__(self, block=BLOCK, max_programs=None, warps=WARPS):
        self.block = block
        self.warps = warps
        self._max_programs = max_programs
        self._scratch = {}
        self._lock = threading.Lock()

    def _programs(self, device):
        if self._max_programs:
            return self._max_programs
        if device.type == "cuda":
            return PROGRAMS_PER_SM * torch.cuda.get_device_properties(device).multi_processor_count
        return 8

    def _scratch_for(self, device, programs, bins):
        stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
        key = (device, stream)
        pmax = max(16, _next_power_of_two(programs))
        held = self._scratch.get(key)
        if held is None or held[0] < pmax or held[3] < bins:
            # Zeroed once; each kernel's last program leaves its counters and counts zero again.
            parts = torch.zeros(pmax * PARTIALS, dtype=torch.float64, device=device)
            counts = torch.zeros(max(bins, held[3] if held else 0) + 2, dtype=torch.int64, device=device)
            held = self._scratch[key] = (pmax, parts, counts, counts.numel() - 2)
        return held

    def row(self, t, bins, row):
        """Writes t's row into `row` (float64, HEADER + bins, contiguous, on t's device)."""
        with self._lock:  # the passes of one tensor share the scratch: no other tensor's between them
            for _, launch in self.launches(t, bins, row):
                launch()

    def launches(self, t, bins, row):
        """The passes that compute t's row, as (name, function that launches it): row() runs
        them in order; the benchmark times each. Run them holding the lock."""
        x, work, wide = flat_values(t)
        n = x.numel()
        if n == 0:
            def empty():
                row.zero_()
                row[0:3].fill_(float("nan"))
                row[10] = float("nan")
            return [("empty", empty)]
        device = x.device
        # A program's counts are int32: no program may see 2^31 values.
        programs = min(triton.cdiv(n, self.block), max(self._programs(device), triton.cdiv(n, 1 << 30)))
        pmax, parts, counts, _ = self._scratch_for(device, programs, bins)
        if pmax < programs:
            raise ValueError("HookScope's Triton statistics: %d programs exceed the scratch's %d" % (programs, pmax))
        hist, counter = counts[:bins], counts[-2:]

        def first():
            stats_pass1[(programs,)](x, n, row, parts, counter, WORK=work, BLOCK=self.block, PMAX=pmax,
                                     num_warps=self.warps)

        def second():
            stats_pass2[(programs,)](x, n, bins, row, parts, hist, counter[1:], WORK=work, WIDE=wide,
                                     BLOCK=self.block, PMAX=pmax, NUM_BINS=max(2, _next_power_of_two(bins)),
                                     num_warps=self.warps)
        return [("pass 1", first), ("pass 2", second)]
