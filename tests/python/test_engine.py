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

from engine_support import cli, write_opening_pickle

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
