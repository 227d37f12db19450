"""HookScope's CUDA statistics kernels from Python (python/hookscope/_cuda_stats.py): compiled by
NVRTC for NVIDIA architectures with no GPU present and their machine code checked, the disk
cache, launches that write only pointers into argument arrays built once, the backend seam's
choice and what it says, the same tensor read once a step; and, where a GPU is at hand, the
kernels against the torch ops, with one read for a series' later captures. The kernels'
arithmetic itself runs on the CPU in hookscope_cuda_kernel_tests (their source as host C++)."""

import ctypes
import json
import os
import re
import subprocess
import sys

import pytest
import torch
from deadlines import LONG_DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)

from hookscope import _backends, _cuda_stats, _stats  # noqa: E402
from cuda_stand_in import stand_in  # noqa: E402


def _nvrtc():
    try:
        return _cuda_stats.Nvrtc()
    except _cuda_stats.Unavailable:
        return None


NVRTC = _nvrtc()
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="no libnvrtc here (setup.sh installs nvidia-cuda-nvrtc-cu12)")


def _cuda_backend_runs():
    return torch.cuda.is_available() and _stats.StepStatistics().choose(torch.device("cuda")) == "cuda"


needs_gpu = pytest.mark.skipif(not _cuda_backend_runs(), reason="no NVIDIA GPU with NVRTC here")


def _cuobjdump():
    """cuda_compile_check's cuobjdump (a CUDA toolkit's, else Triton's), found without importing
    Triton (an import here would fix Triton's mode for the interpreter tests in the same process)."""
    from cuda_compile_check import cuobjdump
    return cuobjdump()


def _nvdisasm():
    from read_loop_count import nvdisasm
    return nvdisasm()


@needs_nvrtc
@pytest.mark.skipif(_nvdisasm() is None, reason="no nvdisasm (Triton's wheel ships it)")
def test_the_instruction_count_follows_the_common_path_and_only_it():
    """read_loop_count walks the read loop's common path: an instruction added there a value
    counts one more a value; code added to the rare path's exact per-value work counts nothing."""
    import read_loop_count
    with open(_cuda_stats.SOURCE, encoding="utf-8") as f:
        source = f.read()
    plain = read_loop_count.count(source, NVRTC)
    for name, row in plain.items():
        assert row["per_value"] <= row["budget"], (name, row)
    step = "  return __fsub_rn(v, p.shift);\n}"
    assert source.count(step) == 1
    heavier = read_loop_count.count(source.replace(step, "  return __fmul_rn(__fsub_rn(v, p.shift), p.top);\n}"), NVRTC)
    rare = "      ++a.count[P_INF];\n"
    assert source.count(rare) == 1
    busier_rare = read_loop_count.count(source.replace(rare, "      a.count[P_INF] += a.count[P_NAN] * 3u + 1u;\n"), NVRTC)
    for name in plain:
        assert abs(heavier[name]["per_value"] - plain[name]["per_value"] - 1.0) <= 0.25, (name, heavier[name], plain[name])
        assert abs(busier_rare[name]["per_value"] - plain[name]["per_value"]) <= 0.25, (name, busier_rare[name])


@needs_nvrtc
@pytest.mark.skipif(_cuobjdump() is None, reason="no cuobjdump (Triton's wheel ships it)")
def test_the_kernels_compile_for_t4_a100_h100_and_the_newest_without_spills_and_with_128_bit_loads():
    done = subprocess.run([sys.executable, os.path.join(HERE, "cuda_compile_check.py")], capture_output=True,
                          text=True, timeout=LONG_DEADLINE)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    capabilities = {row["capability"] for row in rows}
    # Turing (sm_75: T4s) has no packed bfloat16/float16 minimum: the kernels take the lanes one by one there.
    assert {75, 80, 90} <= capabilities and max(capabilities) == max(NVRTC.architectures())
    assert len(rows) == len(capabilities) * 18  # nine kinds of values, two kernels each
    for row in rows:
        assert row["local"] == 0 and row["stack"] == 0 and row["spill_instructions"] == 0, row  # no spills
        # Three blocks of 256 threads fit a multiprocessor for the read, two for the re-read.
        assert row["reg"] <= (85 if row["kernel"].startswith("hs_read_") else 128), row
        assert row["loads_128"] >= 1, row  # 16 bytes a thread a load
        assert row["ftz"] == 0, row  # subnormals kept: they are neither zeros nor flushed


