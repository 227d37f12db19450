"""HookScope's Python engine (python -m hookscope.engine) through hookscope-cli: torch.export
programs and whole-model pickles, their numbers against PyTorch's own hooks on the eager
originals, and what it refuses. Fixtures: tests/fixtures/make_fixtures.py (NAME_exported.pt2,
.data.pt and .steps.json: the eager model's hooks over 3 SGD steps)."""
import ast
import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile

import pytest
import torch

from deadlines import LONG_DEADLINE

CLI = os.environ.get("HOOKSCOPE_CLI", "build/cli/hookscope-cli")
FIXTURES = os.environ.get("HOOKSCOPE_FIXTURES", "build/fixtures")
EXPORTED = ["twice_inplace_exported", "resnet18_exported", "encoder_exported", "sdpa_exported"]

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(FIXTURES, "twice_inplace_exported.pt2")),
                                reason="no .pt2 fixtures (make_fixtures with PyTorch 2.3 or newer)")

NET = '''
import torch.nn as nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(3, 3)
        self.out = nn.Linear(3, 2)
    def forward(self, x):
        h = self.act(self.fc(x))
        return self.out(self.act(self.fc2(self.fc2(h))))
'''


@pytest.fixture
def tmp():
    path = tempfile.mkdtemp(prefix="hs-engine-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def cli(*args, env=None):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=LONG_DEADLINE,
                          env=dict(os.environ, **(env or {})))


def write_opening_pickle(victim, path, extra=""):
    """torch.save of a dict whose value opens `victim` for writing when it is unpickled."""
    code = ("import torch\nclass Evil:\n    def __reduce__(self):\n        return (open, (%r, 'w'))\n"
            "torch.save({%s'x': Evil()}, %r)\n" % (victim, extra, path))
    subprocess.run([sys.executable, "-c", code], check=True)


def rows_of(folder):
    with open(os.path.join(folder, "stats.csv"), newline="") as f:
        return {(int(r["step"]), r["kind"], r["module"], int(r["call"]), int(r["index"])): r for r in csv.DictReader(f)}


def assert_parity(rows, reference):
    for ref in reference:
        key = (ref["step"], ref["kind"], ref["module"], ref["call"], ref["index"])
        assert key in rows, "HookScope has no capture %s" % (key,)
        row = rows[key]
        assert int(row["numel"]) == ref["numel"], key
        rms = ref["l2"] / math.sqrt(max(1, ref["numel"]))
        for stat, value in (("l2norm", ref["l2"]), ("mean", ref["mean"]), ("min", ref["min"]), ("max", ref["max"])):
            ours = float(row[stat])
            assert abs(ours - value) <= 1e-5 * max(abs(ours), abs(value), rms) + 1e-12, \
                "%s %s: HookScope %r, PyTorch's hooks %r" % (key, stat, ours, value)
    # Nothing HookScope reports that the hooks did not see.
    assert len([k for k in rows if k[1] in ("activation", "gradient")]) == len(reference)


@pytest.mark.parametrize("name", EXPORTED)
def test_an_exported_program_gives_the_eager_models_numbers_over_three_steps(tmp, name):
    out = os.path.join(tmp, "run")
    result = cli("capture", os.path.join(FIXTURES, name + ".pt2"), "--out", out, "--hook", "*",
                 "--data", os.path.join(FIXTURES, name + ".data.pt"), "--steps", "3", "--loss", "mean",
                 "--optimizer", "sgd", "--lr", "0.05")
    assert result.returncode == 0, result.stderr
    with open(os.path.join(FIXTURES, name + ".steps.json")) as f:
        reference = json.load(f)
    assert {r["step"] for r in reference} == {0, 1, 2}
    assert_parity(rows_of(out), reference)


def test_inspect_shows_the_eager_types_calls_and_example_input():
    result = cli("inspect", os.path.join(FIXTURES, "twice_inplace_exported.pt2"), "--input", "6x8")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("twice_inplace_exported.pt2: 7 modules") and lines[0].endswith("input 6x8")
    shared = [line for line in lines if line.strip().startswith("shared ")][0]
    assert "Linear" in shared and "call 0: 6x16; call 1: 6x16" in shared
    assert "InterpreterModule" not in result.stdout


