"""The hookscope package attached to real training scripts and to `hookscope-cli record`.

Run with pytest by any Python with torch (ctest runs it with the venv's PyTorch 2.x and with
Debian's 1.13 from /usr/bin/python3). HOOKSCOPE_CLI names the recorder.
"""
import copy
import csv
import fcntl
import json
import math
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings

import pytest
import torch
import torch.nn as nn
from deadlines import DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
import hookscope  # noqa: E402
from hookscope import _wire  # noqa: E402

CLI = os.environ.get("HOOKSCOPE_CLI", os.path.join(ROOT, "build", "cli", "hookscope-cli"))
SCRIPT = os.path.join(HERE, "attach", "train_script.py")
STATS = ("min", "max", "mean", "std", "l2norm", "zero_frac")

pytestmark = pytest.mark.skipif(not os.path.exists(CLI), reason="hookscope-cli is not built")


@pytest.fixture
def tmp():
    # Short paths: a Unix socket path has at most 107 bytes.
    path = tempfile.mkdtemp(prefix="hs-")
    yield path
    subprocess.run(["rm", "-rf", path])


class Recorder:
    def __init__(self, tmp, *args, address=None):
        self.out = os.path.join(tmp, "export")
        address = address or "unix:" + os.path.join(tmp, "hs.sock")
        self.proc = subprocess.Popen([CLI, "record", "--out", self.out, "--address", address, "--timeout", "120", *args],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        assert line.startswith("HOOKSCOPE_ADDRESS="), line + self.proc.stderr.read()
        self.address = line.split("=", 1)[1]

    def wait(self, timeout=DEADLINE):
        _, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def run_script(address, *args, timeout=DEADLINE):
    env = dict(os.environ, HOOKSCOPE_ADDRESS=address)
    return subprocess.run([sys.executable, SCRIPT, *args], env=env, capture_output=True, text=True, timeout=timeout)


def read_csv(folder, name):
    with open(os.path.join(folder, name), newline="") as f:
        return list(csv.DictReader(f))


def manifest(folder):
    with open(os.path.join(folder, "manifest.json")) as f:
        return json.load(f)


def close_enough(a, b, rel=1e-5, scale=0.0):
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rel * max(abs(a), abs(b), scale) + 1e-30


def assert_matches(rows, reference):
    by_key = {(int(r["step"]), r["module"], int(r["call"]), r["kind"], int(r["index"])): r for r in rows}
    for ref in reference:
        key = (ref["step"], ref["module"], ref["call"], ref["kind"], ref["index"])
        assert key in by_key, "HookScope has no capture %s" % (key,)
        row = by_key[key]
        assert int(row["numel"]) == ref["numel"], key
        scale = ref["l2norm"] / math.sqrt(max(ref["numel"], 1))  # for means and minima near zero
        for stat in STATS:
            assert close_enough(float(row[stat]), ref[stat], scale=scale), \
                "%s %s: HookScope %r, PyTorch's hooks %r" % (key, stat, row[stat], ref[stat])
        assert int(row["nan_count"]) == ref["nan_count"] and int(row["inf_count"]) == ref["inf_count"], key


def test_statistics_equal_what_pytorch_hooks_compute(tmp):
    recorder = Recorder(tmp, "--hook", "*")
    reference = os.path.join(tmp, "reference.json")
    script = run_script(recorder.address, "--reference", reference, "--steps", "6")
    assert script.returncode == 0, script.stderr
    code, err = recorder.wait()
    assert code == 0, err
    assert "closed by the script after 6 steps" in err
    rows = read_csv(recorder.out, "stats.csv")
    with open(reference) as f:
        ref = json.load(f)
    assert len(ref) > 0
    assert_matches(rows, ref)
    # And nothing HookScope reports that the hooks did not see.
    assert len([r for r in rows if r["kind"] in ("activation", "gradient")]) == len(ref)
    # The module called twice, the tuple output and the in-place ReLU are all there.
    assert {int(r["call"]) for r in rows if r["module"] == "shared"} == {0, 1}
    assert {int(r["index"]) for r in rows if r["module"] == "pair" and r["kind"] == "gradient"} == {0, 1}
    scalars = {(int(r["step"]), r["name"]) for r in read_csv(recorder.out, "scalars.csv")}
    assert {(5, "loss"), (5, "lr"), (5, "batch")} <= scalars
    m = manifest(recorder.out)
    assert m["source"] == "script" and m["script"]["torch"] == torch.__version__
    assert m["steps"] == 6 and m["gaps"] == []
    # The script's own loop ran: no run settings of HookScope's that did not apply.
    assert not {"optimizer", "lr", "loss", "momentum", "inputs", "seed"} & set(m), sorted(m)
    assert m["script"]["optimizer"] and m["bins"] == 64 and m["configurations"] == []

    # The gradient at the in-place ReLU's output is what a hook on the ReLU alone sees (with
    # PyTorch 1.13, a hook on the Linear before it as well changes what a plain second hook sees).
    alone = os.path.join(tmp, "alone.json")
    script = run_script("unix:/nonexistent", "--reference", alone, "--only", "act", "--detach", "--steps", "6")
    assert script.returncode == 0, script.stderr
    with open(alone) as f:
        act = [r for r in json.load(f) if r["kind"] == "gradient"]
    assert len(act) == 6
    assert_matches(rows, act)


def test_a_tied_weight_is_counted_once_and_named():
    """An output head that shares its embedding's weight: the hello counts each module's
    parameters as PyTorch's parameters() does (the tied tensor once) and names the tie."""
    emb, mid, head = nn.Embedding(100, 16), nn.Linear(16, 16), nn.Linear(16, 100, bias=False)
    head.weight = emb.weight
    model = nn.Sequential(emb, mid, head)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hs = hookscope.attach(model, address="unix:/nonexistent/hookscope.sock")
    try:
        modules = {m["path"]: m for m in hs._hello()["modules"]}
    finally:
        hs.close()
    assert modules[""]["total"] == sum(p.numel() for p in model.parameters()) == 100 * 16 + 16 * 16 + 16
    assert modules["2"]["total"] == modules["2"]["params"] == 1600
    assert modules["2"]["shared"] == [["2.weight", "0.weight"]]
    assert "shared" not in modules["0"]


def test_records_progress_lines_name_the_exports_step_with_its_own_loss(tmp):
    recorder = Recorder(tmp)
    code = run_script(recorder.address, "--steps", "5").returncode
    assert code == 0
    code, err = recorder.wait()
    assert code == 0, err
    losses = {int(r["step"]): float(r["value"]) for r in read_csv(recorder.out, "scalars.csv") if r["name"] == "loss"}
    shown = [line.split() for line in err.splitlines() if line.startswith("step ") and "loss" in line]
    assert [int(words[1]) for words in shown] == [0, 1, 2, 3, 4], err
    for words in shown:
        assert close_enough(float(words[3]), losses[int(words[1])], rel=1e-5), (words, losses)


MANY_STEPS = r"""
import sys, torch, torch.nn as nn
sys.path.insert(0, %r)
import hookscope
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(8, 8) for _ in range(20)])
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
hs = hookscope.attach(model, opt, wait=True, timeout=120)
for step in range(int(sys.argv[1])):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    hs.step(loss)
hs.close()
""" % os.path.join(ROOT, "python")


def test_a_recorder_whose_output_is_read_only_at_the_end_keeps_reading_the_script(tmp):
    # Recorder reads the recorder's standard error at the end only. A progress line a step filled
    # that pipe (64 KiB: about 1,200 steps; here cut to one page, about 60), the recorder blocked
    # in the write stopped reading the script, which then dropped its captures 16 MiB later
    # (25 KiB a step here, about 650 steps) and lost its last steps at close. The lines now wait;
    # the statistics do not.
    recorder = Recorder(tmp, "--hook", "*", "--kinds", "activation,gradient")
    fcntl.fcntl(recorder.proc.stderr.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    script = os.path.join(tmp, "many_steps.py")
    with open(script, "w") as f:
        f.write(MANY_STEPS)
    steps = 1000
    done = subprocess.run([sys.executable, script, str(steps)], env=dict(os.environ, HOOKSCOPE_ADDRESS=recorder.address),
                          capture_output=True, text=True, timeout=DEADLINE)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "dropped" not in done.stderr and "had not read" not in done.stderr, done.stderr[-2000:]
    code, err = recorder.wait()
    assert code == 0, err[-2000:]
    assert "over %d steps" % steps in err and "dropped" not in err, err[-2000:]
    assert len([line for line in err.splitlines() if line.startswith("step ")]) == steps


def test_a_killed_recorder_leaves_the_script_training(tmp):
    recorder = Recorder(tmp)
    env = dict(os.environ, HOOKSCOPE_ADDRESS=recorder.address)
    script = subprocess.Popen([sys.executable, SCRIPT, "--steps", "60", "--sleep", "0.05"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Kill the recorder once the script is a few steps in.
    for line in iter(recorder.proc.stderr.readline, ""):
        if line.startswith("step 3"):
            break
    os.kill(recorder.proc.pid, signal.SIGKILL)
    recorder.proc.wait()
    out, err = script.communicate(timeout=DEADLINE)
    assert script.returncode == 0, err
    assert "finished 60 steps" in out
    assert "connected at end: False" in out
    assert err.count("HookScope:") == 1, err


def test_a_killed_script_leaves_its_captures(tmp):
    recorder = Recorder(tmp)
    script = run_script(recorder.address, "--kill-self-at", "3", "--steps", "20")
    assert script.returncode == -signal.SIGKILL
    code, err = recorder.wait()
    assert code == 0, err
    assert "disconnected without closing after 4 steps" in err
    m = manifest(recorder.out)
    assert m["steps"] == 4 and "disconnected" in m["script"]["ended"]
    assert {int(r["step"]) for r in read_csv(recorder.out, "stats.csv")} == {0, 1, 2, 3}


def test_no_viewer_one_warning_and_no_hooks(tmp):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hs = hookscope.attach(model, address="unix:" + os.path.join(tmp, "nobody.sock"))
        for _ in range(3):
            hs.step(model(torch.randn(2, 4)).sum())
        hs.close()
    assert not hs.connected
    messages = [str(w.message) for w in caught if "HookScope" in str(w.message)]
    assert len(messages) == 1 and "no viewer listens" in messages[0], messages
    # Nothing hooked: the model runs exactly as without HookScope.
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())


def test_bad_addresses_warn_instead_of_raising():
    model = nn.Linear(2, 2)
    for address in ("http://x", "tcp://nohost", "unix:"):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hs = hookscope.attach(model, address=address)
        assert not hs.connected
        assert any("unix:PATH" in str(w.message) or "tcp://HOST:PORT" in str(w.message) for w in caught), address


def test_a_break_stops_the_script_and_the_recorder_exits_6(tmp):
    recorder = Recorder(tmp, "--break", "non_finite")
    script = run_script(recorder.address, "--nan-at", "2", "--steps", "10")
    assert script.returncode == 7, script.stderr
    assert "stopped: HookScope stopped the run at step 2 on non_finite" in script.stdout
    code, err = recorder.wait()
    assert code == 6, err
    assert manifest(recorder.out)["steps"] == 3
    alerts = read_csv(recorder.out, "alerts.csv")
    assert any(a["rule"] == "non_finite" and a["step"] == "2" for a in alerts)


def test_an_all_nan_step_is_non_finite_not_a_vanishing_gradient(tmp):
    # Every input NaN at step 2: every activation and gradient of that step is NaN.
    recorder = Recorder(tmp, "--hook", "*", "--kinds", "activation,gradient")
    script = run_script(recorder.address, "--nan-at", "2", "--steps", "4")
    assert script.returncode == 0, script.stderr
    code, err = recorder.wait()
    assert code == 0, err
    grads = [r for r in read_csv(recorder.out, "stats.csv") if r["kind"] == "gradient" and r["step"] == "2"]
    assert grads and all(r["l2norm"] == "nan" and r["std"] == "nan" for r in grads), grads[:2]
    rules = {a["rule"] for a in read_csv(recorder.out, "alerts.csv") if a["step"] == "2"}
    assert "non_finite" in rules and "vanishing_gradient" not in rules, rules


def test_the_export_holds_the_whole_model_hooked_or_not(tmp):
    # Only `head` hooked: the manifest still lists every module with its type, parameters and
    # output shapes by call (shared is called twice), so a reopened run shows the whole tree.
    recorder = Recorder(tmp, "--hook", "head", "--kinds", "activation")
    script = run_script(recorder.address, "--steps", "3")
    assert script.returncode == 0, script.stderr
    code, err = recorder.wait()
    assert code == 0, err
    modules = {m["path"]: m for m in manifest(recorder.out)["modules"]}
    assert set(modules) == {"", "inp", "act", "shared", "pair", "pair.a", "pair.b", "head"}
    assert modules[""]["type"] == "Net" and modules[""]["total"] == 8 * 16 + 16 + 16 * 16 + 16 + 2 * (16 * 16 + 16) + 16 * 4 + 4
    assert modules["inp"]["type"] == "Linear" and modules["inp"]["params"] == 8 * 16 + 16
    assert modules["act"]["type"] == "ReLU" and modules["act"]["params"] == 0
    assert len(modules["shared"]["shapes"]) == 2 and modules["pair"]["shapes"][0].count(",") == 1, modules
    run = hookscope.load_run(recorder.out)
    assert not run.modules_from_series and len(run.modules) == 8


def raw_exchange(address, data, read=True):
    """Sends bytes to the listener as a peer would; returns what came back before it closed."""
    path = address[len("unix:"):]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(15)
        s.connect(path)
        try:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        received = b""
        while read:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            received += chunk
        return received


def error_of(received):
    reader = _wire.FrameReader()
    reader.feed(received)
    messages = reader.messages()
    assert messages and messages[0]["type"] == "error", received
    return messages[0]["message"]


def test_the_listener_rejects_bad_peers_and_still_takes_a_script(tmp):
    recorder = Recorder(tmp)
    header = _wire.HEADER
    rng = random.Random(1)
    cases = {
        "random bytes": bytes(rng.randrange(256) for _ in range(4096)),
        "bad version": header.pack(b"HS", 9, 1, 2) + b"{}",
        "huge length": header.pack(b"HS", _wire.PROTOCOL_VERSION, 1, 0xFFFFFFF0),
        "not json": header.pack(b"HS", _wire.PROTOCOL_VERSION, 1, 5) + b"hello",
        "no hello": _wire.json_frame({"type": "step", "step": 0}),
        "old protocol": _wire.json_frame({"type": "hello", "protocol": 0, "modules": [{"path": "", "type": "M"}]}),
        "bad tree": _wire.json_frame({"type": "hello", "protocol": _wire.PROTOCOL_VERSION, "modules": [{"path": "a.b", "type": "M"}]}),
    }
    expected = {
        "random bytes": "does not speak the HookScope protocol",
        "bad version": "protocol version 9",
        "huge length": "over the limit",
        "not json": "not JSON",
        "no hello": "not a hello",
        "old protocol": "protocol version 0, HookScope 2: upgrade the script's hookscope package",
        "bad tree": "not the root",
    }
    for name, data in cases.items():
        assert expected[name] in error_of(raw_exchange(recorder.address, data)), name
    # Truncated frames: the peer hangs up mid-frame; the listener goes on.
    raw_exchange(recorder.address, _wire.json_frame({"type": "hello"})[:11])
    raw_exchange(recorder.address, b"HS")
    assert recorder.proc.poll() is None
    script = run_script(recorder.address, "--steps", "3", "--workers", "0")
    assert script.returncode == 0, script.stderr
    code, err = recorder.wait()
    assert code == 0, err
    assert err.count("refused a connection") >= len(cases)
    assert manifest(recorder.out)["steps"] == 3


def test_a_script_that_breaks_the_protocol_ends_its_session_with_its_captures_kept(tmp):
    recorder = Recorder(tmp)
    hello = {"type": "hello", "protocol": _wire.PROTOCOL_VERSION, "name": "bad.py",
             "modules": [{"path": "", "type": "M", "params": 0}]}
    good = {"module": 0, "call": 0, "kind": "activation", "index": 0, "dtype": "float32", "shape": [2], "numel": 2,
            "min": -3.0, "max": 1.0, "mean": -1.0, "std": 2.8284271247461903, "l2": math.sqrt(10.0), "zeros": 0.0,
            "nan": 0, "inf": 0, "hist": [1, 0, 1], "lo": -3.0, "hi": 1.0}
    bad = dict(good, shape=[1 << 40, 1 << 40], numel=2)
    data = (_wire.json_frame(hello) + _wire.json_frame({"type": "stats", "step": 0, "captures": [good]})
            + _wire.json_frame({"type": "step", "step": 0, "scalars": {"loss": "nan"}})
            + _wire.json_frame({"type": "stats", "step": 1, "captures": [bad]}))
    received = raw_exchange(recorder.address, data)
    reader = _wire.FrameReader()
    reader.feed(received)
    messages = reader.messages()
    assert messages[0]["type"] == "welcome"
    assert messages[-1]["type"] == "error" and "too large" in messages[-1]["message"], messages
    code, err = recorder.wait()
    assert code == 4, err
    assert "bad message" in err
    rows = read_csv(recorder.out, "stats.csv")
    assert len(rows) == 1 and float(rows[0]["l2norm"]) == pytest.approx(math.sqrt(10.0))
    assert read_csv(recorder.out, "scalars.csv")[0]["value"].lower() == "nan"


def test_protocol_versions_that_differ_say_which_side_to_upgrade(tmp):
    """A protocol 1 script meets this recorder, and this package meets a protocol 1 viewer: each
    is told what to upgrade, nothing is lost, and training goes on."""
    recorder = Recorder(tmp)
    old_hello = _wire.json_frame({"type": "hello", "protocol": 1, "modules": [{"path": "", "type": "M"}]})
    old_hello = old_hello[:2] + bytes([1]) + old_hello[3:]  # a protocol 1 frame
    received = raw_exchange(recorder.address, old_hello)
    # The refusal comes in version 1 frames, so that the old package can read it.
    assert received[:3] == b"HS\x01", received[:8]
    assert "upgrade the script's hookscope package" in json.loads(received[8:])["message"]
    script = run_script(recorder.address, "--steps", "2", "--workers", "0")
    assert script.returncode == 0, script.stderr
    code, err = recorder.wait()
    assert code == 0, err
    assert manifest(recorder.out)["steps"] == 2

    # This package against a viewer of protocol 1, which answers any newer frame with an error.
    path = os.path.join(tmp, "old.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    import threading

    def old_viewer():
        conn, _ = server.accept()
        conn.recv(1 << 16)
        payload = json.dumps({"type": "error", "message": "the peer speaks protocol version 2, HookScope 1: "
                              "use the hookscope Python package of the same release"}).encode()
        conn.sendall(struct.pack("<2sBBI", b"HS", 1, 1, len(payload)) + payload)
        conn.close()
    thread = threading.Thread(target=old_viewer)
    thread.start()
    model = nn.Linear(3, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hs = hookscope.attach(model, address="unix:" + path)
        loss = model(torch.randn(4, 3)).sum()
        loss.backward()
        hs.step(loss)  # training goes on, unhooked
    thread.join()
    server.close()
    assert not hs.connected
    texts = [str(w.message) for w in caught]
    assert any("HookScope speaks protocol version 1, this hookscope package 2: upgrade HookScope" in t
               for t in texts), texts


def squatter(folder, uid):
    """A listener at folder/hookscope.sock run as `uid` (a child process that drops to it), which
    records every byte a script sends it and answers with a welcome; (process, log path)."""
    log = os.path.join(folder, "received")
    code = ("import os, socket, sys\n"
            "uid = int(sys.argv[3])\n"
            "if uid != os.geteuid(): os.setgid(uid); os.setuid(uid)\n"
            "server = socket.socket(socket.AF_UNIX); server.bind(sys.argv[1]); server.listen(4)\n"
            "print('listening', flush=True)\n"
            "while True:\n"
            "    conn, _ = server.accept()\n"
            "    conn.settimeout(5)\n"
            "    try:\n"
            "        data = conn.recv(1 << 16)\n"
            "    except OSError:\n"
            "        data = b''\n"
            "    if data:\n"
            "        with open(sys.argv[2], 'ab') as f: f.write(data)\n"
            "    conn.close()\n")
    process = subprocess.Popen([sys.executable, "-c", code, os.path.join(folder, "hookscope.sock"), log, str(uid)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "listening"
    return process, log


def attach_warnings(address):
    model = nn.Linear(3, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hs = hookscope.attach(model, address=address)
    assert not hs.connected
    return " ".join(str(w.message) for w in caught)


def test_a_script_sends_nothing_to_a_socket_another_user_could_have_made(tmp):
    # A folder others may write in: anyone could have put the socket there.
    shared = os.path.join(tmp, "shared")
    os.mkdir(shared)
    os.chmod(shared, 0o777)
    process, log = squatter(shared, os.geteuid())
    try:
        said = attach_warnings("unix:" + os.path.join(shared, "hookscope.sock"))
        assert "can be written by others (mode 777)" in said and "nothing was sent" in said, said
        assert not os.path.exists(log), "bytes reached the listener"
    finally:
        process.kill()
        process.wait()
    if os.geteuid() != 0:
        return  # another user's folder and listener need root to make here
    nobody = 65534
    # Another user made the default folder first (with XDG_RUNTIME_DIR unset) and listens there.
    squatted = os.path.join(tmp, "hookscope-0")
    os.mkdir(squatted, 0o700)
    os.chmod(tmp, 0o755)
    os.chown(squatted, nobody, nobody)
    process, log = squatter(squatted, nobody)
    try:
        said = attach_warnings("unix:" + os.path.join(squatted, "hookscope.sock"))
        assert "belongs to" in said and "uid 65534" in said and "nothing was sent" in said, said
        # A sticky shared folder (as /tmp) is allowed, but not a peer of another user in it.
        sticky = os.path.join(tmp, "sticky")
        os.mkdir(sticky)
        os.chmod(sticky, 0o1777)
        other, other_log = squatter(sticky, nobody)
        try:
            said = attach_warnings("unix:" + os.path.join(sticky, "hookscope.sock"))
            assert "listened on by" in said and "uid 65534" in said, said
        finally:
            other.kill()
            other.wait()
        assert not os.path.exists(log) and not os.path.exists(other_log), "bytes reached another user's listener"
    finally:
        process.kill()
        process.wait()


def test_tcp_needs_the_token(tmp):
    recorder = Recorder(tmp, address="tcp://127.0.0.1:0")
    assert recorder.address.startswith("tcp://127.0.0.1:") and "?token=" in recorder.address
    wrong = recorder.address.split("?")[0] + "?token=wrong"
    model = nn.Linear(2, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hs = hookscope.attach(model, address=wrong)
    assert not hs.connected
    assert any("wrong or missing token" in str(w.message) for w in caught)
    script = run_script(recorder.address, "--steps", "2", "--workers", "0")
    assert script.returncode == 0, script.stderr
    code, err = recorder.wait()
    assert code == 0, err
    assert len(read_csv(recorder.out, "stats.csv")) > 0
    # The rate is of the steps since the first, not since the recorder began to wait: the first
    # step's line has none ("step 0 … 0.3 steps/s" counted the wait for the script).
    steps = [line for line in err.splitlines() if line.startswith("step ")]
    assert steps[0].startswith("step 0 ") and "steps/s" not in steps[0], err
    assert steps[1].startswith("step 1 ") and steps[1].endswith(" steps/s"), err


def read_message(sock, reader=None):
    """The next JSON message from `sock` (None when it closed first)."""
    reader = reader or _wire.FrameReader()
    while True:
        messages = reader.messages()
        if messages:
            return messages[0]
        data = sock.recv(65536)
        if not data:
            return None
        reader.feed(data)


def test_a_slow_peer_and_a_thousand_idle_ones_do_not_keep_a_script_out(tmp):
    """One peer that sends a byte a second, then 1,000 that send nothing, all before the script:
    the recorder read one hello at a time, each with 10 s to come, so the script was refused
    ("did not accept this script (timed out)") and trained unhooked. Each hello is now read on
    its own, and the connections waiting are capped, the oldest closed first."""
    import resource
    import threading
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200 <= hard or hard == resource.RLIM_INFINITY:
        resource.setrlimit(resource.RLIMIT_NOFILE, (4096 if hard == resource.RLIM_INFINITY else min(hard, 4096), hard))
    recorder = Recorder(tmp, address="tcp://127.0.0.1:0")
    host, port = recorder.address[len("tcp://"):].split("?")[0].rsplit(":", 1)
    stop = threading.Event()

    def slow():
        with socket.create_connection((host, int(port))) as peer:
            for byte in b"HS\x02\x01" + (4000).to_bytes(4, "little") + b"{" * 4000:
                if stop.wait(1.0):
                    return
                try:
                    peer.sendall(bytes([byte]))
                except OSError:
                    return
    slow_peer = threading.Thread(target=slow, daemon=True)
    slow_peer.start()
    idle = []
    try:
        for _ in range(1000):
            idle.append(socket.create_connection((host, int(port)), timeout=DEADLINE))
        script = run_script(recorder.address, "--steps", "2", "--workers", "0")
        assert script.returncode == 0, script.stderr
        assert "did not accept" not in script.stderr and "refused" not in script.stderr, script.stderr
        code, err = recorder.wait()
        assert code == 0, err
        assert {int(r["step"]) for r in read_csv(recorder.out, "stats.csv")} == {0, 1}, err
    finally:
        stop.set()
        for peer in idle:
            peer.close()
        recorder.kill()


def test_a_peer_that_has_not_proved_the_token_is_not_read_past_a_few_kib(tmp):
    """Five unauthenticated 16 MiB hellos were read whole before the token was checked (580 MiB
    of recorder). Now a peer proves the token first, in a message of a few hundred bytes; a
    header that claims more is refused at once, its body never waited for."""
    recorder = Recorder(tmp, address="tcp://127.0.0.1:0")
    host, port = recorder.address[len("tcp://"):].split("?")[0].rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=DEADLINE) as peer:
            challenge = read_message(peer)
            assert challenge["type"] == "challenge" and len(challenge["nonce"]) >= 16, challenge
            peer.sendall(b"HS\x02\x01" + (16 << 20).to_bytes(4, "little") + b'{"type": "hello", ')
            refusal = read_message(peer)
            assert refusal is not None and refusal["type"] == "error", refusal
            assert "message of 16777216 bytes before proving the token" in refusal["message"], refusal
            assert peer.recv(1) == b""  # and closed
        # An old script's hello, sent without the handshake, is told to upgrade.
        with socket.create_connection((host, int(port)), timeout=DEADLINE) as peer:
            read_message(peer)
            peer.sendall(_wire.json_frame({"type": "hello", "protocol": _wire.PROTOCOL_VERSION}))
            refusal = read_message(peer)
            assert "without answering the token challenge" in refusal["message"], refusal
    finally:
        recorder.kill()


def test_the_token_never_goes_on_the_wire_and_a_listener_without_it_is_not_obeyed(tmp):
    """A listener at the address that does not know the token (another user's, on a port the
    user's recorder once had): the script answers its challenge, finds no proof, and sends it
    nothing else: no hello, no module tree, no token."""
    import threading
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    received = bytearray()

    def impostor():
        conn, _ = server.accept()
        with conn:
            conn.sendall(_wire.json_frame({"type": "challenge", "nonce": "0" * 32}))
            reader = _wire.FrameReader()
            answer = read_message(conn, reader)
            received.extend(json.dumps(answer).encode())
            conn.sendall(_wire.json_frame({"type": "proof", "mac": "f" * 64}))
            conn.settimeout(300)
            while True:
                data = conn.recv(65536)
                if not data:
                    return
                received.extend(data)
    thread = threading.Thread(target=impostor, daemon=True)
    thread.start()
    token = "a-secret-token-0123456789"
    address = "tcp://127.0.0.1:%d?token=%s" % (server.getsockname()[1], token)
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hs = hookscope.attach(model, address=address)
    thread.join(300)
    server.close()
    assert not hs.connected
    assert any("did not prove it knows the token" in str(w.message) for w in caught), [str(w.message) for w in caught]
    assert token.encode() not in received and b"hello" not in received and b"Linear" not in received, bytes(received)
    assert b'"answer"' in received
    model(torch.randn(1, 2)).sum().backward()  # training goes on, unhooked


def test_copies_and_forks_of_an_attached_model_stay_harmless(tmp):
    recorder = Recorder(tmp)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    hs = hookscope.attach(model, address=recorder.address)
    assert hs.connected
    twin = copy.deepcopy(model)  # an EMA copy, say: its hooks do nothing
    twin(torch.randn(2, 4)).sum().backward()
    pid = os.fork()
    if pid == 0:  # a forked worker running the model sends nothing
        model(torch.randn(2, 4))
        os._exit(0 if not hs.connected else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    for _ in range(2):
        loss = model(torch.randn(3, 4)).sum()
        loss.backward()
        hs.step(loss)
    assert hs.connected
    hs.close()
    code, err = recorder.wait()
    assert code == 0, err
    rows = read_csv(recorder.out, "stats.csv")
    # Two steps of the model's own batches of 3, never the twin's or the child's batches of 2.
    assert {int(r["step"]) for r in rows} == {0, 1}
    assert all(r["shape"].startswith("3") for r in rows if r["kind"] == "activation")


def test_half_precision_captures_say_their_dtype_and_match_pytorch(tmp):
    recorder = Recorder(tmp, "--hook", "*")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh()).to(torch.bfloat16)
    hs = hookscope.attach(model, address=recorder.address)
    x = torch.randn(4, 8, dtype=torch.bfloat16)
    out = model(x)
    out.float().sum().backward()
    hs.step()
    hs.close()
    code, err = recorder.wait()
    assert code == 0, err
    rows = {(r["module"], r["kind"]): r for r in read_csv(recorder.out, "stats.csv")}
    act = rows[("1", "activation")]
    assert act["dtype"] == "bfloat16" and act["shape"] == "4x8"
    exact = out.detach().double()
    assert float(act["l2norm"]) == pytest.approx(exact.norm().item(), rel=1e-6)
    assert float(act["max"]) == exact.max().item() and float(act["min"]) == exact.min().item()
    assert rows[("0", "gradient")]["dtype"] == "bfloat16"


class SparseOut(nn.Module):
    def forward(self, x):
        return x.to_sparse()


def test_a_capture_without_statistics_is_a_gap_that_names_its_series(tmp):
    recorder = Recorder(tmp, "--hook", "*", "--kinds", "activation")
    model = nn.Sequential(nn.Linear(4, 3), SparseOut())  # a sparse output has no statistics
    hs = hookscope.attach(model, address=recorder.address)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            out = model(torch.randn(4, 4))
            hs.step(out.to_dense().sum())
    assert hs.connected  # a dropped capture never detaches or raises
    assert sum("dropped" in str(w.message) for w in caught) == 1
    hs.close()
    code, err = recorder.wait()
    assert code == 0, err
    assert "dropped by the script" in err
    # Each step's line says why, as the script did (it blamed the viewer for every gap).
    assert "(2 dropped: a torch.sparse_coo tensor has no statistics" in err, err
    m = manifest(recorder.out)
    assert [g["step"] for g in m["gaps"]] == [0, 1]
    for gap in m["gaps"]:  # the sparse layer's output, which is also the root's
        assert gap["captures"] == 2
        assert sorted((s["series"], s["kind"], s["call"], s["index"]) for s in gap["series"]) == \
            [("", "activation", 0, 0), ("1", "activation", 0, 0)]
        assert all("sparse" in s["reason"] for s in gap["series"]), gap
    # The other layer's captures are all there.
    assert {r["module"] for r in read_csv(recorder.out, "stats.csv")} == {"0"}
    dropped = [r for r in read_csv(recorder.out, "scalars.csv") if r["name"] == "dropped_captures"]
    assert len(dropped) == 2
    shown = subprocess.run([CLI, "show", recorder.out], capture_output=True, text=True, timeout=DEADLINE)
    assert shown.returncode == 0, shown.stderr
    assert "4 captures dropped by the script in 2 steps" in shown.stdout, shown.stdout
    assert "1 activation call 0 index 0: a torch.sparse_coo tensor" in shown.stdout, shown.stdout


class _HookOwner:
    """What ModelHooks needs of an attached script: its captures kept as (module, gradient)."""
    connected, suspended = True, False

    def __init__(self):
        self.lock = threading.Lock()
        self.gradients = []

    def capture(self, series, call, kind, index, tensor):
        self.gradients.append((series, tensor.clone()))

    def fail(self, exc):
        raise exc


class _Doubled(nn.Module):
    def forward(self, x):
        return x.mul_(2)  # the same tensor object, changed in place (a Linear's output: not saved)


@pytest.mark.parametrize("in_place", [False, True])
def test_modules_that_return_one_tensor_share_its_gradient_hook_and_see_what_separate_hooks_see(in_place):
    """A container's output is its last child's: HookScope registers one gradient hook on it for
    both (torch's handle, dict and weak reference once, not per module), and the gradients each
    module is shown, and the ones its gradient ops pass on, are what PyTorch's own separate hooks
    give. A module that changed the tensor in place before returning it gets its own hook."""
    from hookscope._control import BIT
    from hookscope._hooks import ModelHooks
    torch.manual_seed(0)
    old_torch = int(torch.__version__.split(".")[0]) < 2
    model = nn.Sequential(nn.Linear(6, 5), _Doubled() if in_place else nn.Tanh())
    reference = copy.deepcopy(model)
    x = torch.randn(4, 6)
    names = [name for name, _ in model.named_modules()]  # "", "0", "1"
    ops = {2: ("clamp", 1e-3), 0: ("scale", 3.0)}
    expected = []

    def hook_gradient(index):  # PyTorch's own: one tensor hook a module, as HookScope's forward hooks run
        def forward_hook(module, inputs, output):
            def on_gradient(grad):
                expected.append((index, grad.clone()))
                kind, value = ops.get(index, (None, None))
                return grad.clamp(-value, value) if kind == "clamp" else grad * value if kind == "scale" else None
            if old_torch and output._backward_hooks is not None and getattr(output, "_fn", None) is not output.grad_fn:
                # PyTorch 1.x would add this hook to the tensor's grad_fn before the in-place op;
                # 2.x hooks the current one, as HookScope does on both (_hooks)
                output._backward_hooks = None
            output.register_hook(on_gradient)
            output._fn = output.grad_fn
        return forward_hook

    hooked = [0, 1, 2] if in_place else [0, 2]  # the Linear's output is the one changed in place
    reference_modules = list(reference.modules())
    for i in hooked:
        reference_modules[i].register_forward_hook(hook_gradient(i))
    reference(x).square().sum().backward()

    owner = _HookOwner()
    hooks = ModelHooks(owner, list(model.named_modules()), None, keep_graph=False)
    hooks.apply([BIT["gradient"] if i in hooked else 0 for i in range(len(names))], ops, {})
    out = model(x)
    assert len(out._backward_hooks) == 1  # one hook for the last module and the Sequential
    out.square().sum().backward()
    assert sorted(i for i, _ in owner.gradients) == sorted(i for i, _ in expected) == sorted(hooked)
    for (i, got), (j, want) in zip(sorted(owner.gradients, key=lambda p: p[0]), sorted(expected, key=lambda p: p[0])):
        assert i == j and torch.equal(got, want), names[i]
    assert torch.equal(model[0].weight.grad, reference[0].weight.grad)


def test_a_tensor_captured_twice_in_a_step_is_read_once_and_the_export_counts_it(tmp):
    """A container's output is its last child's output object (and its gradient the same
    gradient): HookScope reads it once a step, the second row is the first's, and the export's
    scalars say how many captures shared a read (reads_shared)."""
    recorder = Recorder(tmp, "--hook", "*", "--kinds", "activation,gradient")
    model = nn.Sequential(nn.Linear(6, 5), nn.Tanh())
    hs = hookscope.attach(model, address=recorder.address)
    for _ in range(3):
        loss = model(torch.randn(4, 6)).square().sum()
        loss.backward()
        hs.step(loss)
    hs.close()
    code, err = recorder.wait()
    assert code == 0, err
    rows = read_csv(recorder.out, "stats.csv")
    fields = [k for k in rows[0] if k not in ("module", "step")]
    for step in ("0", "1", "2"):
        for kind in ("activation", "gradient"):
            root = [r for r in rows if r["step"] == step and r["module"] == "" and r["kind"] == kind]
            tanh = [r for r in rows if r["step"] == step and r["module"] == "1" and r["kind"] == kind]
            assert len(root) == len(tanh) == 1, (step, kind)
            assert [root[0][k] for k in fields] == [tanh[0][k] for k in fields], (step, kind)
    shared = [r for r in read_csv(recorder.out, "scalars.csv") if r["name"] == "reads_shared"]
    assert [float(r["value"]) for r in shared] == [2.0, 2.0, 2.0], shared


def test_the_device_path_gives_the_same_statistics(tmp):
    """GPU tensors' rows are written into a device buffer and read back once at the step's end;
    this machine has no GPU, so CPU tensors are sent down that path (torch ops into the row
    buffer) and compared with the direct one (HookScope's kernel, or torch ops without it)."""
    results = []
    for defer in (False, True):
        folder = os.path.join(tmp, "defer" if defer else "direct")
        os.makedirs(folder)
        recorder = Recorder(folder, "--hook", "*", "--kinds", "activation,gradient,param,param_grad,update")
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(6, 5), nn.ReLU(inplace=True), nn.Linear(5, 2))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        hs = hookscope.attach(model, optimizer, address=recorder.address)
        hs._defer_all = defer
        for _ in range(3):
            loss = model(torch.randn(4, 6)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            hs.step(loss)
        hs.close()
        code, err = recorder.wait()
        assert code == 0, err
        rows = read_csv(recorder.out, "stats.csv")
        results.append({(r["step"], r["module"], r["call"], r["kind"], r["index"]): r for r in rows})
    direct, deferred = results
    assert direct.keys() == deferred.keys() and any(k[3] == "update" for k in direct)
    for key, row in direct.items():
        for stat in ("min", "max", "zero_frac"):
            assert float(row[stat]) == float(deferred[key][stat]), (key, stat)
        for stat in ("mean", "std", "l2norm"):
            assert close_enough(float(row[stat]), float(deferred[key][stat]), rel=1e-9,
                                scale=float(row["l2norm"])), (key, stat)


@pytest.mark.skipif(not hasattr(torch, "compile") or sys.platform != "linux", reason="torch.compile needs PyTorch 2")
def test_a_compiled_model_attached_gives_eagers_statistics(tmp):
    """torch.compile (CPU inductor): the hooks on the compiled model's modules fire, and what
    they report equals what PyTorch's hooks see on the same model run eagerly."""
    recorder = Recorder(tmp, "--hook", "*", "--kinds", "activation,gradient")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = torch.randn(5, 8)
    reference = []
    handles = [m.register_forward_hook(lambda m, i, o, name=name: reference.append((name, o.detach().clone())))
               for name, m in model.named_modules()]
    model(x)
    for h in handles:
        h.remove()
    compiled = torch.compile(model)
    hs = hookscope.attach(model, address=recorder.address)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Dynamo's notes on the graph breaks at the hooks
        out = compiled(x)
        out.sum().backward()
    hs.step(out.sum())
    assert hs.connected
    hs.close()
    code, err = recorder.wait()
    assert code == 0, err
    rows = {(r["module"], r["kind"]): r for r in read_csv(recorder.out, "stats.csv")}
    assert {(name, "activation") for name, _ in reference} <= rows.keys()
    assert {(name, "gradient") for name in ("", "0", "1", "2")} <= rows.keys()
    for name, value in reference:
        row = rows[(name, "activation")]
        v = value.double()
        for stat, expected in (("min", v.min()), ("max", v.max()), ("mean", v.mean()), ("std", v.std()),
                               ("l2norm", v.norm())):
            assert close_enough(float(row[stat]), expected.item(), scale=v.norm().item() / v.numel() ** 0.5), \
                (name, stat, row[stat], expected.item())


def welcome_hooking_all(server):
    """A viewer's side: accepts one script on `server` and welcomes it with every module hooked
    for activations; (the connection, its frame reader)."""
    conn, _ = server.accept()
    reader = _wire.FrameReader()
    hello = []
    while not hello:
        reader.feed(conn.recv(1 << 16))
        hello = reader.messages()
    hooks = {m["path"]: ["activation"] for m in hello[0]["modules"]}
    conn.sendall(_wire.json_frame({"type": "welcome", "hooks": hooks, "bins": 64}))
    return conn, reader


def test_a_viewer_that_stops_reading_costs_named_gaps_and_never_blocks_training(tmp):
    """Statistics wait in a bounded outbox: once 16 MiB of them are unsent, a step's captures are
    dropped as a gap (one warning that says why) instead of growing memory, and no step waits."""
    import threading
    path = os.path.join(tmp, "stuck.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    release = threading.Event()

    def stuck_viewer():
        conn, _ = welcome_hooking_all(server)
        release.wait(120)  # reads nothing more
        conn.close()
    thread = threading.Thread(target=stuck_viewer)
    thread.start()
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(400)])  # about 240 KiB of statistics a step
    x = torch.randn(2, 4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hs = hookscope.attach(model, address="unix:" + path)
        assert hs.connected
        # The viewer never reads again: a step that waited for it would never return.
        for _ in range(120):
            hs.step(model(x).sum())
            if any("behind" in str(w.message) for w in caught):
                break
        hs.close()  # waits 5 s of nothing read, then closes and says what was left unsent
    release.set()
    thread.join()
    server.close()
    behind = [str(w.message) for w in caught if "recorded as a gap" in str(w.message)]
    assert len(behind) == 1, [str(w.message) for w in caught]
    assert "MiB behind" in behind[0] and "recorded as a gap" in behind[0]
    unsent = [str(w.message) for w in caught if "had not read" in str(w.message)]
    assert len(unsent) == 1 and "its last steps are not in the recording" in unsent[0], unsent


def slow_viewer(server, per_read, pause, received):
    """Accepts one script, hooks every module, then reads `per_read` bytes every `pause` seconds,
    appending each message to `received`, until the script's goodbye or its socket's end."""
    conn, reader = welcome_hooking_all(server)
    while not received or received[-1].get("type") != "bye":
        time.sleep(pause)
        data = conn.recv(per_read)
        if not data:
            break
        reader.feed(data)
        received.extend(m for m in reader.messages() if isinstance(m, dict))
    conn.close()


def test_a_viewer_still_reading_at_close_gets_every_step_and_the_goodbye(tmp):
    """close() waited 5 s for the outbox, then closed with what the viewer had not read yet: a
    recorder behind a 2,000-step run lost its last 783 steps and said the script left without
    closing. Now close waits while the viewer goes on reading (a viewer reading nothing for 5 s
    still does not hold the script), and a script that closes with statistics unsent says so."""
    import threading
    path = os.path.join(tmp, "slow.sock")
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    received = []
    per_second = 512 << 10  # 128 KiB every 0.25 s
    thread = threading.Thread(target=slow_viewer, args=(server, per_second // 4, 0.25, received), daemon=True)
    thread.start()
    model = nn.Sequential(*[nn.Linear(4, 4) for _ in range(400)])
    x = torch.randn(2, 4)
    steps = 0
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            hs = hookscope.attach(model, address="unix:" + path)
            assert hs.connected
            # Until more than 8 s of the viewer's reading is queued (under the 16 MiB that drops).
            while hs._conn.unsent < 8 * per_second:
                hs.step(model(x).sum())
                steps += 1
            hs.close()
        thread.join(DEADLINE)
    finally:
        server.close()
    assert not [str(w.message) for w in caught if "behind" in str(w.message) or "not read" in str(w.message)]
    assert received[-1] == {"type": "bye", "steps": steps}, received[-1]
    assert len([m for m in received if m.get("type") == "step"]) == steps


def test_steps_of_more_statistics_than_the_socket_takes_at_once_all_arrive(tmp):
    """About 1.5 MiB of statistics a step, several times what a socket's buffer takes at once: a
    sender thread writes them while training goes on (only what the buffer took went at each
    step's end before, and the rest piled up until captures were dropped as "behind")."""
    recorder = Recorder(tmp, "--hook", "*", "--kinds", "activation,gradient")
    model = nn.Sequential(*[nn.Sequential(nn.Linear(32, 32), nn.ReLU()) for _ in range(400)])
    steps = 20  # 30 MiB in all: what piled up before passed the 16 MiB that drops a step by the 11th
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        hs = hookscope.attach(model, address=recorder.address)
        for _ in range(steps):
            loss = model(torch.randn(16, 32)).pow(2).mean()
            loss.backward()
            hs.step(loss)
            assert hs.connected
        hs.close()
    assert not [str(w.message) for w in caught if "dropped" in str(w.message)]
    code, err = recorder.wait()
    assert code == 0, err
    assert "dropped" not in err, err[-2000:]
    assert len(read_csv(recorder.out, "stats.csv")) == steps * 2 * 1201  # 1,201 modules


def test_binary_rows_record_exactly_what_json_records(tmp):
    """Statistics as binary rows (the default where the viewer offers them) and as JSON
    (HOOKSCOPE_STATS_WIRE=json, what an older viewer reads) give the same export, to the bit."""
    exports = []
    for wire in ("binary", "json"):
        folder = os.path.join(tmp, wire)
        os.mkdir(folder)
        recorder = Recorder(folder, "--hook", "*")
        env = dict(os.environ, HOOKSCOPE_ADDRESS=recorder.address, HOOKSCOPE_STATS_WIRE=wire)
        job = subprocess.run([sys.executable, SCRIPT, "--steps", "3", "--workers", "0"], env=env,
                             capture_output=True, text=True, timeout=DEADLINE)
        assert job.returncode == 0, job.stderr
        code, err = recorder.wait()
        assert code == 0, err
        exports.append(recorder.out)
    binary, text = (read_csv(folder, "stats.csv") for folder in exports)
    assert len(binary) > 50 and binary == text
    import torch
    a, b = (torch.load(os.path.join(folder, "histograms.pt")) for folder in exports)
    assert a.keys() == b.keys() and all(torch.equal(a[k]["counts"], b[k]["counts"]) for k in a)
