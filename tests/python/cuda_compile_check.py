#!/usr/bin/env python3
"""Compiles HookScope's CUDA statistics kernels (python/hookscope/stats_kernels.cu) with NVRTC, as
the package does at first use on a GPU, for NVIDIA architectures with no GPU present, and prints
per kernel and architecture what the machine code uses: registers, stack and local memory,
local loads and stores (spills), 128-bit global loads, flush-to-zero instructions (none:
subnormals are values). One JSON object a line; the compile time on stderr.

    PYTHON cuda_compile_check.py [CAPABILITY ...]     (default: 75, 80, 90 and the newest this NVRTC knows)

Needs libnvrtc (setup.sh installs nvidia-cuda-nvrtc-cu12 into the venv) and cuobjdump:
HOOKSCOPE_CUOBJDUMP, else a CUDA toolkit's (on PATH or /usr/local/cuda: it reads what that
toolkit's NVRTC writes; Triton's older one may not), else Triton's wheel's.
"""
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from hookscope import _cuda_stats  # noqa: E402


def nvidia_tool(name, variable):
    """A CUDA binary tool (cuobjdump, nvdisasm), or None: the environment's `variable`, else a CUDA
    toolkit's (on PATH or /usr/local/cuda), else Triton's wheel's (found without importing Triton)."""
    named = os.environ.get(variable)
    if named:
        return named
    for tool in (shutil.which(name), "/usr/local/cuda/bin/" + name):
        if tool and os.path.exists(tool):
            return tool
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.submodule_search_locations:
        return None
    tool = os.path.join(list(spec.submodule_search_locations)[0], "backends", "nvidia", "bin", name)
    return tool if os.path.exists(tool) else None


def cuobjdump():
    """The cuobjdump to read the cubins with, or None."""
    return nvidia_tool("cuobjdump", "HOOKSCOPE_CUOBJDUMP")


def run_tool(tool, *args):
    """The tool's output; a failure says which tool and what it printed."""
    done = subprocess.run([tool, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit("%s %s failed (exit %d): %s" % (tool, " ".join(args), done.returncode,
                                                         (done.stderr or done.stdout).strip()))
    return done.stdout


def functions(sass):
    """{kernel name: its SASS text}."""
    out, name = {}, None
    for line in sass.splitlines():
        found = re.match(r"\s*Function : (\S+)", line)
        if found:
            name = found.group(1)
            out[name] = []
        elif name:
            out[name].append(line)
    return {k: "\n".join(v) for k, v in out.items()}


def check(capability, nvrtc, tool):
    started = time.monotonic()
    cubin = nvrtc.compile(open(_cuda_stats.SOURCE, encoding="utf-8").read(), capability)
    print("sm_%d: compiled in %.1f s" % (capability, time.monotonic() - started), file=sys.stderr)
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        usage = run_tool(tool, "-res-usage", f.name)
        sass = functions(run_tool(tool, "-sass", f.name))
    rows = []
    for name, line in re.findall(r"Function (\S+):\s*\n\s*(REG:.*)", usage):
        resources = {k.lower(): int(v) for k, v in re.findall(r"(\w+):(\d+)", line)}
        code = sass.get(name, "")
        rows.append({"capability": capability, "kernel": name, "reg": resources.get("reg"),
                     "stack": resources.get("stack"), "local": resources.get("local"),
                     "spill_instructions": len(re.findall(r"\b(LDL|STL)\b", code)),
                     "loads_128": len(re.findall(r"\bLDG\.E\.128\b|\bLDG\.E\.128\.", code)),
                     # Float to integer conversions (a bin position, truncated) may carry FTZ: a
                     # subnormal truncates to 0 either way. Any other would flush a value.
                     "ftz": len([ln for ln in code.splitlines() if ".FTZ" in ln and "F2I" not in ln])})
    return rows


def main():
    nvrtc = _cuda_stats.Nvrtc()
    known = nvrtc.architectures()
    capabilities = [int(c) for c in sys.argv[1:]] or sorted({75, 80, 90, max(known)})
    tool = cuobjdump()
    for capability in capabilities:
        for row in check(capability, nvrtc, tool):
            print(json.dumps(row))


if __name__ == "__main__":
    main()