def test_a_module_the_program_never_calls_is_typed_by_its_parameters_and_columns_stay_apart():
    # MultiheadAttention uses out_proj's weights without calling it: torch.export keeps no class
    # for it. It is not called, and Linear-shaped; "TransformerEncoderLayer" does not run into
    # the parameter counts.
    result = cli("inspect", os.path.join(FIXTURES, "encoder_exported.pt2"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    out_proj = [line for line in lines if line.strip().startswith("out_proj ")]
    assert out_proj and all("Linear (not called)" in line for line in out_proj), out_proj
    layer = [line for line in lines if "TransformerEncoderLayer" in line][0]
    assert "TransformerEncoderLayer " in layer and layer.split()[-2:] == ["0", "8544"], layer
    width = len(lines[1].split("own params")[0])
    assert all(len(line) > width and line[width - 1] == " " for line in lines[2:]), lines


def test_capture_uses_the_programs_example_inputs_when_none_are_given(tmp):
    out = os.path.join(tmp, "run")
    result = cli("capture", os.path.join(FIXTURES, "encoder_exported.pt2"), "--out", out, "--hook", "head",
                 "--steps", "2")
    assert result.returncode == 0, result.stderr
    with open(os.path.join(out, "manifest.json")) as f:
        inputs = json.load(f)["inputs"]
    # The example's token ids: their shape, dtype and the range they drew from.
    assert len(inputs) == 1 and inputs[0].startswith("4x7:int64:0:"), inputs
    shapes = {r["shape"] for r in rows_of(out).values()}
    assert shapes == {"4x5"}


def make_pickle(folder):
    """torch.save(Net()) of a class in folder/mymodels.py, and its eager twin for the reference."""
    with open(os.path.join(folder, "mymodels.py"), "w") as f:
        f.write(NET)
    code = ("import sys, torch; sys.path.insert(0, %r); import mymodels; torch.manual_seed(3); "
            "torch.save(mymodels.Net(), %r)" % (folder, os.path.join(folder, "net.pt")))
    subprocess.run([sys.executable, "-c", code], check=True)
    sys.path.insert(0, folder)
    try:
        return torch.load(os.path.join(folder, "net.pt"), weights_only=False)
    finally:
        sys.path.remove(folder)
        sys.modules.pop("mymodels", None)


def reference_steps(model, x, steps, lr):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
    from make_fixtures import golden_steps
    return golden_steps(model, x, steps, lr)


def test_a_whole_model_pickle_needs_trust_and_its_classes_then_gives_pytorchs_numbers(tmp):
    eager = make_pickle(tmp)
    data = os.path.join(tmp, "data.pt")
    x = torch.randn(5, 4)
    torch.save({"inputs": x}, data)
    out = os.path.join(tmp, "run")
    args = ["capture", os.path.join(tmp, "net.pt"), "--out", out, "--hook", "*", "--data", data, "--steps", "3",
            "--loss", "mean", "--optimizer", "sgd", "--lr", "0.05"]
    refused = cli(*args)
    assert refused.returncode == 9 and "--trust" in refused.stderr and "mymodels.Net" in refused.stderr
    assert not os.path.exists(out)
    missing = cli(*args, "--trust")
    assert missing.returncode != 0 and "mymodels" in missing.stderr and "--python-path" in missing.stderr
    loaded = cli(*args, "--trust", "--python-path", tmp)
    assert loaded.returncode == 0, loaded.stderr
    assert_parity(rows_of(out), reference_steps(eager, x, 3, 0.05))


def test_a_checkpoint_or_another_file_says_what_it_is(tmp):
    # A checkpoint opens as weights: a tree from its tensor names, nothing to run.
    checkpoint = os.path.join(tmp, "weights.pth")
    torch.save(torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1)).state_dict(),
               checkpoint)
    result = cli("inspect", checkpoint)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "weights.pth: 3 modules, 11 parameters"
    assert lines[2].split() == ["(root", "checkpoint)", "checkpoint", "0", "11"]
    assert lines[3].split() == ["0", "weights", "8", "8"] and lines[4].split() == ["2", "weights", "3", "3"]
    text = os.path.join(tmp, "notes.txt")
    with open(text, "w") as f:
        f.write("not a model\n")
    result = cli("inspect", text)
    assert result.returncode == 3 and "not a zip file" in result.stderr and "torch.export.save" in result.stderr


