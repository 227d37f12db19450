"""What float16 and fp8 would lose, per capture (docs/export-format.md): amax, float16 overflow and
underflow, E4M3 and E5M2 underflow after per-tensor amax scaling. Through every backend (the C++
kernel, the torch ops, the Triton kernels under the interpreter), against counts written by
hand, against the definition in float64, and against PyTorch's own casts to float16 and fp8.

Runs with any Python with torch (ctest: the venv's PyTorch 2.x and Debian's 1.13, where the
Triton and fp8 cases skip).
"""
import math
import os
import sys
from deadlines import DEADLINE

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: its kernels run on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
sys.path.insert(0, HERE)
# The fixtures' networks: GrowingNet's layer 'grow' first passes float16's range at step 4.
FIXTURES_SOURCE = os.path.join(HERE, "..", "fixtures")
sys.path.insert(0, FIXTURES_SOURCE)
import hookscope  # noqa: E402
from hookscope import _stats  # noqa: E402
from test_statistics import reference  # noqa: E402

COUNTS = [name for _, name in _stats.PRECISION]


def backends():
    names = ["torch"]
    if _stats.native_library() is not None:
        names.append("native")
    if _stats.triton_statistics()[0] is not None and os.environ.get("TRITON_INTERPRET") == "1":
        names.append("triton")
    return names


def statistics(t, backend):
    return hookscope.tensor_statistics(t, bins=16, backend=backend)


# amax 1e5: E4M3 flushes below 1e5 * 2^-9 / 448 = 0.43596, E5M2 below 1e5 * 2^-16 / 57344 = 2.661e-5.
BY_HAND = [1e5, -7e4, 65520.0, 65504.0, 1000.0, -1.0, 0.5, 0.43, -0.1, 3e-5, 1e-5, -2.0 ** -24, 1e-8, -3e-8,
           1e-40, 0.0, -0.0, float("nan"), float("inf"), float("-inf")]
BY_HAND_COUNTS = {"amax": 1e5,
                  "f16_overflow": 3,     # 1e5, -7e4, 65520 (65504 is float16's largest)
                  "f16_underflow": 3,    # 1e-8, -3e-8, 1e-40 (2^-24 is float16's smallest subnormal)
                  "e4m3_underflow": 8,   # 0.43 and everything smaller but the zeros
                  "e5m2_underflow": 5}   # 1e-5 and everything smaller but the zeros


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_counts_written_by_hand(backend, dtype):
    got = statistics(torch.tensor(BY_HAND, dtype=dtype), backend)
    assert {k: got[k] for k in BY_HAND_COUNTS} == BY_HAND_COUNTS, (backend, dtype)
    assert (got["nan"], got["inf"]) == (1, 2)


def around_every_threshold(dtype, amax):
    """amax, then each threshold and the two representable values either side of it (both
    signs), subnormals, zeros, NaN and Inf: where a unit in the last place decides."""
    info = torch.finfo(dtype)
    amax_t = torch.tensor(amax, dtype=torch.float64)
    work = torch.float64 if dtype == torch.float64 else torch.float32
    edges = [torch.tensor(v, dtype=work) for v in (65504.0, 2.0 ** -24)]
    edges += [_stats.flush_below(amax_t, fmt, work) for fmt in (_stats.E4M3, _stats.E5M2)]
    values = [amax, 0.0, -0.0, float("nan"), float("inf"), -float("inf"), info.tiny / 4, info.tiny]
    for edge in edges:
        down = torch.nextafter(edge, torch.tensor(0.0, dtype=work))
        up = torch.nextafter(edge, torch.tensor(float("inf"), dtype=work))
        for v in (torch.nextafter(down, torch.tensor(0.0, dtype=work)), down, edge, up):
            values += [v.item(), -v.item()]
    t = torch.tensor(values, dtype=torch.float64)
    t = t[~(t.abs() > amax)]  # keep amax the largest
    return t.to(dtype)


