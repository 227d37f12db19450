"""HookScope's Triton statistics kernels, on any machine: run by Triton's interpreter on CPU
tensors (TRITON_INTERPRET=1) against HookScope's C++ kernel, the torch-ops path and plain float64
torch; compiled for an A100 and an H100 with no GPU, their machine code checked for spills; and
through a hooked capture (attached to `hookscope-cli record`, under torch.compile).

Needs Triton (setup.sh installs a pinned one into the venv); skips where it does not import.
"""
import json
import math
import os
import subprocess
import sys
import tempfile
import warnings
from deadlines import LONG_DEADLINE

os.environ["TRITON_INTERPRET"] = "1"  # before Triton is imported: its kernels run in numpy on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402

triton = pytest.importorskip("triton")


def _version(text):
    return tuple(int(part) for part in text.split(".")[:2] if part.isdigit())


# Triton 3.6's interpreter reads a loop bound as int() of a one-element array, which numpy 2.4
# made an error (seen on a GPU machine with Triton 3.6.0 and numpy 2.5.2): the interpreter cases
# cannot run there; the compiled kernels are tested on the GPU by test_statistics.py.
_numpy = pytest.importorskip("numpy")
pytestmark = pytest.mark.skipif(_version(triton.__version__) < (3, 7) and _version(_numpy.__version__) >= (2, 4),
                                reason="Triton %s's interpreter fails with numpy %s (>= 2.4); the GPU tests are "
                                       "test_statistics.py's" % (triton.__version__, _numpy.__version__))

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
import hookscope  # noqa: E402
from hookscope import _stats, _triton_stats  # noqa: E402
from test_statistics import BINS, assert_rows_agree, reference  # noqa: E402

LIB = _stats.native_library()
# Small blocks and few programs: several programs and several blocks per program on small
# tensors, which the interpreter runs at about 2 ms a block.
KERNELS = _triton_stats.TritonStatistics(block=1024, max_programs=4)
F32_MAX = torch.finfo(torch.float32).max
F16 = torch.finfo(torch.float16)


def cases():
    """The cases of the issue: every dtype, non-finite values, degenerate and extreme ranges,
    layouts that are read in place or copied, and sizes that need many programs."""
    g = torch.Generator().manual_seed(11)
    nan, inf = float("nan"), float("inf")
    channels_last = torch.randn(2, 3, 5, 7, generator=g).to(memory_format=torch.channels_last)
    many = torch.randn(1024 * 4 * 3 + 517, generator=g)  # 13 blocks over 4 programs, a ragged last one
    many[::97] = nan
    many[5::101] = -inf
    subnormal = F16.tiny / 4
    out = {
        "float32": torch.randn(3000, generator=g),
        "shifted": torch.randn(2000, generator=g) * 0.01 + 1000.0,
        "bfloat16": (torch.randn(2500, generator=g) * 3).bfloat16(),
        "float16": (torch.randn(2500, generator=g) * 3).half(),
        "float64": torch.randn(1500, generator=g, dtype=torch.float64) * 1e5,
        "int64": torch.randint(-50, 50, (999,), generator=g),
        "int32": torch.randint(-(2 ** 30), 2 ** 30, (700,), generator=g, dtype=torch.int32),
        "uint8": torch.randint(0, 256, (600,), generator=g, dtype=torch.uint8),
        "bool": torch.rand(777, generator=g) > 0.3,
        "nan and inf mixed": torch.tensor([1.0, nan, -2.0, inf, 0.0, -inf, 3.5, -0.0]),
        "all nan": torch.full((33,), nan),
        "all inf": torch.tensor([inf, -inf, inf]),
        "empty": torch.zeros(0, 4),
        "one element": torch.tensor([2.5]),
        "all equal": torch.full((1500,), -7.25),
        "tiny range": torch.tensor([0.0, 1.4e-45, 2.8e-45]),  # the scale overflows float32
        "tiny range, large offset": torch.tensor([1.0, 1.0 + 2 ** -23, 1.0, 1.0 + 2 ** -22]),
        "+-3e38": torch.tensor([-3e38, 0.0, 2e38, 3e38, -1.5e38]),  # the span overflows float32
        "float32 extremes": torch.tensor([-F32_MAX, F32_MAX, 1.0]),
        "float64 past its range": torch.tensor([-1e308, 0.0, 1e308, 5e307], dtype=torch.float64),
        "float16 extremes": torch.tensor([F16.max, -F16.max, F16.tiny, subnormal, -subnormal, 0.0],
                                         dtype=torch.float16),
        "float16 subnormals": torch.tensor([subnormal, 2 * subnormal, 3 * subnormal], dtype=torch.float16),
        "transposed": torch.randn(48, 64, generator=g).t(),
        "channels_last": channels_last,
        "strided slice": torch.randn(40, 30, generator=g)[::3, 1::2],
        "expanded": torch.randn(1, 50, generator=g).expand(20, 50),
        "many programs": many,
    }
    return out