def test_an_old_pytorch_says_which_version_a_pt2_needs(tmp):
    old = "/usr/bin/python3"
    probe = subprocess.run([old, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    if probe.returncode != 0 or not probe.stdout.startswith("1."):
        pytest.skip("no PyTorch 1.x at /usr/bin/python3")
    result = cli("inspect", os.path.join(FIXTURES, "twice_inplace_exported.pt2"), "--python", old)
    assert result.returncode == 3, result.stderr
    assert "needs PyTorch 2.3 or newer" in result.stderr and probe.stdout.strip() in result.stderr
    assert "--python" in result.stderr


def test_a_file_that_writes_when_opened_leaves_the_victim_unchanged_even_trusted(tmp):
    victim = os.path.join(tmp, "victim.txt")
    with open(victim, "w") as f:
        f.write("original\n")
    # A pickle that opens the victim for writing when it is loaded ...
    evil = os.path.join(tmp, "evil.pt")
    write_opening_pickle(victim, evil)
    # ... and a .pt2 whose sample inputs are that pickle (torch.export.load unpickles them with
    # weights_only=False).
    program = os.path.join(tmp, "evil.pt2")
    with zipfile.ZipFile(os.path.join(FIXTURES, "twice_inplace_exported.pt2")) as source, \
            zipfile.ZipFile(program, "w") as target:
        for item in source.infolist():
            content = source.read(item.filename)
            if item.filename.endswith("sample_inputs/model.pt"):
                with open(evil, "rb") as f:
                    content = f.read()
            target.writestr(item, content)
    # Untrusted: refused before it is opened, with what it would run.
    refused = cli("inspect", program)
    assert refused.returncode == 9 and "io.open" in refused.stderr and "--trust" in refused.stderr
    for path in (evil, program):
        result = cli("capture", path, "--out", os.path.join(tmp, "run"), "--input", "6x8", "--trust")
        assert result.returncode != 0
        with open(victim) as f:
            assert f.read() == "original\n", path
        assert "confinement refused" in result.stderr, result.stderr


HOSTILE = r"""
import ctypes, errno, fcntl, os, platform, struct, termios
libc = ctypes.CDLL(None, use_errno=True)
results = {}


def attempt(name, do):
    try:
        do()
        results[name] = "done"
    except OSError as exc:
        results[name] = errno.errorcode.get(exc.errno, str(exc.errno))


def syscall(number, *args):
    if libc.syscall(number, *args) == -1:
        raise OSError(ctypes.get_errno(), "")


numbers = {"x86_64": (129, 297), "aarch64": (138, 240)}.get(platform.machine())
info = ctypes.create_string_buffer(128)
struct.pack_into("iii", info, 0, 15, 0, -1)  # SIGTERM, SI_QUEUE: what the kernel lets a process queue to another
if numbers:
    attempt("rt_sigqueueinfo", lambda: syscall(numbers[0], VICTIM, 15, info))
    attempt("rt_tgsigqueueinfo", lambda: syscall(numbers[1], VICTIM, VICTIM, 15, info))
attempt("kill", lambda: os.kill(VICTIM, 15))
attempt("kill_group", lambda: os.kill(0, 0))
tty = os.open(TTY, os.O_RDONLY)  # no O_NOCTTY: a session leader would take it as its terminal
attempt("TIOCSTI", lambda: fcntl.ioctl(tty, termios.TIOCSTI, b"x"))
attempt("chmod", lambda: os.chmod(FILE, 0o777))
attempt("fchmod", lambda: os.fchmod(os.open(FILE, os.O_RDONLY), 0o777))
attempt("chown", lambda: os.chown(FILE, os.getuid(), os.getgid()))
attempt("utime", lambda: os.utime(FILE, (0, 0)))
attempt("setxattr", lambda: os.setxattr(FILE, "user.hookscope", b"1"))
attempt("removexattr", lambda: os.removexattr(FILE, "user.hookscope"))
raise RuntimeError("CONFINEMENT %r" % sorted(results.items()))
"""


def test_a_trusted_pickle_cannot_signal_type_into_a_terminal_or_change_a_files_metadata(tmp):
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    master, slave = os.openpty()
    target = os.path.join(tmp, "notes.txt")
    with open(target, "w") as f:
        f.write("mine\n")
    os.chmod(target, 0o600)
    before = os.stat(target)
    try:
        code = HOSTILE.replace("VICTIM", str(victim.pid)).replace("TTY", repr(os.ttyname(slave))) \
                      .replace("FILE", repr(target))
        evil = os.path.join(tmp, "evil.pt")
        maker = ("import torch\nclass Evil:\n    def __reduce__(self):\n        return (exec, (%r, {}))\n"
                 "torch.save({'x': Evil()}, %r)\n" % (code, evil))
        subprocess.run([sys.executable, "-c", maker], check=True)
        result = cli("capture", evil, "--out", os.path.join(tmp, "run"), "--input", "2x3", "--trust")
        assert result.returncode == 3, result.stderr
        assert "CONFINEMENT" in result.stderr, result.stderr
        outcomes = dict(ast.literal_eval(re.search(r"CONFINEMENT (\[.*?\])", result.stderr).group(1)))
        assert outcomes and set(outcomes.values()) == {"EPERM"}, outcomes
        assert victim.poll() is None, "the victim was signalled"
        after = os.stat(target)
        assert (after.st_mode, after.st_mtime_ns, after.st_uid) == (before.st_mode, before.st_mtime_ns, before.st_uid)
        os.set_blocking(slave, False)
        try:
            typed = os.read(slave, 64)
        except BlockingIOError:
            typed = b""
        assert typed == b"", "bytes were typed into the terminal"
    finally:
        victim.kill()
        victim.wait()
        os.close(master)
        os.close(slave)


# ------------------------------------------------------------------ checkpoints

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from hookscope.engine.checkpoint import CheckpointError, read_checkpoint  # noqa: E402


def write_safetensors(path, tensors, header_patch=None, length=None):
    """A safetensors file written by hand from the documented format (8-byte length, JSON, data)."""
    header, data = {}, b""
    for name, t in tensors.items():
        raw = t.contiguous().view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": {torch.float32: "F32", torch.int64: "I64"}[t.dtype], "shape": list(t.shape),
                        "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if header_patch:
        header_patch(header)
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write((len(text) if length is None else length).to_bytes(8, "little") + text + data)


def weights(seed):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def table(stdout):
    """{tensor: [min, max, mean, std, l2norm, NaN, Inf]} from `checkpoint`'s table (module rows
    hold one word; a tensor's row its leaf name under its module)."""
    rows, module = {}, ""
    for line in stdout.splitlines()[2:]:
        words = line.split()
        if len(words) == 1:
            module = words[0]
            continue
        name = (module + "." + words[0]) if line.startswith("  ") else words[0]
        rows[name] = [float(w) for w in words[3:8]] + [int(words[8]), int(words[9])]
    return rows


@pytest.mark.parametrize("form", ["state_dict", "safetensors"])
def test_a_checkpoints_statistics_equal_torchs(tmp, form):
    sd = weights(0)
    sd["2.bias"][1] = float("nan")
    sd["0.weight"][0, 0] = float("inf")
    path = os.path.join(tmp, "w.pt" if form == "state_dict" else "w.safetensors")
    torch.save(sd, path) if form == "state_dict" else write_safetensors(path, sd)
    result = cli("checkpoint", path)
    assert result.returncode == 0, result.stderr
    assert "NaN or Inf in 2 of them" in result.stdout.splitlines()[0]
    rows = table(result.stdout)
    assert set(rows) == set(sd)
    for name, t in sd.items():
        d = t.double().flatten()
        finite = d[torch.isfinite(d)]
        expected = [finite.min().item(), finite.max().item(), finite.mean().item(), finite.std().item(),
                    finite.norm().item()]
        for ours, theirs in zip(rows[name][:5], expected):
            assert abs(ours - theirs) <= 1e-5 * max(abs(theirs), 1e-3), (name, rows[name], expected)
        assert rows[name][5:] == [int(torch.isnan(d).sum()), int(torch.isinf(d).sum())]


def test_a_flipped_byte_in_a_checkpoints_tensor_data_is_named_not_measured(tmp):
    """torch.load does not check a record's CRC-32: checkpoint does, and a damaged record is exit
    4 naming it, never statistics of altered values (min -6.5e36 for -0.019)."""
    from zip_damage import flip_a_byte_in
    path = os.path.join(tmp, "weights.pt")
    torch.save(weights(0), path)
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename and i.file_size >= 16)
    flip_a_byte_in(path, info.filename, offset=3, mask=0x40)
    for args in (("checkpoint", path), ("checkpoint", path, "--compare", path)):
        result = cli(*args)
        assert result.returncode == 4, (args, result.stdout, result.stderr)
        assert "its record %s does not match the CRC-32" % info.filename in result.stderr, result.stderr
        assert "Traceback" not in result.stderr


def test_a_checkpoint_with_cycles_deep_nesting_or_tensors_without_values_says_what_never_a_traceback(tmp):
    """A list that holds itself, nesting past 64 levels: refused by path; meta and sparse tensors
    listed as having no values; a quantized one measured dequantized; a view that repeats one
    stored value 10^12 times is not walked (a 1.7 KB file kept checkpoint busy for minutes)."""
    looped = [torch.ones(2)]
    looped.append(looped)
    deep = torch.ones(1)
    for _ in range(200):
        deep = [deep]
    for name, value, says in (("cycle", {"w": torch.ones(2), "loop": looped}, "'loop.1' holds a container it is"),
                              ("deep", {"deep": deep}, "nested more than 64 containers deep")):
        path = os.path.join(tmp, name + ".pt")
        torch.save(value, path)
        result = cli("checkpoint", path)
        assert result.returncode == 4 and says in result.stderr, (name, result.stderr)
        assert "Traceback" not in result.stderr
    odd = {"meta": torch.empty(3, 4, device="meta"), "sparse": torch.eye(3).to_sparse(),
           "quantized": torch.quantize_per_tensor(torch.tensor([-1.0, 0.5, 2.0]), 0.1, 0, torch.qint8),
           "repeated": torch.ones(1).expand(10 ** 12), "plain": torch.arange(4.0)}
    path = os.path.join(tmp, "odd.pt")
    torch.save(odd, path)
    assert os.path.getsize(path) < 10_000
    result = cli("checkpoint", path)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines()[2:] if not line.startswith("measured")}
    assert "a meta tensor: no values to measure" in lines["meta"]
    assert "a sparse_coo tensor: no values to measure" in lines["sparse"]
    assert "a view of 1 stored values seen as 1000000000000" in lines["repeated"]
    assert lines["quantized"].split()[2] == "qint8" and lines["quantized"].split()[-7:-5] == ["-1", "2"]
    assert "measured dequantized (quantized tensors): quantized" in result.stdout
    assert lines["plain"].split()[-7:-5] == ["0", "3"]
    compared = cli("checkpoint", path, "--compare", path)
    assert compared.returncode == 0, compared.stderr
    assert "not measured (no values, or a view repeating its storage): meta, repeated, sparse" in compared.stdout