@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("amax", [1e5, 1000.0, 7.0, 1e-3, 3e38])
def test_counts_at_and_around_each_threshold_equal_the_definition(backend, dtype, amax):
    if dtype in (torch.float16, torch.bfloat16) and amax > torch.finfo(dtype).max:
        pytest.skip("amax is past the dtype's range")
    t = around_every_threshold(dtype, amax)
    if backend == "triton" and dtype == torch.bfloat16:
        # Triton's interpreter converts bfloat16 subnormals to float32 zeros (its _convert_float
        # clamps the exponent); a GPU shifts the bits, and the compile check finds no flush to zero.
        t = t[~((t != 0) & (t.float().abs() < torch.finfo(torch.bfloat16).tiny))]
    got, ref = statistics(t, backend), reference(t)
    for name in ["amax"] + COUNTS:
        assert got[name] == ref[name], (backend, dtype, amax, name, got[name], ref[name])


@pytest.mark.parametrize("backend", backends())
def test_large_tensors_over_many_blocks_and_programs(backend):
    g = torch.Generator().manual_seed(3)
    sign = torch.randint(0, 2, (300_000,), generator=g) * 2 - 1
    t = (sign * torch.exp(torch.randn(300_000, generator=g, dtype=torch.float64) * 12)).float()
    t[::1001] = 0.0
    t[7] = float("nan")
    got, ref = statistics(t, backend), reference(t)
    assert all(got[name] == ref[name] for name in ["amax"] + COUNTS), (got, ref)
    assert ref["e4m3_underflow"] > 1000 and ref["f16_overflow"] > 1000  # every class is populated


def wide_float32(n=200_000, seed=9):
    g = torch.Generator().manual_seed(seed)
    sign = torch.randint(0, 2, (n,), generator=g) * 2 - 1
    return (sign * torch.exp(torch.randn(n, generator=g, dtype=torch.float64) * 14)).float()


@pytest.mark.parametrize("backend", backends())
def test_float16_counts_are_what_pytorchs_cast_loses(backend):
    """Overflow: the values the cast makes infinite, plus those it rounds down to 65504 (above
    65504 but below 65520). Underflow: those it flushes to 0, plus those it rounds up to 2^-24."""
    t = wide_float32()
    h = t.half()
    got = statistics(t, backend)
    nonzero = t != 0
    assert got["f16_overflow"] == int(h.isinf().sum()) + int(((t.abs() > 65504) & (h.abs() == 65504)).sum())
    assert got["f16_underflow"] == int((nonzero & (h == 0)).sum()) + \
        int(((t.abs() < 2.0 ** -24) & (h.abs() == 2.0 ** -24)).sum())
    assert got["f16_overflow"] > 100 and got["f16_underflow"] > 100


@pytest.mark.skipif(not hasattr(torch, "float8_e4m3fn"), reason="this PyTorch has no float8 dtypes")
@pytest.mark.parametrize("backend", backends())
@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
def test_fp8_counts_are_what_pytorchs_scaled_cast_loses(backend, fmt):
    """Scaled as fp8 training casts (amax to the format's largest value), the counted values are
    those the cast flushes to 0 plus those it rounds up to the smallest subnormal; values within
    a part in 10^5 of the threshold, where the float32 product's rounding decides, are left out."""
    dtype, (largest, smallest) = {"e4m3": (torch.float8_e4m3fn, _stats.E4M3),
                                  "e5m2": (torch.float8_e5m2, _stats.E5M2)}[fmt]
    g = torch.Generator().manual_seed(4)
    edge = 3.0 * smallest / largest  # amax 3: the threshold, and values from an eighth of it to 8 times it
    near = edge * torch.exp((torch.rand(40_000, generator=g, dtype=torch.float64) - 0.5) * 2 * math.log(8))
    t = torch.cat([torch.tensor([3.0, 0.0]), torch.randn(20_000, generator=g), near.float()])
    t[1::2] = -t[1::2]
    t = t[((t.abs().double() / edge) - 1).abs() > 1e-5]
    got = statistics(t, backend)["%s_underflow" % fmt]
    scaled = t * (largest / t.abs().max())
    cast = scaled.to(dtype).float()
    flushed = int(((t != 0) & (cast == 0)).sum())
    rounded_up = int(((scaled.abs() < smallest) & (cast.abs() == smallest)).sum())
    assert got == flushed + rounded_up and flushed > 100 and rounded_up > 10, (got, flushed, rounded_up)