def triton_row(t, bins=BINS, kernels=KERNELS):
    row = torch.full((_stats.HEADER + bins,), -12345.0, dtype=torch.float64)
    kernels.row(t, bins, row)
    return row.tolist()


def torch_ops_row(t, bins=BINS):
    row = torch.empty(_stats.HEADER + bins, dtype=torch.float64)
    _stats.torch_row(t, bins, row)
    return row.tolist()


def same(a, b):
    return all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(a, b))


@pytest.mark.parametrize("name", list(cases()))
def test_triton_statistics_mean_what_the_export_says(name):
    t = cases()[name]
    row, ref = triton_row(t), reference(t)
    for i, stat in ((0, "min"), (1, "max"), (2, "mean"), (3, "std"), (4, "l2"), (5, "zeros"), (6, "nan"), (7, "inf"),
                    (10, "amax")) + _stats.PRECISION:
        a, b = row[i], ref[stat]
        if stat in ("min", "max", "zeros", "nan", "inf", "amax") + tuple(n for _, n in _stats.PRECISION) \
                or ref["count"] == 0:
            assert (math.isnan(a) and math.isnan(b)) or a == b, (name, stat, a, b)
        elif math.isinf(b):  # a float64 sum of squares past its range
            assert a == b, (name, stat, a, b)
        else:
            assert abs(a - b) <= 1e-6 * max(abs(a), abs(b), ref["l2"] / max(1.0, math.sqrt(t.numel()))), \
                (name, stat, a, b)
    hist = row[_stats.HEADER:]
    assert all(v == int(v) and v >= 0 for v in hist), (name, hist)
    assert sum(hist) == ref["count"], name  # every finite value in exactly one bin


@pytest.mark.parametrize("name", list(cases()))
def test_triton_bins_every_value_as_the_torch_ops_do(name):
    """The same bin plan in the same precision: identical counts and edges, not merely close."""
    t = cases()[name]
    ours, ops = triton_row(t), torch_ops_row(t)
    assert same(ours[:2] + ours[5:], ops[:2] + ops[5:]), (name, ours, ops)


@pytest.mark.skipif(LIB is None, reason="libhookscope_stats is not built")
@pytest.mark.parametrize("name", list(cases()))
def test_triton_equals_hookscopes_cpu_kernel(name):
    t = cases()[name]
    ours, kernel = triton_row(t), _stats.native_row(LIB, t, BINS)
    if name == "float64 past its range":
        # The C++ kernel sums differences from the first value (for a stable variance): those
        # overflow float64 here, so its mean is inf and its std 0 where float64 torch's are not.
        ref = reference(t)
        assert (kernel[2], kernel[3]) == (math.inf, 0.0) and (ours[2], ours[3]) == (ref["mean"], ref["std"])
        ours[2:4] = kernel[2:4]
    assert_rows_agree(name, ours, kernel, t)


def test_the_torch_ops_no_longer_fail_on_a_tiny_float_range():
    """It raised (0 x inf is NaN, the index INT64_MIN): a dropped capture on the CPU, a
    device-side assert that kills the run on CUDA."""
    row = torch_ops_row(torch.tensor([0.0, 1.4e-45, 2.8e-45]))
    assert row[_stats.HEADER:][0] == 1 and row[_stats.HEADER + 32] == 1 and row[-1] == 1