def test_checkpoint_leaves_no_scratch_folder_and_says_when_its_python_cannot_run_the_engine(tmp):
    """The confined engine cannot remove its own scratch folder: hookscope-cli makes and removes it,
    on every exit. A --python that cannot run the engine is said to be so (exit 8), not a bare 1."""
    path = os.path.join(tmp, "weights.pt")
    torch.save(weights(0), path)
    scratch = os.path.join(tmp, "scratch")
    os.mkdir(scratch)
    for args in ((path,), (path, "--compare", path), (os.path.join(tmp, "missing.pt"),)):
        result = cli("checkpoint", *args, env={"TMPDIR": scratch})
        assert result.returncode in (0, 4), result.stderr
        assert os.listdir(scratch) == [], (args, os.listdir(scratch))
    result = cli("checkpoint", path, "--python", "/bin/false")
    assert result.returncode == 8, result.stderr
    assert "/bin/false could not run hookscope.engine (exit 1)" in result.stderr, result.stderr


def test_a_checkpoints_buffers_are_not_counted_as_parameters_and_its_nan_is_an_alert(tmp):
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(16), torch.nn.Linear(4, 2))
    state = model.state_dict()
    state["2.weight"][0, 0] = float("nan")
    path = os.path.join(tmp, "bn.pt")
    torch.save(state, path)
    result = cli("inspect", path)
    assert result.returncode == 0, result.stderr
    norm = [line for line in result.stdout.splitlines() if line.strip().startswith("1 ")][0]
    assert norm.split()[-2:] == ["32", "32"], norm  # weight and bias; not running_mean, running_var, num_batches_tracked
    out = os.path.join(tmp, "run")
    result = cli("capture", path, "--out", out, "--steps", "1", "--kinds", "param", "--hook", "*")
    assert result.returncode == 0, result.stderr
    with open(os.path.join(out, "alerts.csv")) as f:
        alerts = list(csv.DictReader(f))
    assert [(a["module"], a["rule"]) for a in alerts] == [("2.weight", "non_finite")], alerts


