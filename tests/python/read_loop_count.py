#!/usr/bin/env python3
"""Counts the machine instructions HookScope's CUDA read kernels issue per value on their common
path, with no GPU: stats_kernels.cu compiled by NVRTC for sm_90 with the package's options (plus
line information, which leaves the code as it is), disassembled by nvdisasm (Triton's wheel),
and one iteration of each read kernel's hot loop walked along the common path.

The hot loop is the innermost loop around a 128-bit load from the source's [common path] lines.
The walk starts at the loop's head and follows every instruction to the branch that closes the
loop; at a conditional branch it takes the side whose first block holds no instruction from the
[rare path] lines (the exact per-value code a rare load goes through), stays in the loop where
the other side leaves it, and fails where it cannot tell. Every instruction on the way counts,
predicated-off ones too, divided by the values the walked loads hold. At full issue (one warp
instruction a cycle per scheduler) 51.38M values cost 1.54 us per instruction a value on an
H200 (132 SMs x 4 schedulers x 1.98 GHz).

    PYTHON read_loop_count.py [--json] [--check] [--out FILE]
        one line per kernel: instructions a value, by class; --check exits 1 when a kernel is
        over its budget; --out writes the lines to FILE too (scripts/test.sh prints it)

Needs libnvrtc (the venv's nvidia-cuda-nvrtc-cu12) and nvdisasm (HOOKSCOPE_NVDISASM, a CUDA
toolkit's, or Triton's wheel's).
"""
import collections
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from hookscope import _cuda_stats  # noqa: E402
from cuda_compile_check import nvidia_tool  # noqa: E402

CAPABILITY = 90
SKIPPED = 77  # ctest's SKIP_RETURN_CODE: no NVRTC or nvdisasm here
# Instructions a value on the common path, sm_90 (issue 56): a 16-byte load holds 8 bfloat16 or
# float16 values and 4 float32 ones; the bandwidth goal per byte is the same for all three.
BUDGETS = {"hs_read_bf16": 18.0, "hs_read_f16": 18.0, "hs_read_f32": 26.0}
VALUES_PER_LOAD = {"hs_read_bf16": 8, "hs_read_f16": 8, "hs_read_f32": 4}
# Instruction classes for the breakdown, by opcode (the first word, modifiers dropped).
CLASSES = [
    ("load", {"LDG"}),
    ("histogram", {"ATOMS", "RED", "REDS"}),
    ("float", {"FADD", "FMUL", "FFMA", "FMNMX", "HMNMX2", "VHMNMX", "HADD2", "HFMA2", "HMUL2", "FSEL", "FSETP"}),
    ("float64", {"DADD", "DFMA", "DMUL", "DSETP", "F2F"}),
    ("conversion", {"F2I", "I2F", "F2FP", "I2FP"}),
    ("packed test", {"VIMNMX", "VIMNMX3", "PRMT", "POPC"}),
    ("integer", {"IADD3", "IMAD", "LOP3", "LEA", "SHF", "IMNMX", "VIADD", "IABS", "SEL", "MOV", "IADD"}),
    ("compare and branch", {"ISETP", "BRA", "PLOP3", "BSSY", "BSYNC", "WARPSYNC", "YIELD", "NOP"}),
]


def nvdisasm():
    """The nvdisasm to read cubins with, or None."""
    return nvidia_tool("nvdisasm", "HOOKSCOPE_NVDISASM")


def compile_with_lines(nvrtc, source, capability):
    """The cubin the package compiles, with line information (the same code, checked by the test)."""
    lib = nvrtc.lib
    program = ctypes.c_void_p()
    nvrtc._check(lib.nvrtcCreateProgram(ctypes.byref(program), source.encode(), b"stats_kernels.cu", 0, None, None),
                 "nvrtcCreateProgram")
    try:
        options = _cuda_stats.compile_options(capability) + [b"--generate-line-info"]
        array = (ctypes.c_char_p * len(options))(*options)
        nvrtc._check(lib.nvrtcCompileProgram(program, len(options), array), "nvrtcCompileProgram")
        size = ctypes.c_size_t()
        nvrtc._check(lib.nvrtcGetCUBINSize(program, ctypes.byref(size)), "nvrtcGetCUBINSize")
        cubin = ctypes.create_string_buffer(size.value)
        nvrtc._check(lib.nvrtcGetCUBIN(program, cubin), "nvrtcGetCUBIN")
        return cubin.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(program))