def test_results_are_the_same_run_to_run_and_programs_fold_in_a_fixed_order():
    t = cases()["many programs"]
    first = triton_row(t)
    assert triton_row(t) == first or same(triton_row(t), first)
    # Another cut into programs: the counts and bounds stay exact, the sums within rounding.
    other = triton_row(t, kernels=_triton_stats.TritonStatistics(block=2048, max_programs=3))
    assert same(other[:2] + other[5:], first[:2] + first[5:])
    for i in (2, 3, 4):
        assert abs(other[i] - first[i]) <= 1e-6 * abs(first[i]), (i, other[i], first[i])


@pytest.mark.parametrize("bins", [1, 2, 7, 64, 100, 4096])
def test_any_number_of_bins(bins):
    t = cases()["float32"]
    ours, ops = triton_row(t, bins), torch_ops_row(t, bins)
    assert ours == ops[:2] + ours[2:5] + ops[5:] and sum(ours[_stats.HEADER:]) == t.numel()


def test_tensor_statistics_is_what_a_capture_records():
    t = cases()["nan and inf mixed"]
    for backend in ("triton", "torch") + (("native",) if LIB is not None else ()):
        got = hookscope.tensor_statistics(t, bins=8, backend=backend)
        assert got["backend"] == backend
        assert set(got) == {"min", "max", "mean", "std", "l2", "zeros", "nan", "inf", "lo", "hi", "hist", "backend",
                            "amax", "f16_overflow", "f16_underflow", "e4m3_underflow", "e5m2_underflow"}
        assert (got["min"], got["max"], got["nan"], got["inf"], got["zeros"]) == (-2.0, 3.5, 1, 2, 2 / 8)
        # -2, then 0 and -0.0 at 2 / 5.5 * 8 = 2.9, 1 at 4.4, 3.5 in the last bin.
        assert got["hist"] == [1, 0, 2, 0, 1, 0, 0, 1]
        assert abs(got["mean"] - 0.5) < 1e-12
    assert hookscope.tensor_statistics(t)["backend"] == ("native" if LIB is not None else "torch")


def test_tensor_statistics_says_what_is_wrong():
    with pytest.raises(ValueError, match="use one of auto, native, torch, triton, cuda"):
        hookscope.tensor_statistics(torch.ones(3), backend="gpu")
    with pytest.raises(ValueError, match="CUDA kernels run on NVIDIA GPUs"):
        hookscope.tensor_statistics(torch.ones(3), backend="cuda")
    with pytest.raises(ValueError, match="bins must be an integer from 1 to 4096"):
        hookscope.tensor_statistics(torch.ones(3), bins=0)
    with pytest.raises(ValueError, match="strided"):
        hookscope.tensor_statistics(torch.eye(3).to_sparse())
    with pytest.raises(TypeError):
        hookscope.tensor_statistics([1.0, 2.0])
    os.environ.pop("TRITON_INTERPRET")
    try:
        with pytest.raises(ValueError, match="only under TRITON_INTERPRET=1"):
            hookscope.tensor_statistics(torch.ones(3), backend="triton")
    finally:
        os.environ["TRITON_INTERPRET"] = "1"


def test_the_backend_variable_forces_one_and_a_bad_value_is_said_once(monkeypatch):
    monkeypatch.setenv("HOOKSCOPE_STATS_BACKEND", "triton")
    assert _stats.StepStatistics().choose(torch.device("cpu")) == "triton"
    monkeypatch.setenv("HOOKSCOPE_STATS_BACKEND", "torch")
    assert _stats.StepStatistics().backend == "cpu: torch"
    monkeypatch.setenv("HOOKSCOPE_STATS_BACKEND", "fastest")
    step = _stats.StepStatistics()
    assert step.requested == "auto" and step.fallbacks == [
        "HOOKSCOPE_STATS_BACKEND=fastest: use one of auto, native, torch, triton, cuda; auto is used"]