def test_comparing_two_checkpoints_names_what_fine_tuning_changed_and_what_went_nan(tmp):
    before, after = weights(0), weights(0)
    after["2.weight"] += 0.05            # the head, fine-tuned
    after["0.bias"] += 1e-4              # barely
    after["2.bias"][0] = float("nan")    # gone bad
    a, b = os.path.join(tmp, "before.pt"), os.path.join(tmp, "after.safetensors")
    torch.save(before, a)
    write_safetensors(b, after)
    result = cli("checkpoint", a, "--compare", b)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == ("before.pt -> after.safetensors: 4 tensors in both, 3 changed, 1 unchanged; NaN or Inf in 1 "
                        "(the change is measured over the values finite in both)")
    order = [line.split()[0] for line in lines[2:6]]
    assert order == ["2.bias", "2.weight", "0.bias", "0.weight"]  # NaN first, then the largest relative change
    # The bias that went NaN: its change over its finite values (not nan, relative not inf), and
    # the NaN counted in the file that holds it, whichever way round the files are given.
    nan_bias = lines[2].split()
    finite = torch.arange(1, before["2.bias"].numel())
    assert abs(float(nan_bias[1]) - (after["2.bias"][finite] - before["2.bias"][finite]).double().norm().item()) <= 1e-9
    # NaN and Inf of each file in columns of their own: NaN 1st, Inf 1st, NaN 2nd, Inf 2nd.
    assert lines[1].split()[-8:] == ["NaN", "1st", "Inf", "1st", "NaN", "2nd", "Inf", "2nd"], lines[1]
    assert math.isfinite(float(nan_bias[2])) and nan_bias[3:] == ["0", "0", "1", "0"], nan_bias
    reverse = cli("checkpoint", b, "--compare", a)
    assert reverse.returncode == 0, reverse.stderr
    assert reverse.stdout.splitlines()[2].split()[3:] == ["1", "0", "0", "0"], reverse.stdout
    with_inf = dict(after)
    with_inf["2.bias"] = after["2.bias"].clone()
    with_inf["2.bias"][1] = float("inf")
    c = os.path.join(tmp, "inf.pt")
    torch.save(with_inf, c)
    both = cli("checkpoint", a, "--compare", c)
    assert both.stdout.splitlines()[2].split()[3:] == ["0", "0", "1", "1"], both.stdout
    table = cli("checkpoint", a, "--compare", c, "--csv")
    rows = list(csv.DictReader(table.stdout.splitlines()))
    bias = next(r for r in rows if r["tensor"] == "2.bias")
    assert (bias["nonfinite"], bias["nan_first"], bias["inf_first"], bias["nan_second"], bias["inf_second"]) == \
        ("2", "0", "0", "1", "1"), bias
    head = lines[3].split()
    delta = (after["2.weight"].double() - before["2.weight"].double()).norm().item()
    assert abs(float(head[1]) - delta) <= 1e-5 * delta
    assert abs(float(head[2]) - delta / before["2.weight"].double().norm().item()) <= 1e-5


