"""The hookscope package's statistics, computed in the training process, against HookScope's
C++ kernel (libhookscope_stats, the engine's own code) on the same tensors, and against plain
torch for their meanings.

Runs with any Python with torch (ctest: the venv's PyTorch 2.x and Debian's 1.13).
HOOKSCOPE_STATS_LIBRARY names the kernel's library; the CUDA test skips without a GPU.
"""
import math
import os
import sys

import pytest
import torch
from deadlines import DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from hookscope import _stats  # noqa: E402

BINS = 64
LIB = _stats.native_library()
needs_kernel = pytest.mark.skipif(LIB is None and not os.environ.get("HOOKSCOPE_STATS_LIBRARY"),
                                  reason="libhookscope_stats is not built")


def tensors():
    """The cases of the issue: random, with NaN/Inf, all-zero, one element, empty, a huge range,
    half precision, and sizes that span several passes of the torch-ops path."""
    g = torch.Generator().manual_seed(7)
    cases = {
        "random": torch.randn(1000, generator=g),
        "shifted": torch.randn(5000, generator=g) * 0.01 + 1000.0,
        "with nan and inf": torch.tensor([1.0, float("nan"), -2.0, float("inf"), 0.0, float("-inf"), 3.5]),
        "only non-finite": torch.tensor([float("nan"), float("inf")]),
        "all zero": torch.zeros(300),
        "one element": torch.tensor([2.5]),
        "empty": torch.zeros(0, 4),
        "huge range": torch.tensor([1e-30, -3e30, 7.0, 1e30, -1e-20]),
        "float16": (torch.randn(4096, generator=g) * 3).half(),
        "bfloat16": (torch.randn(4096, generator=g) * 3).bfloat16(),
        "float64": torch.randn(777, generator=g, dtype=torch.float64) * 1e5,
        "int64": torch.randint(-50, 50, (999,), generator=g),
        "non-contiguous": torch.randn(64, 48, generator=g).t(),
        "several passes": torch.randn(_stats._CHUNK * 2 + 12345, generator=g),
    }
    big = torch.randn(300000, generator=g)
    big[::1000] = float("nan")
    cases["large with nan"] = big
    return cases


def edges(row):
    lo, hi = row[8], row[9]
    return [lo + (hi - lo) * i / BINS for i in range(BINS + 1)]


def assert_rows_agree(name, ours, kernel, values):
    """Counts and min/max exactly, moments to 1e-6 relative, bins exactly away from their edges."""
    for i, stat in ((0, "min"), (1, "max"), (8, "low"), (9, "high")):
        assert (math.isnan(ours[i]) and math.isnan(kernel[i])) or ours[i] == kernel[i], (name, stat, ours[i], kernel[i])
    for i, stat in ((5, "zero fraction"), (6, "nan"), (7, "inf"), (10, "amax")) + _stats.PRECISION:
        assert (math.isnan(ours[i]) and math.isnan(kernel[i])) or ours[i] == kernel[i], (name, stat, ours[i], kernel[i])
    scale = kernel[4] / math.sqrt(max(values.numel(), 1))  # a mean near zero is judged on the values' size
    for i, stat in ((2, "mean"), (3, "std"), (4, "l2")):
        a, b = ours[i], kernel[i]
        if a == b:
            continue
        assert not (math.isinf(a) or math.isinf(b)), (name, stat, a, b)  # e.g. squares past float64's range
        if math.isnan(a) or math.isnan(b):
            assert math.isnan(a) and math.isnan(b), (name, stat, a, b)
            continue
        assert abs(a - b) <= 1e-6 * max(abs(a), abs(b), scale) + 1e-300, (name, stat, a, b)
    a, b = ours[_stats.HEADER:], kernel[_stats.HEADER:]
    if a != b:
        # Only a value within float rounding of a bin edge may land in the neighbouring bin.
        flat = values.detach().reshape(-1).double()
        e = torch.tensor(edges(kernel), dtype=torch.float64)
        near = ((flat[:, None] - e[None, :]).abs() <= 1e-6 * (e[-1] - e[0])).any(dim=1)
        assert sum(a) == sum(b), name
        assert sum(abs(x - y) for x, y in zip(a, b)) <= 2 * int(near.sum()), (name, a, b)


