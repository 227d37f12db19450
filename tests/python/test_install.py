"""`pip install ./python` as a training machine does it: the package with its subpackages, and
HookScope's CPU statistics kernel compiled by pip with the machine's C++ compiler and found by the
package (no build/ folder, no HOOKSCOPE_STATS_LIBRARY); without a compiler the package still
installs and says, when it attaches, what computing with torch ops costs.
"""
import os
import subprocess
import sys
import tempfile

import pytest

from deadlines import DEADLINE, LONG_DEADLINE

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.join(HERE, "..", "..", "python")
pytest.importorskip("setuptools")

PROBE = """
import warnings, torch, hookscope
from hookscope import _stats
warnings.simplefilter("always")
lib = _stats.native_library()
print("library", lib._name if lib is not None else None)
print("backend", _stats.StepStatistics().backend)
step = _stats.StepStatistics()
step.add('"module":0', torch.ones(3))  # a CPU capture: what computes CPU statistics is said then
print("fallback", step.slower_fallback())
from hookscope import _cuda_stats
import os
print("cuda_source", os.path.isfile(_cuda_stats.SOURCE))
print("statistics", hookscope.tensor_statistics(torch.arange(10.0))["backend"])
import hookscope.engine, hookscope.integrations
"""


def install(target, **env):
    env = dict(os.environ, **env)
    env.pop("HOOKSCOPE_STATS_LIBRARY", None)
    done = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "--no-build-isolation", "--no-deps", "--no-cache-dir", "--target", target, PACKAGE],
                          env=env, capture_output=True, text=True, timeout=LONG_DEADLINE)
    assert done.returncode == 0, done.stderr
    env["PYTHONPATH"] = target
    probe = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=DEADLINE,
                           cwd=target)
    assert probe.returncode == 0, probe.stderr
    return dict(line.split(" ", 1) for line in probe.stdout.splitlines())


@pytest.fixture
def target():
    with tempfile.TemporaryDirectory(prefix="hs-pip-") as folder:
        yield os.path.join(folder, "site")
    for leftover in ("build", "hookscope.egg-info"):  # what setuptools leaves in the source folder
        subprocess.run(["rm", "-rf", os.path.join(PACKAGE, leftover)])


def test_pip_builds_the_cpu_kernel_and_the_package_uses_it(target):
    seen = install(target)
    assert seen["library"].startswith(os.path.join(target, "hookscope", "_hookscope_stats")), seen
    assert seen["backend"] == "cpu: native" and seen["statistics"] == "native", seen
    assert seen["fallback"] == "None", seen
    assert seen["cuda_source"] == "True", seen  # the CUDA kernels' source, for NVRTC on a GPU


def test_without_a_compiler_the_package_installs_and_says_what_torch_ops_cost(target):
    seen = install(target, CC="/bin/false", CXX="/bin/false")
    assert seen["library"] == "None" and seen["backend"] == "cpu: torch" and seen["statistics"] == "torch", seen
    assert "C++ kernel was not found" in seen["fallback"] and "about 3x" in seen["fallback"], seen