@pytest.mark.parametrize("damage,says", [
    ("truncated", "outside the"),
    ("huge header", "claims a 1152921504606846976-byte header"),
    ("offsets out of range", "outside the"),
    ("wrong length", "bytes of data"),
    ("not json", "not JSON"),
    ("bad dtype", "does not read"),
    ("dtype as a list", "has dtype ['F32'], which HookScope does not read (a dtype is a name"),
    ("dtype as an object", "has dtype {'F32': 1}, which HookScope does not read"),
    ("overlapping", "(they overlap)"),
    ("gap", "belong to no tensor"),
    ("bytes after", "the bytes after belong to no tensor"),
    ("booleans as offsets", "not two whole numbers"),
    ("duplicate name", "the key '0.bias' is given twice"),
])
def test_a_damaged_or_hostile_safetensors_file_is_refused_with_what_is_wrong(tmp, damage, says):
    path = os.path.join(tmp, "bad.safetensors")
    sd = weights(1)
    if damage == "truncated":
        write_safetensors(path, sd)
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) - 7)
    elif damage == "huge header":
        write_safetensors(path, sd, length=1 << 60)
    elif damage == "offsets out of range":
        write_safetensors(path, sd, header_patch=lambda h: h["0.weight"].update(data_offsets=[0, 1 << 62]))
    elif damage == "wrong length":
        write_safetensors(path, sd, header_patch=lambda h: h["0.weight"].update(shape=[6, 6]))
    elif damage == "not json":
        with open(path, "wb") as f:
            f.write((5).to_bytes(8, "little") + b"{oops")
    elif damage in ("overlapping", "gap", "bytes after", "booleans as offsets", "duplicate name"):
        # What the safetensors library refuses: the tensors must tile the data, once each.
        a, b = torch.arange(4, dtype=torch.float32), torch.arange(4, dtype=torch.float32) + 10
        body = a.numpy().tobytes() + b.numpy().tobytes()
        entries = {"overlapping": '"a": [0, 16], "b": [8, 24]', "gap": '"a": [0, 16], "b": [24, 40]',
                   "bytes after": '"a": [0, 16], "b": [16, 32]', "booleans as offsets": '"a": [false, 16], "b": [16, 32]',
                   "duplicate name": '"a": [0, 16], "0.bias": [16, 32], "0.bias": [16, 32]'}[damage]
        fields = []
        for pair in entries.split("], "):
            name, offsets = pair.split(": ", 1)
            fields.append('%s: {"dtype": "F32", "shape": [4], "data_offsets": %s}' % (name, offsets.rstrip("]") + "]"))
        text = ("{" + ", ".join(fields) + "}").encode()
        extra = {"gap": 8, "bytes after": 8}.get(damage, 0)
        with open(path, "wb") as f:
            f.write(len(text).to_bytes(8, "little") + text + body + b"\0" * extra)
    elif damage == "dtype as a list":  # was a TypeError, reported as "could not run hookscope.engine"
        write_safetensors(path, sd, header_patch=lambda h: h["0.bias"].update(dtype=["F32"]))
    elif damage == "dtype as an object":
        write_safetensors(path, sd, header_patch=lambda h: h["0.bias"].update(dtype={"F32": 1}))
    else:
        write_safetensors(path, sd, header_patch=lambda h: h["0.bias"].update(dtype="F8_E4M3X"))
    result = cli("checkpoint", path)
    assert result.returncode == 4, result.stdout + result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_a_checkpoint_that_needs_code_is_not_run(tmp):
    victim = os.path.join(tmp, "victim.txt")
    with open(victim, "w") as f:
        f.write("original\n")
    path = os.path.join(tmp, "evil.pt")
    write_opening_pickle(victim, path, extra="'w': torch.ones(2), ")
    result = cli("checkpoint", path, "--no-confine")  # weights_only alone keeps it from running
    assert result.returncode == 4 and "cannot be read as weights alone" in result.stderr
    with open(victim) as f:
        assert f.read() == "original\n"