@pytest.mark.parametrize("backend", backends())
def test_integers_and_empty_and_all_nan(backend):
    ints = torch.tensor([70000, -65505, 65504, 3, 0], dtype=torch.int64)
    got = statistics(ints, backend)
    assert (got["amax"], got["f16_overflow"], got["f16_underflow"]) == (70000.0, 2, 0)
    # 3 * 448 < 70000 * 2^-9 (136.7)? no: nothing flushes in E4M3; 3 * 57344 < 70000 * 2^-16 neither.
    assert (got["e4m3_underflow"], got["e5m2_underflow"]) == (0, 0)
    empty = statistics(torch.zeros(0), backend)
    assert math.isnan(empty["amax"]) and all(empty[name] == 0 for name in COUNTS)
    nans = statistics(torch.full((5,), float("nan")), backend)
    assert math.isnan(nans["amax"]) and all(nans[name] == 0 for name in COUNTS)
    assert math.isnan(nans["std"]) and math.isnan(nans["l2"])  # not 0, which read as vanishing


# ------------------------------------------------------------------ the rules, end to end

CLI = os.environ.get("HOOKSCOPE_CLI", os.path.join(HERE, "..", "..", "build", "cli", "hookscope-cli"))
needs_cli = pytest.mark.skipif(not os.path.exists(CLI), reason="hookscope-cli is not built")

ATTACHED_SCRIPT = '''
import sys
import torch
import hookscope
from architectures import GrowingNet

model = GrowingNet()
hs = hookscope.attach(model)
try:
    for step in range(10):
        loss = model(torch.rand(4, 8) + 1).mean()
        loss.backward()
        hs.step(loss)
except hookscope.Stopped as stopped:
    print("stopped:", stopped, flush=True)
    sys.exit(7)
'''


def first_overflow(export):
    import csv
    with open(os.path.join(export, "alerts.csv"), newline="") as f:
        alerts = [a for a in csv.DictReader(f) if a["rule"] == "fp16_overflow"]
    assert alerts, "fp16_overflow never fired"
    first = min(int(a["step"]) for a in alerts)
    return first, {(a["module"], a["kind"]) for a in alerts if int(a["step"]) == first}


@needs_cli
def test_a_model_file_whose_layer_overflows_float16_breaks_at_that_step_and_module(tmp_path):
    import subprocess
    from architectures import GrowingNet
    path = str(tmp_path / "grow.pt")
    torch.jit.script(GrowingNet()).save(path)
    out = str(tmp_path / "run")
    done = subprocess.run([CLI, "capture", path, "--out", out, "--hook", "*", "--input", "4x8:float32:1:2",
                           "--steps", "8", "--optimizer", "none", "--break", "fp16_overflow"],
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 6, done.stderr
    step, where = first_overflow(out)
    assert step == 4 and ("grow", "activation") in where, (step, where)


@needs_cli
def test_an_attached_script_whose_layer_overflows_float16_is_stopped_at_that_step(tmp_path):
    import subprocess
    from test_attach import Recorder
    recorder = Recorder(str(tmp_path), "--hook", "*", "--break", "fp16_overflow")
    script = tmp_path / "grow_train.py"
    script.write_text(ATTACHED_SCRIPT)
    env = dict(os.environ, HOOKSCOPE_ADDRESS=recorder.address,
               PYTHONPATH=os.pathsep.join([os.path.join(HERE, "..", "..", "python"), FIXTURES_SOURCE]))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 7, done.stderr
    # The first place it shows, in forward order: grow, not the layers it spread to.
    assert "stopped the run at step 4 on fp16_overflow: 32 values (100%) of the activation of 'grow'" in done.stdout, \
        done.stdout
    code, err = recorder.wait()
    assert code == 6, err
    step, where = first_overflow(recorder.out)
    assert step == 4 and ("grow", "activation") in where, (step, where)