def reference(values):
    """What the statistics mean, in plain float64 torch (docs/export-format.md)."""
    x = values.detach().reshape(-1).double()
    finite = x[torch.isfinite(x)]
    n = finite.numel()
    none = x.numel() > 0 and n == 0  # values, none of them finite: no spread, no norm
    a = finite.abs()
    amax = a.max().item() if n else math.nan
    nonzero = a[a > 0]
    return {"min": finite.min().item() if n else math.nan, "max": finite.max().item() if n else math.nan,
            "mean": finite.mean().item() if n else math.nan,
            "std": math.nan if none else finite.std().item() if n > 1 else 0.0,
            "l2": math.nan if none else finite.norm().item(), "zeros": (x == 0).sum().item() / max(x.numel(), 1),
            "nan": torch.isnan(x).sum().item(), "inf": torch.isinf(x).sum().item(), "count": n, "amax": amax,
            "f16_overflow": (a > 65504).sum().item(), "f16_underflow": (nonzero < 2.0 ** -24).sum().item(),
            "e4m3_underflow": (nonzero * 448 < amax * 2.0 ** -9).sum().item() if n else 0,
            "e5m2_underflow": (nonzero * 57344 < amax * 2.0 ** -16).sum().item() if n else 0}


def torch_ops_row(t):
    row = torch.empty(_stats.HEADER + BINS, dtype=torch.float64, device=t.device)
    _stats.torch_row(t, BINS, row)
    return row.tolist()


@pytest.mark.parametrize("name", list(tensors()))
def test_torch_ops_statistics_mean_what_the_export_says(name):
    t = tensors()[name]
    row, ref = torch_ops_row(t), reference(t)
    for i, stat in ((0, "min"), (1, "max"), (2, "mean"), (3, "std"), (4, "l2"), (5, "zeros"), (6, "nan"), (7, "inf")):
        a, b = row[i], ref[stat]
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-9 * max(abs(a), abs(b), ref["l2"] / 1e3), \
            (name, stat, a, b)
    for i, stat in ((10, "amax"),) + _stats.PRECISION:  # exactly
        assert (math.isnan(row[i]) and math.isnan(ref[stat])) or row[i] == ref[stat], (name, stat, row[i], ref[stat])
    assert sum(row[_stats.HEADER:]) == ref["count"]  # every finite value lands in one bin


@needs_kernel
@pytest.mark.parametrize("name", list(tensors()))
def test_torch_ops_equal_hookscopes_kernel(name):
    assert LIB is not None, "HOOKSCOPE_STATS_LIBRARY=%s does not load" % os.environ.get("HOOKSCOPE_STATS_LIBRARY")
    t = tensors()[name]
    kernel = _stats.native_row(LIB, t, BINS)
    assert_rows_agree(name, torch_ops_row(t), kernel, t)
    # One core or several: the same counts and bounds; sums merged from parts differ in the last bits.
    one_core = _stats.native_row(LIB, t, BINS, cores=0)
    for i, (a, b) in enumerate(zip(one_core, kernel)):
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-12 * abs(b), (name, i, a, b)


def test_a_step_of_rows_comes_back_in_order():
    step = _stats.StepStatistics(bins=BINS, use_native=False)
    cases = tensors()
    for i, name in enumerate(cases):
        step.add('"module":%d' % i, cases[name], defer=i % 2 == 1)  # half down the buffer path
    taken = step.take()
    assert [fields for fields, _ in taken] == ['"module":%d' % i for i in range(len(cases))]
    for (fields, row), name in zip(taken, cases):
        assert [repr(v) for v in row] == [repr(v) for v in torch_ops_row(cases[name])], name
    assert len(step) == 0 and step.take() == []


@pytest.mark.parametrize("use_native", [True, False])
def test_the_raw_rows_the_wire_gets_are_the_rows_packed(use_native):
    """take_raw() (the binary wire's rows: the kernel's bytes) and take() (lists of floats) hold
    the same values, to the bit: rows computed at once, down the buffer path, and shared."""
    import struct
    cases = tensors()
    steps = []
    for raw in (False, True):
        step = _stats.StepStatistics(bins=BINS, use_native=use_native)
        for i, name in enumerate(cases):
            step.add('"module":%d' % i, cases[name], defer=i % 3 == 1)
            step.add('"module":%d,"again":1' % i, cases[name])  # read already: the row shared
        steps.append(step.take_raw() if raw else step.take())
    lists, raws = steps
    assert [fields for fields, _ in lists] == [fields for fields, _ in raws] and len(raws) == 2 * len(cases)
    width = _stats.HEADER + BINS
    for (fields, values), (_, raw) in zip(lists, raws):
        assert isinstance(values, list) and isinstance(raw, bytes) and len(raw) == 8 * width, fields
        assert raw == struct.pack("<%dd" % width, *values), fields


