#!/usr/bin/env python3
"""Compiles HookScope's CUDA statistics kernels (python/hookscope/stats_kernels.cu) with NVRTC, as
the package does at first use on a GPU, for NVIDIA architectures with no GPU present, and prints
per kernel and architecture what the machine code uses: registers, stack and local memory,
local loads and stores (spills), 128-bit global loads, flush-to-zero instructions (none:
subnormals are values). One JSON object a line; the compile time on stderr.

    PYTHON cuda_compile_check.py [CAPABILITY ...]     (default: 80, 90 and the newest this NVRTC knows)

Needs libnvrtc (setup.sh installs nvidia-cuda-nvrtc-cu12 into the venv) and cuobjdump (in
Triton's wheel, or HOOKSCOPE_CUOBJDUMP).
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from hookscope import _cuda_stats  # noqa: E402


def cuobjdump():
    named = os.environ.get("HOOKSCOPE_CUOBJDUMP")
    if named:
        return named
    import importlib.util
    spec = importlib.util.find_spec("triton")
    return os.path.join(list(spec.submodule_search_locations)[0], "backends", "nvidia", "bin", "cuobjdump")


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
        usage = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
        sass = functions(subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, check=True).stdout)
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
    capabilities = [int(c) for c in sys.argv[1:]] or sorted({80, 90, max(known)})
    tool = cuobjdump()
    for capability in capabilities:
        for row in check(capability, nvrtc, tool):
            print(json.dumps(row))


if __name__ == "__main__":
    main()