def test_any_damage_to_a_checkpoint_is_a_checkpoint_error_never_another(tmp):
    """Random byte changes, truncations and extensions of a safetensors file and a torch zip: each
    either reads or raises CheckpointError (the message the CLI prints), nothing else."""
    import random
    rng = random.Random(0)
    sd = weights(2)
    sources = [os.path.join(tmp, "good.safetensors"), os.path.join(tmp, "good.pt")]
    write_safetensors(sources[0], sd)
    torch.save(sd, sources[1])
    outcomes = {"read": 0, "refused": 0}
    for i in range(400):
        with open(sources[i % 2], "rb") as f:
            data = bytearray(f.read())
        for _ in range(rng.randint(1, 6)):
            where = rng.randrange(len(data))
            choice = rng.random()
            if choice < 0.6:
                data[where] = rng.randrange(256)
            elif choice < 0.8:
                del data[where:]
            else:
                data[where:where] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            if not data:
                data = bytearray(b"\0")
        path = os.path.join(tmp, "mutant-%d" % i)
        with open(path, "wb") as f:
            f.write(data)
        try:
            read_checkpoint(path)
            outcomes["read"] += 1
        except CheckpointError:
            outcomes["refused"] += 1
        os.remove(path)
    assert outcomes["refused"] > 100 and sum(outcomes.values()) == 400


