"""What the engine's and the checkpoints' tests share: hookscope-cli run to its end, and a
pickle that opens a file when it is loaded."""
import os
import subprocess
import sys

from deadlines import LONG_DEADLINE

CLI = os.environ.get("HOOKSCOPE_CLI", "build/cli/hookscope-cli")


def cli(*args, env=None):
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=LONG_DEADLINE,
                          env=dict(os.environ, **(env or {})))


def write_opening_pickle(victim, path, extra=""):
    """torch.save of a dict whose value opens `victim` for writing when it is unpickled."""
    code = ("import torch\nclass Evil:\n    def __reduce__(self):\n        return (open, (%r, 'w'))\n"
            "torch.save({%s'x': Evil()}, %r)\n" % (victim, extra, path))
    subprocess.run([sys.executable, "-c", code], check=True)