def test_a_failing_kernel_costs_no_capture_and_is_said(monkeypatch):
    step = _stats.StepStatistics(backend="triton")

    def broken(*args, **kwargs):
        raise RuntimeError("no GPU compiler")
    monkeypatch.setattr(_stats.triton_statistics()[0], "row", broken)
    t = cases()["float32"]
    step.add('"module":0', t)
    step.add('"module":1', t.clone())
    (f0, row0, b0), (f1, row1, b1) = step.take(with_backend=True)
    # The failed capture and the next ones by auto's choice for a CPU tensor.
    auto = "native" if LIB is not None else "torch"
    assert (b0, b1) == (auto, auto) and row0 == row1
    assert len(step.fallbacks) == 1 and "no GPU compiler" in step.fallbacks[0]


@pytest.mark.skipif(not os.path.exists(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                                                   "cuobjdump")), reason="this Triton has no NVIDIA backend tools")
def test_the_kernels_compile_for_a100_and_h100_without_spills():
    """What the interpreter lets through (a plain global, a type the compiler rejects) and
    register spills, checked with no GPU: ptxas and cuobjdump ship in Triton's wheel. In a
    process of its own, without TRITON_INTERPRET."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, os.path.join(HERE, "triton_compile_check.py"), "80", "90"], env=env,
                          capture_output=True, text=True, timeout=LONG_DEADLINE)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(rows) == 2 * 6 * 2  # sm_80 and sm_90, six kinds of values, two passes
    for row in rows:
        assert row["local"] == 0 and row["stack"] == 0, row  # no spills
        assert row["ftz"] == 0, row  # subnormals kept: they are neither zeros nor flushed
        assert row["reg"] <= 128, row  # at least two programs of 256 threads an SM
        assert row.get("exact_scale_division", True), row


CLI = os.environ.get("HOOKSCOPE_CLI", os.path.join(HERE, "..", "..", "build", "cli", "hookscope-cli"))


@pytest.mark.skipif(not os.path.exists(CLI), reason="hookscope-cli is not built")
def test_an_attached_script_on_the_triton_kernels_equals_pytorchs_hooks():
    """The training script of test_attach, with every capture computed by the Triton kernels
    (HOOKSCOPE_STATS_BACKEND=triton under the interpreter), against PyTorch's own hooks."""
    from test_attach import Recorder, assert_matches, read_csv, run_script
    tmp = tempfile.mkdtemp(prefix="hs-")
    try:
        recorder = Recorder(tmp, "--hook", "*")
        reference_file = os.path.join(tmp, "reference.json")
        os.environ["HOOKSCOPE_STATS_BACKEND"] = "triton"
        try:
            script = run_script(recorder.address, "--reference", reference_file, "--steps", "3")
        finally:
            del os.environ["HOOKSCOPE_STATS_BACKEND"]
        assert script.returncode == 0, script.stderr
        assert "HookScope:" not in script.stderr, script.stderr  # no fallback said
        code, err = recorder.wait()
        assert code == 0, err
        with open(reference_file) as f:
            ref = json.load(f)
        rows = read_csv(recorder.out, "stats.csv")
        assert ref and len([r for r in rows if r["kind"] in ("activation", "gradient")]) == len(ref)
        assert_matches(rows, ref)
    finally:
        subprocess.run(["rm", "-rf", tmp])


@pytest.mark.skipif(not hasattr(torch, "compiler"), reason="torch.compile needs PyTorch 2")
def test_hooks_on_a_compiled_model_launch_the_kernels_outside_dynamos_graph():
    """Dynamo does not trace into a capture (torch.compiler.disable): the Triton launches run
    as they are, the rows equal the eager model's, and no capture is dropped."""
    from hookscope._capture import CaptureSink

    class Sink(CaptureSink):
        def __init__(self):
            import threading
            self.lock = threading.RLock()
            self._stats = _stats.StepStatistics(backend="triton", strict=True)
            self._defer_all = False
            self.warned = []

        def _warn_once(self, key, message):
            self.warned.append(message)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8)
    sink = Sink()
    handles = [m.register_forward_hook(lambda m, i, o, k=k: sink.capture(k, 0, "activation", 0, o))
               for k, m in enumerate(model)]
    compiled = torch.compile(model, backend="aot_eager")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(x)
    rows = sink._stats.take(with_backend=True)
    for h in handles:
        h.remove()
    assert sink.warned == [] and [b for _, _, b in rows] == ["triton"] * 3
    eager = []
    h = [m.register_forward_hook(lambda m, i, o: eager.append(o.detach())) for m in model]
    model(x)
    for handle in h:
        handle.remove()
    for (_, row, _), value in zip(rows, eager):
        assert same(row[:2] + row[5:], torch_ops_row(value)[:2] + torch_ops_row(value)[5:])


