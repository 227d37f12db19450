"""One layout of a capture's statistics row: core/kernels/RowLayout.h (the C++ kernel's library and
the wire's binary rows), the CUDA kernels' HS_ROW_* names (python/hookscope/stats_kernels.cu) and
the Python package's _stats_rows.LAYOUT (the torch ops, the Triton kernels, the wire) name the
same fields in the same order."""

import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python"))

from hookscope import _stats_rows  # noqa: E402


def snake(camel):
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", camel).lower()


def cpp_layout():
    text = open(os.path.join(ROOT, "core", "kernels", "RowLayout.h")).read()
    body = re.search(r"enum Field : int \{(.*?)\};", text, re.S).group(1)
    names = [snake(m) for m in re.findall(r"\bk(\w+)\b", re.sub(r"//.*", "", body))]
    assert names[-1] == "header"
    return names[:-1]


def cuda_layout():
    text = open(os.path.join(ROOT, "python", "hookscope", "stats_kernels.cu")).read()
    fields = sorted((int(i), name.lower()) for name, i in re.findall(r"#define HS_ROW_(\w+) (\d+)", text))
    assert [i for i, _ in fields] == list(range(len(fields)))
    header = int(re.search(r"#define HS_HEADER (\d+)", text).group(1))
    return [name for _, name in fields], header


def test_cpp_cuda_and_python_name_the_same_fields_in_the_same_order():
    cpp = cpp_layout()
    cuda, header = cuda_layout()
    assert cpp == list(_stats_rows.LAYOUT) == cuda
    assert header == len(cpp) == _stats_rows.HEADER


def test_the_wire_and_the_cpp_library_use_the_layout_by_name():
    """No field written or read by a bare number where the layout's name belongs."""
    for path in ("core/wire/WireStats.cpp", "core/kernels/StatsLibrary.cpp"):
        text = open(os.path.join(ROOT, path)).read()
        assert not re.search(r"\b(row|out)\[\d+\]", text), path
    cu = open(os.path.join(ROOT, "python", "hookscope", "stats_kernels.cu")).read()
    assert not re.search(r"\brow\[\d+\]", cu)


def test_the_python_names_derive_from_the_layout():
    layout = _stats_rows.LAYOUT
    assert all(layout[i] == name for i, name in _stats_rows.FIELDS + _stats_rows.PRECISION)
    assert {name for _, name in _stats_rows.FIELDS + _stats_rows.PRECISION} | {"nan", "inf"} == set(layout)