def disassemble(tool, cubin):
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        done = subprocess.run([tool, "-c", "-g", f.name], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit("%s failed (exit %d): %s" % (tool, done.returncode, (done.stderr or done.stdout).strip()))
    return done.stdout


def regions(source, name):
    """The source lines (1-based) between each '// [name]' and '// [/name]'."""
    lines, inside, out = source.splitlines(), False, set()
    for number, line in enumerate(lines, 1):
        if line.startswith("// [/%s]" % name):
            inside = False
        elif line.startswith("// [%s]" % name):
            inside = True
        elif inside:
            out.add(number)
    if not out:
        raise SystemExit("stats_kernels.cu has no '// [%s]' ... '// [/%s]' lines" % (name, name))
    return out


Instruction = collections.namedtuple("Instruction", "address text line")


def functions(sass):
    """{kernel name: ([Instruction], {label: address})} from nvdisasm -c -g output."""
    out, name, line, pending = {}, None, None, []
    for raw in sass.splitlines():
        found = re.match(r"^(hs_\w+):$", raw)
        if found:
            name, line, pending = found.group(1), None, []
            out[name] = ([], {})
            continue
        if name is None:
            continue
        where = re.search(r'//## File ".*", line (\d+)', raw)
        if where:
            line = int(where.group(1))
            continue
        label = re.match(r"^(\.L_x_\d+):", raw)
        if label:
            pending.append(label.group(1))
            continue
        code = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", raw)
        if code:
            address = int(code.group(1), 16)
            out[name][0].append(Instruction(address, code.group(2), line))
            for p in pending:
                out[name][1][p] = address
            pending = []
    return out


def opcode(text):
    """The instruction's opcode without its predicate and modifiers."""
    return re.sub(r"^@!?U?P\w+\s+", "", text).split()[0].split(".")[0]


def branch(text, labels):
    """(target address, conditional) of a branch, or None."""
    if opcode(text) != "BRA":
        return None
    target = re.search(r"`\((\.L_x_\d+)\)", text)
    if not target:
        return None
    return labels[target.group(1)], text.startswith("@")


def hot_loop(code, labels, common):
    """(head, latch) indexes of the innermost loop around a 128-bit load from the common lines."""
    loads = [i for i, ins in enumerate(code) if ins.text.startswith("LDG.E.128") and ins.line in common]
    if not loads:
        return None
    at = {ins.address: i for i, ins in enumerate(code)}
    best = None
    for i, ins in enumerate(code):
        b = branch(ins.text, labels)
        if b and b[0] <= ins.address:
            head = at[b[0]]
            if any(head <= load <= i for load in loads) and (best is None or i - head < best[1] - best[0]):
                best = (head, i)
    return best


def walk(code, labels, head, latch, rare):
    """The instructions one iteration of the loop issues along its common path."""
    at = {ins.address: i for i, ins in enumerate(code)}

    def leads_to_rare(i):
        while i < len(code):
            if code[i].line in rare:
                return True
            if branch(code[i].text, labels) or opcode(code[i].text) in ("EXIT", "RET", "CALL"):
                return False
            i += 1
        return False

    path, i = [], head
    while True:
        if len(path) > 4 * (latch - head + 1):
            raise SystemExit("the walk from 0x%x does not come back to the loop's end" % code[head].address)
        ins = code[i]
        path.append(ins)
        if i == latch:
            return path
        b = branch(ins.text, labels)
        if b is None:
            i += 1
            continue
        target, conditional = at[b[0]], b[1]
        if not conditional:
            i = target
            continue
        outside = not head <= target <= latch
        if outside:
            i += 1  # the loop's exit: the common path stays
            continue
        taken_rare, fall_rare = leads_to_rare(target), leads_to_rare(i + 1)
        if taken_rare == fall_rare:
            raise SystemExit("at 0x%x (%s) both sides %s rare lines: the common path is not clear"
                             % (ins.address, ins.text, "reach" if taken_rare else "avoid"))
        i = i + 1 if taken_rare else target


def count(source, nvrtc=None, tool=None, capability=CAPABILITY):
    """{kernel: {"per_value", "instructions", "values", "classes"}} for the read kernels."""
    tool = tool or nvdisasm()
    if tool is None:
        raise SystemExit("no nvdisasm: set HOOKSCOPE_NVDISASM or install triton")
    sass = disassemble(tool, compile_with_lines(nvrtc or _cuda_stats.Nvrtc(), source, capability))
    common, rare = regions(source, "common path"), regions(source, "rare path")
    kernels = functions(sass)
    out = {}
    for name in BUDGETS:
        if name not in kernels:
            raise SystemExit("%s is not in the cubin" % name)
        code, labels = kernels[name]
        loop = hot_loop(code, labels, common)
        if loop is None:
            raise SystemExit("%s has no loop around a 128-bit load from the common path's lines" % name)
        path = walk(code, labels, loop[0], loop[1], rare)
        loads = sum(1 for ins in path if ins.text.startswith("LDG.E.128"))
        values = loads * VALUES_PER_LOAD[name]
        classes = collections.Counter()
        for ins in path:
            op = opcode(ins.text)
            classes[next((c for c, ops in CLASSES if op in ops), "other")] += 1
        out[name] = {"per_value": len(path) / values, "instructions": len(path), "values": values,
                     "budget": BUDGETS[name],
                     "classes": {c: round(n / values, 3) for c, n in sorted(classes.items())}}
    return out


def main():
    args = sys.argv[1:]
    out = args[args.index("--out") + 1] if "--out" in args else None
    with open(_cuda_stats.SOURCE, encoding="utf-8") as f:
        source = f.read()
    try:
        nvrtc = _cuda_stats.Nvrtc()
    except _cuda_stats.Unavailable as exc:
        print("skipped: %s (setup.sh installs nvidia-cuda-nvrtc-cu12)" % exc)
        sys.exit(SKIPPED)
    if nvdisasm() is None:
        print("skipped: no nvdisasm (Triton's wheel ships it; setup.sh installs triton)")
        sys.exit(SKIPPED)
    result = count(source, nvrtc)
    lines, over = [], []
    for name, row in result.items():
        if "--json" in args:
            lines.append(json.dumps(dict(kernel=name, **row)))
        else:
            lines.append("%-13s %5.2f instructions a value on the common path, sm_%d (%d for %d values; budget %.0f): %s"
                         % (name, row["per_value"], CAPABILITY, row["instructions"], row["values"], row["budget"],
                            ", ".join("%s %.2f" % kv for kv in row["classes"].items())))
        if row["per_value"] > row["budget"]:
            over.append("%s: %.2f instructions a value, over its budget of %.0f" % (name, row["per_value"], row["budget"]))
    print("\n".join(lines))
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    if over and "--check" in args:
        print("\n".join(over), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