def test_out_of_memory_in_the_kernels_is_one_gap_not_the_end_of_them(monkeypatch):
    step = _stats.StepStatistics(backend="triton")
    kernels = _stats.triton_statistics()[0]
    real = kernels.row
    calls = []

    def once_out_of_memory(*args):
        calls.append(1)
        if len(calls) == 1:
            raise _stats._OUT_OF_MEMORY("CUDA out of memory")
        return real(*args)
    monkeypatch.setattr(kernels, "row", once_out_of_memory)
    t = cases()["float32"]
    with pytest.raises(_stats._OUT_OF_MEMORY):
        step.add('"module":0', t)
    step.add('"module":1', t)
    (_, row, backend), = step.take(with_backend=True)
    ops = torch_ops_row(t)
    assert backend == "triton" and step.fallbacks == [] and same(row[:2] + row[5:], ops[:2] + ops[5:])


@pytest.mark.parametrize("backend", ["triton", "torch", "native"])
def test_std_of_a_tight_spread_far_from_zero_is_exact_to_float_precision(backend):
    """Values 1000 +- 1e-4 in float32 (a spread of a few ulps): the differences from the mean
    must not carry the mean's float32 rounding (half an ulp of 1000 is 3e-5, a third of the
    spread), judged relative to std itself, not to the values' size."""
    if backend == "native" and LIB is None:
        pytest.skip("libhookscope_stats is not built")
    g = torch.Generator().manual_seed(5)
    t = (1000.0 + torch.randn(20000, generator=g, dtype=torch.float64) * 1e-4).float()
    expected = t.double().std().item()
    if backend == "triton":
        got = triton_row(t)[3]
    elif backend == "torch":
        got = torch_ops_row(t)[3]
    else:
        got = _stats.native_row(LIB, t, BINS)[3]
    assert abs(got - expected) <= 1e-5 * expected, (backend, got, expected)


@pytest.mark.parametrize("backend", ["native", "torch", "triton"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_shards_binned_in_the_whole_range_add_up_to_the_whole(backend, dtype):
    """What a sharded tensor's ranks compute at the step's end (_sharded): each shard's row
    between the whole tensor's edges, with the fp8 counts scaled by its amax, adds up to the
    whole tensor's row, through every backend."""
    from hookscope._sharded import ShardedStatistics, _shared_range, _Slot
    if backend == "native" and not _stats.native_in_range(LIB):
        pytest.skip("HookScope's C++ kernel is not built")
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(3001, generator=g) * 3).to(dtype)
    x[7], x[2000], x[100], x[101] = float("nan"), float("inf"), 0.0, 1e-7
    full = hookscope.tensor_statistics(x, backend="torch")
    sharded = ShardedStatistics(_stats.StepStatistics(backend=backend, strict=True))
    shared = _shared_range(full["min"], full["max"])
    rows = [sharded._row(_Slot("", "", part, None), shared) for part in x.split([1200, 1200, 601])]
    assert [sum(r[_stats.HEADER + i] for r in rows) for i in range(64)] == full["hist"]
    assert all(r[8] == full["lo"] and r[9] == full["hi"] for r in rows)
    assert min(r[0] for r in rows) == full["min"] and max(r[1] for r in rows) == full["max"]
    assert max(r[10] for r in rows) == full["amax"]
    for i, name in _stats.PRECISION + ((6, "nan"), (7, "inf")):
        assert sum(r[i] for r in rows) == full[name], name
