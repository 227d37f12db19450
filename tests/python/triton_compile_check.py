#!/usr/bin/env python3
"""Compiles HookScope's Triton statistics kernels for NVIDIA GPUs with no GPU present and prints,
per kernel, dtype and target, what the machine code uses: registers, local memory (spills),
flush-to-zero instructions (none: subnormals are values), and whether the histogram's scale is
divided exactly (div.rn.f64). One JSON object a line.

    PYTHON triton_compile_check.py [CAPABILITY ...]     (default: 80 90, an A100 and an H100)

Run without TRITON_INTERPRET (the interpreter replaces the kernels with Python functions).
"""
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from hookscope import _triton_stats as kernels  # noqa: E402

POINTERS = (("*bf16", tl.float32, False), ("*fp16", tl.float32, False), ("*fp32", tl.float32, False),
            ("*fp64", tl.float64, True), ("*i64", tl.float64, True), ("*u8", tl.float64, True))
PMAX = 1024


def resources(compiled):
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        out = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    line = next(line for line in out.splitlines() if "REG:" in line)
    return {key.lower(): int(value) for key, value in (item.split(":") for item in line.split()) if value.isdigit()}


def compile_one(fn, signature, constexprs, capability):
    return triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", capability, 32),
                          options={"num_warps": kernels.WARPS})


def main():
    capabilities = [int(c) for c in sys.argv[1:]] or [80, 90]
    for capability in capabilities:
        for pointer, work, wide in POINTERS:
            first = compile_one(
                kernels.stats_pass1,
                {"x_ptr": pointer, "n": "i64", "row_ptr": "*fp64", "part_ptr": "*fp64", "count_ptr": "*i64",
                 "WORK": "constexpr", "BLOCK": "constexpr", "PMAX": "constexpr"},
                {"WORK": work, "BLOCK": kernels.BLOCK, "PMAX": PMAX}, capability)
            second = compile_one(
                kernels.stats_pass2,
                {"x_ptr": pointer, "n": "i64", "bins": "i32", "row_ptr": "*fp64", "part_ptr": "*fp64",
                 "hist_ptr": "*i64", "count_ptr": "*i64", "WORK": "constexpr", "WIDE": "constexpr",
                 "BLOCK": "constexpr", "PMAX": "constexpr", "NUM_BINS": "constexpr"},
                {"WORK": work, "WIDE": wide, "BLOCK": kernels.BLOCK, "PMAX": PMAX, "NUM_BINS": 64}, capability)
            for name, compiled in (("pass1", first), ("pass2", second)):
                row = {"kernel": name, "values": pointer[1:], "sm": capability, "warps": kernels.WARPS,
                       "block": kernels.BLOCK, **resources(compiled)}
                # Flush-to-zero would count float32 subnormals as zeros and compare them as zero.
                row["ftz"] = len(re.findall(r"\.ftz\b", compiled.asm["ptx"]))
                if name == "pass2":
                    row["exact_scale_division"] = "div.rn.f64" in compiled.asm["ptx"]
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
