"""The window on a stop signal, as at a logout: every HookScope window gets SIGTERM in the same
second, and each saves what it captured into a folder of its own and exits, asking nothing.

Runs real windows on an X display (ctest runs it under xvfb-run), each attached to a training
script of its own. HOOKSCOPE_GUI names the window's program."""
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest
from deadlines import DEADLINE

GUI = os.environ.get("HOOKSCOPE_GUI")
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "attach", "train_script.py")

pytestmark = pytest.mark.skipif(not GUI or not os.environ.get("DISPLAY"),
                                reason="needs HOOKSCOPE_GUI and an X display (ctest runs it under xvfb-run)")


def wait_for(condition, seconds, what):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def sent(progress):
    """Steps a script has sent while connected, from its --progress file (0 before it has one)."""
    try:
        steps, connected = open(progress).read().split()
    except (OSError, ValueError):
        return 0
    assert connected == "1", "the script lost its window"
    return int(steps)


def test_windows_signalled_in_the_same_second_each_save_their_captures_and_exit(tmp_path):
    env = dict(os.environ)
    env.update(HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"),
               XDG_CONFIG_HOME=str(tmp_path / "config"), TMPDIR=str(tmp_path))
    env.pop("QT_QPA_PLATFORM", None)  # the display's own platform
    os.makedirs(env["HOME"])
    windows, scripts = [], []
    try:
        for i in range(2):
            address = "unix:%s/w%d.sock" % (tmp_path, i)
            windows.append(subprocess.Popen([GUI, "--attach", "--address", address], env=env,
                                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
            wait_for(lambda: os.path.exists(address[5:]), DEADLINE, "window %d to listen" % i)
            script_env = dict(env, HOOKSCOPE_ADDRESS=address)
            scripts.append(subprocess.Popen([sys.executable, SCRIPT, "--steps", "100000", "--workers", "0",
                                             "--sleep", "0.02", "--progress", str(tmp_path / ("steps%d" % i))],
                                            env=script_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # Steps come in to both: each script connected and has sent 30 (a busy machine may take
        # a minute to start them; the window reads each as it comes).
        for i in range(2):
            wait_for(lambda: sent(tmp_path / ("steps%d" % i)) >= 30, DEADLINE, "script %d to send 30 steps" % i)
        for window in windows:
            window.send_signal(signal.SIGTERM)
        outcomes = [window.communicate(timeout=DEADLINE) for window in windows]
        for window, (_, err) in zip(windows, outcomes):
            assert window.returncode == 0, err
            assert "the captures are saved in" in err, err
        saved = sorted(glob.glob(str(tmp_path / "data" / "HookScope" / "recovered" / "*")))
        assert len(saved) == 2, (saved, [err for _, err in outcomes])
        for folder in saved:
            with open(os.path.join(folder, "manifest.json")) as f:
                manifest = json.load(f)
            assert manifest["steps"] > 0 and manifest["interrupted"] == "SIGTERM", manifest
        # A script whose window ended trains on without HookScope.
        for script in scripts:
            assert script.poll() is None
    finally:
        for process in windows + scripts:
            if process.poll() is None:
                process.kill()
                process.wait()