def test_interventions_act_on_an_exported_program(tmp):
    out = os.path.join(tmp, "run")
    result = cli("capture", os.path.join(FIXTURES, "twice_inplace_exported.pt2"), "--out", out, "--hook", "*",
                 "--data", os.path.join(FIXTURES, "twice_inplace_exported.data.pt"), "--steps", "1",
                 "--zero-output", "inp")
    assert result.returncode == 0, result.stderr
    rows = rows_of(out)
    # inp's own output is recorded as it was; what reads it (the in-place ReLU) sees zeros.
    assert float(rows[(0, "activation", "inp", 0, 0)]["zero_frac"]) < 1
    assert float(rows[(0, "activation", "act", 0, 0)]["zero_frac"]) == 1


def test_a_python_engine_leaves_no_scratch_folder_behind(tmp):
    # The confined engine cannot remove its own folder: the process that started it does.
    temp = os.path.join(tmp, "temp")
    os.mkdir(temp)
    model = os.path.join(FIXTURES, "twice_inplace_exported.pt2")
    result = cli("capture", model, "--out", os.path.join(tmp, "run"), "--hook", "*", "--steps", "1",
                 "--data", os.path.join(FIXTURES, "twice_inplace_exported.data.pt"), env={"TMPDIR": temp})
    assert result.returncode == 0, result.stderr
    refused = cli("capture", os.path.join(FIXTURES, "bad", "eager_zip.pt"), "--out",
                  os.path.join(tmp, "refused"), "--input", "2x4", env={"TMPDIR": temp})
    assert refused.returncode in (3, 9), refused.stderr
    assert os.listdir(temp) == [], os.listdir(temp)
    # Trusted, the same pickle cannot load (its classes were its script's own): the engine's own
    # message is passed on, and its log (hookscope-engine-PID.log, which no message named) went
    # with it; it was left in TMPDIR.
    failed = cli("capture", os.path.join(FIXTURES, "bad", "eager_zip.pt"), "--trust", "--out",
                 os.path.join(tmp, "failed"), "--input", "2x4", env={"TMPDIR": temp})
    assert failed.returncode == 3 and "defined the model's classes itself" in failed.stderr, failed.stderr
    assert "its whole output" not in failed.stderr
    assert os.listdir(temp) == [], os.listdir(temp)


def test_a_step_that_never_ends_is_stopped_at_the_step_timeout(tmp):
    with open(os.path.join(tmp, "slow.py"), "w") as f:
        f.write("import time, torch.nn as nn\nclass Slow(nn.Module):\n    def __init__(self):\n"
                "        super().__init__()\n        self.fc = nn.Linear(3, 2)\n"
                "    def forward(self, x):\n        time.sleep(3600)\n        return self.fc(x)\n")
    code = ("import sys, torch; sys.path.insert(0, %r); import slow; torch.save(slow.Slow(), %r)"
            % (tmp, os.path.join(tmp, "slow.pt")))
    subprocess.run([sys.executable, "-c", code], check=True)
    result = cli("capture", os.path.join(tmp, "slow.pt"), "--out", os.path.join(tmp, "run"), "--input", "2x3",
                 "--trust", "--python-path", tmp, "--step-timeout", "3", "--open-timeout", "0")  # start: any time
    assert result.returncode == 4, result.stderr
    assert "step-timeout" in result.stderr