@pytest.mark.parametrize("host", [False, True])
def test_a_steps_captures_leave_the_garbage_collector_nothing_to_follow(host):
    """A step's entries (thousands a step in a model of thousands of modules) are tuples of texts,
    bytes and numbers: the collector stops tracking them at its first pass, so they do not bring
    its full collections sooner (lists did: 6.6 ms a step at 602 captures, docs/performance.md).
    Nor do its reads: only the last one is remembered (a weak reference a read, kept to the
    step's end, made its collections at 9,602 captures a step a sixth of it). host: the
    captures' common path (add_host, as a hook takes them), else add."""
    import gc
    step = _stats.StepStatistics(bins=BINS)
    add = (lambda fields, t: step.add_host(fields, t) or step.add(fields, t)) if host else step.add
    values = [torch.randn(16, 32) for _ in range(50)]
    add('"module":-2', torch.randn(3))  # the backend chosen, once
    add('"module":-1', torch.randn(3))  # and where captures are copied to be read (add_host), once
    gc.collect()
    tracked = len(gc.get_objects())
    for i, t in enumerate(values):
        add('"module":%d' % i, t)
        add('"module":%d,"again":1' % i, t)  # right after: the first one's row
    gc.collect()
    assert len(gc.get_objects()) - tracked <= 2  # the last read: its tuple and weak reference
    entries = step._entries[2:]
    assert len(entries) == 100 and [e[3] for e in entries[1::2]] == ["shared"] * 50
    assert [e for e in entries if gc.is_tracked(e)] == []
    add('"module":0,"later":1', values[0])  # not right after its last read: read again, equal
    rows = step.take_raw()[2:]
    assert step._last is None and len(rows) == 101
    assert rows[-1][1] == rows[0][1] == rows[1][1] and rows[2][1] != rows[0][1]


def _hooked_step():
    """A StepStatistics taking captures as a hook does (add_host, else add), its CPU backend
    chosen and its copies' buffer made by two first captures."""
    step = _stats.StepStatistics(bins=BINS)
    add = lambda fields, t: step.add_host(fields, t) or step.add(fields, t)  # noqa: E731
    add('"module":-2', torch.randn(3))
    add('"module":-1', torch.randn(3))
    return step, add


@needs_kernel
def test_small_cpu_captures_are_copied_in_the_hook_and_read_at_the_steps_end_as_they_were():
    """A small float32 capture is copied as its hook runs and read with the step's others in one
    kernel call when the rows are taken: its row is the one its values had in the hook, bit for
    bit, whatever changes the tensor in place after it (an in-place ReLU on a Linear's output)."""
    step, add = _hooked_step()
    assert step._snapshots, "HookScope's kernel has no hookscope_stats_many: the library is older than the package"
    cases = {name: t for name, t in tensors().items() if t.dtype == torch.float32 and t.is_contiguous()
             and t.numel() <= _stats.SNAPSHOT_VALUES}
    assert {"random", "with nan and inf", "only non-finite", "all zero", "one element", "empty", "huge range"} <= set(cases)
    expected = []
    for name, t in cases.items():
        t = t.clone()
        add(name, t)
        expected.append((name, _stats.native_row(LIB, t.clone(), BINS, raw=True)))
        t.mul_(-3.0)  # in place, after the hook: the row is still the hook's
        t[:1] = float("nan") if t.numel() else t[:1]
        add(name + " again", t)  # the same tensor at its new version: read again
        expected.append((name + " again", _stats.native_row(LIB, t.clone(), BINS, raw=True)))
        t.zero_()
    assert all(entry[1] is None for entry in step._entries[2:])  # nothing read in the hooks
    assert step.take_raw()[2:] == expected