@needs_nvrtc
def test_a_compiled_binary_is_cached_per_architecture_source_and_nvrtc(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKSCOPE_CACHE_DIR", str(tmp_path / "cache"))
    compiled = []

    class Counting:
        version = NVRTC.version

        def compile(self, source, capability):
            compiled.append(capability)
            return b"cubin for sm_%d" % capability

    first = _cuda_stats.cubin_for(90, Counting())
    assert _cuda_stats.cubin_for(90, Counting()) == first and compiled == [90]
    names = os.listdir(tmp_path / "cache")
    assert len(names) == 1 and "sm90" in names[0] and "nvrtc%d.%d" % NVRTC.version in names[0]
    _cuda_stats.cubin_for(80, Counting())
    changed = tmp_path / "stats_kernels.cu"
    changed.write_text(open(_cuda_stats.SOURCE).read() + "\n// changed\n")
    _cuda_stats.cubin_for(90, Counting(), source_path=str(changed))
    assert compiled == [90, 80, 90] and len(os.listdir(tmp_path / "cache")) == 3


class StubDriver:
    """cuLaunchKernel, cuLaunchCooperativeKernel (where cooperative_launches) and cuMemcpyDtoDAsync
    recorded, with each launch's argument values read through its parameter array at the moment
    of the call; `per_sm` blocks of the read resident on a multiprocessor."""

    def __init__(self, cooperative_launches=False, per_sm=3):
        self.launched = []
        self.cooperative_launches = cooperative_launches
        self.per_sm = per_sm

    def _record(self, how, function, gx, bx, shared, stream, params):
        array = ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))
        count = 7 if function == "read" else 6
        values = [ctypes.cast(array[i], ctypes.POINTER(ctypes.c_uint64))[0] for i in range(count)]
        if function == "read":
            values.append(ctypes.cast(array[7], ctypes.POINTER(ctypes.c_int))[0])  # wait
        self.launched.append((function, gx, bx, shared, stream, params, values, how))
        return 0

    def launch(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        return self._record("plain", function, gx, bx, shared, stream, params)

    def launch_cooperative(self, function, gx, gy, gz, bx, by, bz, shared, stream, params):
        assert self.cooperative_launches, "a cooperative launch on a device without them"
        return self._record("cooperative", function, gx, bx, shared, stream, params)

    def resident(self, function, threads, shared):
        assert function == "read" and threads == _cuda_stats.THREADS
        return self.per_sm

    def check(self, status, what):
        assert status == 0, what


def test_a_capture_writes_pointers_into_argument_arrays_built_once_and_launches_once_where_it_can():
    kernels, place = stand_in(StubDriver())
    a, b = torch.randn(4000), torch.randn(40_000_000, dtype=torch.bfloat16)
    kernels.row(a, 64, 1000, series="s")
    kernels.row(b, 64, 2000, series="t")
    kernels.row(a, 64, 3000, series="s")
    launched = kernels.driver.launched
    # A small tensor: one block that reads again itself; a large one on a device without
    # cooperative launches: the read, then the re-read that returns at once unless needed.
    assert [(call[0], call[7]) for call in launched] == [("read", "plain"), ("read", "plain"), ("reread", "plain"),
                                                         ("read", "plain")]
    assert [call[6][7] for call in launched if call[0] == "read"] == [1, 0, 1]  # wait: reads again itself
    # The same argument array for every launch of a kernel: nothing built per capture.
    assert launched[0][5] == launched[3][5]
    slot_s = place.slots.data_ptr()
    x, n, bins, copies, row, slot, scratch, wait = launched[0][6]
    assert (x, n, bins, row, slot) == (a.data_ptr(), 4000, 64, 1000, slot_s)
    assert launched[2][6] == [b.data_ptr(), 40_000_000, 64, copies, 2000, scratch]  # the re-read has no slot
    assert launched[1][6][4:6] == [2000, slot_s + _cuda_stats.SLOT_WORDS * 8]  # another series, another slot
    assert launched[3][6][5] == slot_s and all(call[4] == 77 for call in launched)  # the current stream's handle
    assert launched[0][1] == launched[3][1] == 1  # a small tensor: one block
    assert (launched[1][1], launched[2][1]) == (132 * 3, 132 * 2)  # a large one: every multiprocessor
    assert all(call[2] == _cuda_stats.THREADS for call in launched)
    # The slots grow by doubling and keep what they held (their device memory is copied), each
    # with its drift group: a step's activations (and inputs), and its gradients, scale together.
    gradient, activation = '"module":3,"call":0,"kind":"gradient","index":0', '"module":3,"call":0,"kind":"activation","index":0'
    for name in ("u", gradient, activation):
        kernels.row(a, 64, 4000, series=name)
    assert place.slots.shape[0] == 8 and place.series == {"s": 0, "t": 1, "u": 2, gradient: 3, activation: 4}
    assert place.slots[:, _cuda_stats.SLOT_GROUP].tolist() == [0, 0, 0, 2, 1, 0, 0, 0]
    assert [_cuda_stats.drift_group('"param":"w","call":0,"kind":"%s","index":0' % kind)
            for kind in ("param", "param_grad", "update", "input")] == [0, 0, 0, 1]


def test_the_scratch_and_slot_sizes_are_the_kernels():
    with open(_cuda_stats.SOURCE, encoding="utf-8") as f:
        source = f.read()
    defines = dict(re.findall(r"#define (HS_\w+) ([^\n/]+)", source))

    def value(name):
        text = re.sub(r"HS_\w+", lambda m: "(%s)" % value(m.group(0)), defines[name].strip())
        return eval(text)  # the defines are integer arithmetic on each other

    assert value("HS_SCRATCH_WORDS") == _cuda_stats.SCRATCH_WORDS
    assert value("HS_SLOT_WORDS") == _cuda_stats.SLOT_WORDS and value("HS_SLOT_GROUP") == _cuda_stats.SLOT_GROUP
    assert value("HS_MAX_BINS") == _cuda_stats.MAX_BINS and value("HS_MAX_BLOCKS") == _cuda_stats.MAX_BLOCKS


def test_a_large_tensor_is_one_cooperative_launch_where_its_grid_is_resident_at_once():
    for per_sm, expected in ((3, [("read", "cooperative", 1)]),
                             (2, [("read", "plain", 0), ("reread", "plain", None)])):  # the grid would not fit
        kernels, place = stand_in(StubDriver(cooperative_launches=True, per_sm=per_sm))
        kernels.row(torch.randn(40_000_000, dtype=torch.bfloat16), 64, 2000, series="t")
        kernels.row(torch.randn(_cuda_stats.SMALL), 64, 3000, series="u")
        got = [(call[0], call[7], call[6][7] if call[0] == "read" else None) for call in kernels.driver.launched]
        assert got == expected + [("read", "plain", 1)], per_sm  # a small tensor: one block, never cooperative
        assert kernels.driver.launched[0][1] == 132 * 3
    # One-byte values (uint8, int8, bool) are read again by the re-read kernel, small or large.
    kernels, place = stand_in(StubDriver(cooperative_launches=True))
    kernels.row(torch.ones(100, dtype=torch.uint8), 64, 2000)
    kernels.row(torch.ones(40_000_000, dtype=torch.int8), 64, 2000)
    got = [(call[0], call[7], call[6][7] if call[0] == "read" else None) for call in kernels.driver.launched]
    assert got == [("read", "plain", 0), ("reread", "plain", None)] * 2


def test_dense_tensors_are_read_in_place_and_others_through_one_flat_copy():
    """What the kernels are handed: a contiguous, channels_last or transposed tensor's own memory
    (its storage read as it lies: the statistics do not depend on the order); an expanded,
    strided or complex tensor, or a dtype the kernels do not read, as one flat copy of its values."""
    kernels, place = stand_in(StubDriver())
    _backends._launchers["cuda"] = (kernels, None)
    try:
        backend = _backends.CudaBackend()
        base = torch.randn(4, 6, 5, 5)
        cases = {"contiguous": (base, True), "channels_last": (base.to(memory_format=torch.channels_last), True),
                 "transposed": (base[0, 0].t(), True), "expanded": (torch.randn(6, 1).expand(6, 1000), False),
                 "every other": (base[:, ::2], False), "complex": (torch.randn(30, dtype=torch.complex64), False),
                 "bool": (base > 0, True), "float8": (None, False)}
        if hasattr(torch, "float8_e4m3fn"):
            cases["float8"] = (base.to(torch.float8_e4m3fn), False)
        for name, (t, in_place) in cases.items():
            if t is None:
                continue
            kernels.driver.launched.clear()
            backend.row_at(t, 64, 1000)
            x, n = kernels.driver.launched[0][6][:2]
            assert n == t.numel(), name
            assert (x == t.data_ptr()) == in_place, name
    finally:
        _backends._launchers.pop("cuda", None)


def test_histogram_copies_fit_the_shared_memory_for_any_bins():
    for bins in (1, 64, 256, 4096):
        copies = _cuda_stats.histogram_copies(bins)
        assert 1 <= copies <= 8 and _cuda_stats.SHARED_FOLD + copies * (bins + 1) * 4 <= 48 * 1024
    assert _cuda_stats.histogram_copies(64) == 8


def test_the_cuda_backend_says_why_it_cannot_run_and_auto_never_picks_it_off_a_gpu():
    with pytest.raises(_stats.BackendError, match="CUDA kernels run on NVIDIA GPUs"):
        _stats.StepStatistics(backend="cuda", strict=True).add("", torch.ones(3))
    step = _stats.StepStatistics(backend="cuda")
    step.add('"module":0', torch.ones(3))
    assert step.take(with_backend=True)[0][2] in ("native", "torch")
    assert any("CUDA kernels run on NVIDIA GPUs" in m for m in step.fallbacks)
    assert _stats.StepStatistics().choose(torch.device("cpu")) in ("native", "torch")


def test_the_slower_fallback_is_said_only_for_devices_that_captured(monkeypatch):
    step = _stats.StepStatistics(use_native=False)
    assert step.slower_fallback() is None  # nothing captured yet: nothing to say about the CPU
    step.add('"module":0', torch.ones(4))
    said = step.slower_fallback()
    assert said and "C++ kernel" in said and "CPU statistics" in said and "GPU" not in said
    assert step.slower_fallback() is None  # once


def test_a_tensor_captured_twice_at_one_version_is_read_once():
    step = _stats.StepStatistics(bins=16, backend="torch")
    t = torch.randn(300)
    step.add('"module":0', t, defer=True)
    step.add('"module":1', t, defer=True)                      # a container's output: its last child's
    step.add('"module":2', t.detach(), defer=True, origin=t)  # what a hook sees, detached
    t.add_(1.0)                                                # changed in place: read again
    step.add('"module":3', t, defer=True)
    step.add('"module":4', t.clone(), defer=True)              # equal values, another tensor
    rows = step.take(with_backend=True)
    assert [backend for _, _, backend in rows] == ["torch", "shared", "shared", "torch", "torch"]
    assert rows[0][1] == rows[1][1] == rows[2][1] and rows[3][1] != rows[0][1] and rows[3][1] == rows[4][1]
    assert step.take_reads() == {"shared": 2}  # no CUDA kernels ran: nothing to say of one or two reads
    step.add('"module":0', t, defer=True)  # a new step: nothing is shared across steps
    assert step.take(with_backend=True)[0][2] == "torch" and step.take_reads() is None
    # CPU captures computed at once (HookScope's C++ kernel or torch ops): the row reused too.
    step = _stats.StepStatistics(bins=16)
    step.add('"module":0', t)
    step.add('"module":1', t.detach(), origin=t)
    rows = step.take(with_backend=True)
    assert rows[1][2] == "shared" and rows[0][1] == rows[1][1] and rows[0][1] is not rows[1][1]


@needs_gpu
def test_a_series_is_read_once_from_its_second_capture_on_a_gpu():
    step = _stats.StepStatistics(bins=64)
    g = torch.Generator(device="cuda").manual_seed(3)
    for i in range(5):
        x = torch.randn(1_000_003, device="cuda", generator=g)
        step.add('"module":0,"kind":"activation"', x)
        (_, row, backend), = step.take(with_backend=True)
        assert backend == "cuda"
        assert step.take_reads() == ({"one": 0, "two": 1, "shared": 0} if i == 0 else {"one": 1, "two": 0, "shared": 0})
        ops = torch.empty(_stats.HEADER + 64, dtype=torch.float64, device="cuda")
        shared = tuple(torch.tensor(v, dtype=torch.float64, device="cuda") for v in (row[8], row[9], row[10]))
        _stats.torch_row(x, 64, ops, shared)
        ops = ops.tolist()
        assert row[:2] == ops[:2] and row[5:] == ops[5:], i  # min, max, counts, edges, histogram exactly
        assert row[8] <= row[0] and row[1] <= row[9] and row[1] - row[0] >= 0.5 * (row[9] - row[8])


@needs_gpu
def test_no_host_synchronisation_in_a_hook_with_the_cuda_kernels():
    step = _stats.StepStatistics(bins=64)
    x = torch.randn(4096, device="cuda")
    step.add('"module":0', x)  # compiled and loaded before the check
    step.take()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for i in range(3):
            step.add('"module":%d' % i, x * i)
            step.add('"module":%d' % (i + 10), x.half())
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len(step.take()) == 6