@needs_kernel
def test_a_full_copy_buffer_is_read_at_once_and_the_rows_stay_in_order(monkeypatch):
    """Past the copies' buffer (4 MiB; 4 KiB here) its copies are read at once and it is used
    again: every row in the order of the captures, a capture of the same tensor right after its
    first sharing that row, and a capture past SNAPSHOT_VALUES read in its hook."""
    monkeypatch.setattr(_stats, "SNAPSHOT_BYTES", 4096)
    step, add = _hooked_step()
    g = torch.Generator().manual_seed(3)
    values = [torch.randn(300, generator=g) * (i + 1) for i in range(9)] + [torch.randn(_stats.SNAPSHOT_VALUES + 1)]
    expected = []
    for i, t in enumerate(values):
        add('"module":%d' % i, t)
        add('"module":%d,"again":1' % i, t)
        row = _stats.native_row(LIB, t, BINS, raw=True)
        expected += [('"module":%d' % i, row), ('"module":%d,"again":1' % i, row)]
    assert step._entries[-2][1] is not None  # the large one, read in its hook
    add('"module":0,"read":1', values[0])
    step._read_snapshots()  # read before the same tensor comes again (as where the backend changes)
    add('"module":0,"read":2', values[0])
    assert step._entries[-1][1] == step._entries[-2][1] and step._entries[-1][3] == "shared"
    row = _stats.native_row(LIB, values[0], BINS, raw=True)
    expected += [('"module":0,"read":1', row), ('"module":0,"read":2', row)]
    assert step.shared_reads == len(values) + 1
    assert step.take_raw()[2:] == expected
    assert not step._snapshots.places and step._snapshots.used == 0


@needs_kernel
def test_copies_the_kernel_refuses_get_the_torch_ops_row(monkeypatch):
    """hookscope_stats_many refusing (it takes any float32 values; a damaged library could): the
    torch ops compute the same copy's row, and the entry says they did."""
    step, add = _hooked_step()
    class Refusing:
        def hookscope_stats_many(self, *args):
            return -1
    step._snapshots.lib = Refusing()
    t = tensors()["with nan and inf"]
    add('"module":0', t)
    add('"module":0,"again":1', t)
    taken = step.take(with_backend=True)[2:]
    assert [(fields, backend) for fields, _, backend in taken] == [('"module":0', "torch"), ('"module":0,"again":1', "shared")]
    assert taken[0][1] == taken[1][1] == torch_ops_row(t)


def test_hookscope_stats_many_refuses_arguments_it_cannot_take():
    lib = LIB
    if lib is None or not hasattr(lib, "hookscope_stats_many"):
        pytest.skip("libhookscope_stats with hookscope_stats_many is not built")
    import ctypes
    values = (ctypes.c_float * 4)(1.0, 2.0, float("nan"), -1.0)
    items = (ctypes.c_int64 * 4)(0, 4, -8, 1)  # the second item's offset is before the buffer
    out = (ctypes.c_double * (2 * (_stats.HEADER + BINS)))()
    status = (ctypes.c_int * 2)()
    assert lib.hookscope_stats_many(ctypes.addressof(values), ctypes.addressof(items), 2, BINS, 0,
                                    ctypes.addressof(out), ctypes.addressof(status)) == 1
    assert list(status) == [0, -1] and out[0] == -1.0 and out[1] == 2.0 and out[6] == 1.0
    for bins in (0, 4097):
        assert lib.hookscope_stats_many(ctypes.addressof(values), ctypes.addressof(items), 1, bins, 0,
                                        ctypes.addressof(out), ctypes.addressof(status)) == -1
    assert lib.hookscope_stats_many(None, None, 0, BINS, 0, None, None) == 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_a_hooked_cuda_step_never_waits_for_the_gpu_inside_a_hook():
    device = torch.device("cuda")
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
    step = _stats.StepStatistics(bins=BINS)
    hooks = [m.register_forward_hook(lambda m, i, o: step.add('"module":0', o)) for m in model]
    x = torch.randn(32, 64, device=device)
    for dtype in (None, torch.bfloat16):
        model(x)  # warm up: allocations and lazy initialisation may wait
        step.take()
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            with torch.autocast("cuda", dtype=dtype or torch.float16, enabled=dtype is not None):
                out = model(x)
                out.float().sum().backward()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        rows = step.take()
        assert len(rows) == 3
        cpu = torch_ops_row(out.detach().cpu())
        assert rows[-1][1][:2] == cpu[:2]  # min and max exact
    for h in hooks:
        h.remove()


def _gpu_backends():
    """The GPU backends this machine runs: HookScope's CUDA kernels, the Triton kernels."""
    if not torch.cuda.is_available():
        return []
    step = _stats.StepStatistics()
    return [name for name in ("cuda", "triton") if step._backends[name].unavailable(torch.device("cuda")) is None]


@pytest.mark.skipif(not _gpu_backends(), reason="no CUDA GPU with HookScope's CUDA kernels or Triton here")
@pytest.mark.parametrize("backend", ["cuda", "triton"])
@pytest.mark.parametrize("name", [n for n in tensors() if n != "empty"] + ["channels_last", "51M bfloat16"])
def test_gpu_kernels_equal_the_torch_ops_and_the_cpu_kernel(name, backend):
    """The kernels compiled for this GPU (not an emulation): counts and bounds exactly as the
    torch ops on the same device; moments to 1e-6 of the values' scale (a mean near zero is
    judged on the values' size, not on itself); auto picks the CUDA kernels where NVRTC is found."""
    if backend not in _gpu_backends():
        pytest.skip("the %s backend does not run here" % backend)
    if name == "channels_last":
        t = torch.randn(8, 16, 9, 9).to(memory_format=torch.channels_last)
    elif name == "51M bfloat16":
        t = torch.randn(51_380_224, generator=torch.Generator().manual_seed(1)).bfloat16()
    else:
        t = tensors()[name]
    x = t.cuda()
    assert _stats.StepStatistics().choose(x.device) == _gpu_backends()[0]
    got = hookscope_statistics(x, backend)
    ops = hookscope_statistics(x, "torch")
    for key in ("min", "max", "nan", "inf", "lo", "hi", "hist"):
        assert got[key] == ops[key] or (key in ("min", "max") and math.isnan(got[key]) and math.isnan(ops[key])), \
            (name, key)
    n = max(x.numel(), 1)
    assert round(got["zeros"] * n) == round(ops["zeros"] * n), name  # the count of zeros, exactly
    scale = ops["l2"] / math.sqrt(n) if not math.isnan(ops["l2"]) else 0.0  # the values' RMS
    for key in ("mean", "std", "l2"):
        a, b = got[key], ops[key]
        assert (math.isnan(a) and math.isnan(b)) or abs(a - b) <= 1e-6 * max(abs(a), abs(b), scale, 1e-30), \
            (name, key, a, b)
    if LIB is not None and t.numel() < 10_000_000:
        native = hookscope_statistics(t, "native")
        assert native["nan"] == got["nan"] and native["inf"] == got["inf"] and sum(native["hist"]) == sum(got["hist"])


def hookscope_statistics(t, backend):
    from hookscope import tensor_statistics
    return tensor_statistics(t, bins=BINS, backend=backend)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU on this machine")
def test_a_hook_inside_cuda_graph_capture_launches_nothing_and_names_the_gap():
    """A hooked module captured into a CUDA graph: nothing is launched into the graph; each capture
    is a gap that says why, the warning is given once, and the graph replays."""
    from hookscope._capture import CaptureSink
    import threading

    class Sink(CaptureSink):
        def __init__(self):
            self.lock = threading.RLock()
            self._stats = _stats.StepStatistics(bins=BINS)
            self._defer_all = False
            self.warned = []

        def _warn_once(self, key, message):
            self.warned.append(message)

    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU()).cuda()
    sink = Sink()
    for i, m in enumerate(model):
        m.register_forward_hook(lambda m, a, o, i=i: sink.capture(i, 0, "activation", 0, o))
    x = torch.randn(8, 64, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        model(x)  # warm up outside the graph: rows as usual
    torch.cuda.current_stream().wait_stream(side)
    assert len(sink._stats.take()) == 2
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = model(x)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.allclose(out, model(x))
    assert sink._dropped_count >= 2 and all("captured into a CUDA graph" in r for _, r in sink._dropped)
    assert len([w for w in sink.warned if "CUDA graph" in w]) >= 1


def test_importing_the_package_loads_neither_dynamo_nor_triton():
    """Both cost seconds at import: Dynamo is used once torch.compile has loaded it, Triton once a
    GPU tensor is captured."""
    import subprocess
    import sys
    code = ("import sys; sys.path.insert(0, %r); import hookscope; "
            "print('torch._dynamo' in sys.modules, 'triton' in sys.modules)" % os.path.join(HERE, "..", "..", "python"))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"], done.stdout


class _NoMemory(torch.Tensor):
    """A wrapper subclass that holds no memory of its own (its data pointer is 0), as
    DTensor's and the functional collectives' wrappers are."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.detach.default:
            return cls(args[0])
        raise NotImplementedError(func)


def test_a_tensor_with_no_memory_of_its_own_is_refused_by_name_never_read_at_address_0():
    wrapper = _NoMemory(torch.randn(4, 5))
    assert wrapper.data_ptr() == 0
    with pytest.raises(ValueError, match="a _NoMemory holds no memory of its own"):
        _stats.tensor_statistics(wrapper)
