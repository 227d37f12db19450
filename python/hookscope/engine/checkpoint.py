"""python -m hookscope.engine checkpoint FILE [--compare OTHER]: a checkpoint's weights, read
without running any code (torch.load with weights_only=True; a safetensors file through a
bounded reader of its documented header), with every tensor's statistics, NaN and Inf counted;
and the change from one checkpoint to another, per tensor, largest first."""

import json
import math
import os
import struct
import sys

import torch

from .._stats import HEADER, torch_row
from ..runs import damaged_record
from ._terminal import printable

SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}
MAX_HEADER = 100 << 20  # the format's own limit on the JSON header


class CheckpointError(Exception):
    """The file is not a checkpoint HookScope reads; the text says why and what to do."""


def _itemsize(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _unique_keys(pairs):
    """A JSON object's dict, refusing a key given twice (json.loads would keep the last)."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError("the key %r is given twice" % key)
        out[key] = value
    return out


def _whole(value):
    return isinstance(value, int) and not isinstance(value, bool)


def read_safetensors(path):
    """{name: tensor} of a safetensors file. Every length and offset is checked against the file
    before anything is read, as the reference library checks them: a header that claims more than
    the file holds, offsets that are not whole numbers, tensors that overlap or leave bytes between
    them or after the last, and a name given twice are refused."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError("%s is %d bytes long: a safetensors file starts with an 8-byte header length"
                                  % (path, size))
        (length,) = struct.unpack("<Q", head)
        if length < 2 or length > MAX_HEADER or length > size - 8:
            raise CheckpointError("%s claims a %d-byte header, but %s: the file is damaged or not safetensors"
                                  % (path, length, "the format allows at most 100 MiB" if length > MAX_HEADER
                                     else "it holds %d bytes after the length" % (size - 8)))
        try:
            header = json.loads(f.read(length).decode("utf-8"), object_pairs_hook=_unique_keys)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise CheckpointError("the header of %s is not JSON (%s): the file is damaged" % (path, exc))
        if not isinstance(header, dict):
            raise CheckpointError("the header of %s is not a JSON object" % path)
        data = size - 8 - length
        tensors = {}
        spans = []
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            if not isinstance(entry, dict):
                raise CheckpointError("%s: the entry of %r is not an object" % (path, name))
            named = entry.get("dtype")
            dtype = SAFETENSORS_DTYPES.get(named) if isinstance(named, str) else None
            shape, offsets = entry.get("shape"), entry.get("data_offsets")
            if dtype is None:
                raise CheckpointError("%s: %r has dtype %s, which HookScope does not read%s"
                                      % (path, name, printable(repr(named))[:200],
                                         "" if isinstance(named, str) else " (a dtype is a name such as \"F32\")"))
            if not (isinstance(shape, list) and all(_whole(d) and 0 <= d < 1 << 40 for d in shape)):
                raise CheckpointError("%s: %r has a bad shape %r" % (path, name, shape))
            if not (isinstance(offsets, list) and len(offsets) == 2 and all(_whole(o) for o in offsets)):
                raise CheckpointError("%s: %r has data_offsets %r, not two whole numbers: the file is damaged"
                                      % (path, name, offsets))
            if not 0 <= offsets[0] <= offsets[1] <= data:
                raise CheckpointError("%s: %r lies at bytes %r, outside the %d bytes of data the file holds: the file "
                                      "is truncated or damaged" % (path, name, offsets, data))
            expected = math.prod(shape) * _itemsize(dtype)
            if offsets[1] - offsets[0] != expected:
                raise CheckpointError("%s: %r has shape %r of %s (%d bytes) but %d bytes of data"
                                      % (path, name, shape, entry["dtype"], expected, offsets[1] - offsets[0]))
            spans.append((offsets[0], offsets[1], name))
        # The tensors tile the data from its first byte to its last, as the reference library
        # requires: an overlap or a gap is a damaged (or crafted) file, not weights to measure.
        end, before = 0, None
        for start, stop, name in sorted(spans):
            if start != end:
                raise CheckpointError(
                    "%s: %r starts at byte %d of the data, where %s: the tensors must lie one after another, "
                    "as the safetensors library requires; the file is damaged or crafted"
                    % (path, name, start, "%r ends at %d (they overlap)" % (before, end) if start < end else
                       "the bytes %d to %d belong to no tensor" % (end, start)))
            end, before = stop, name
        if end != data:
            raise CheckpointError("%s: the tensors end at byte %d of the data but the file holds %d: the bytes after "
                                  "belong to no tensor; the file is damaged or crafted" % (path, end, data))
        for start, stop, name in spans:
            entry = header[name]
            dtype, shape, expected = SAFETENSORS_DTYPES[entry["dtype"]], entry["shape"], stop - start
            f.seek(8 + length + start)
            raw = bytearray(f.read(expected))
            tensors[name] = torch.frombuffer(raw, dtype=dtype).reshape(shape) if expected else \
                torch.empty(shape, dtype=dtype)
        return tensors


MAX_DEPTH = 64  # containers inside containers a checkpoint may nest (a state_dict nests 1 or 2)


def _flatten(value, prefix, out):
    """{dotted name: tensor} of the tensors in nested dicts, lists and tuples, walked without
    recursion; a container inside itself (a cycle) or nested past MAX_DEPTH is refused, by path."""
    stack = [(value, prefix, ())]
    while stack:
        item, name, inside = stack.pop()
        if isinstance(item, torch.Tensor):
            out[name] = item
            continue
        if isinstance(item, dict):
            children = [("%s.%s" % (name, key) if name else str(key), child) for key, child in item.items()]
        elif isinstance(item, (list, tuple)):
            children = [("%s.%d" % (name, i) if name else str(i), child) for i, child in enumerate(item)]
        else:
            continue
        if id(item) in inside:
            raise CheckpointError("%r holds a container it is itself inside of (a cycle): a checkpoint is a tree of "
                                  "tensors, not this" % (name or "the file's top level"))
        if len(inside) >= MAX_DEPTH:
            raise CheckpointError("%r is nested more than %d containers deep: not a checkpoint's layout"
                                  % (printable(name)[:200], MAX_DEPTH))
        for child_name, child in reversed(children):
            stack.append((child, child_name, inside + (id(item),)))
    return out


def unmeasured(t):
    """Why a tensor's values are not measured (a meta or sparse tensor has none to read; a view
    that repeats its storage's values, stride 0 or overlapping, would be walked value by value
    far past what the file holds), or None."""
    if t.is_meta:
        return "a meta tensor: no values to measure"
    if t.layout != torch.strided:
        return "a %s tensor: no values to measure" % str(t.layout).replace("torch.", "")
    stored = _stored_bytes(t)
    if not t.is_quantized and t.numel() * t.element_size() > stored:
        return ("a view of %d stored values seen as %d (stride 0 or overlapping): not measured value by value"
                % (stored // max(t.element_size(), 1), t.numel()))
    return None


def _stored_bytes(t):
    try:
        return t.untyped_storage().nbytes()
    except AttributeError:  # PyTorch 1.x
        return t.storage().nbytes()


def read_checkpoint(path):
    """{dotted name: tensor} of a torch.save checkpoint or a safetensors file, no code run."""
    if not os.path.isfile(path):
        raise CheckpointError("%s is not a file" % path)
    with open(path, "rb") as f:
        magic = f.read(4)
    # A zip archive (torch.save's format), or a pickle (its format before PyTorch 1.6).
    if magic == b"PK\x03\x04" or magic[:1] == b"\x80":
        damaged = damaged_record(path) if magic[:1] == b"P" else None
        if damaged:  # torch.load does not check records' CRC-32: a flipped bit would be other numbers
            raise CheckpointError("%s is damaged: its record %s does not match the CRC-32 the archive records for it"
                                  % (path, damaged))
        try:
            value = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CheckpointError("%s cannot be read as weights alone (%s). A checkpoint holds tensors; a file that "
                                  "needs code to load is a model: open it with hookscope-cli inspect or capture"
                                  % (path, first))
        tensors = _flatten(value, "", {})
    else:
        tensors = read_safetensors(path)
    if not tensors:
        raise CheckpointError("%s holds no tensors" % path)
    return tensors


def statistics(t):
    """numel, min, max, mean, std (n-1), l2 over the finite values; NaN and Inf counted: the
    package's own statistics (_stats.torch_row), as the window shows for the same tensor. A
    quantized tensor is measured dequantized; one unmeasured() refuses has "why" instead."""
    why = unmeasured(t)
    if why:
        return {"numel": t.numel(), "why": why, "nan": 0, "inf": 0}
    if t.is_quantized:
        t = t.dequantize()
    row = torch.empty(HEADER + 1, dtype=torch.float64)
    torch_row(t, 1, row)
    low, high, mean, std, l2, _, nan, inf = row[:8].tolist()
    return {"numel": t.numel(), "min": low, "max": high, "mean": mean, "std": std, "l2norm": l2, "nan": int(nan),
            "inf": int(inf)}


def _g(value):
    return "%.6g" % value


def show(path, tensors, out):
    rows = [(name, statistics(t), t) for name, t in tensors.items()]
    total = sum(s["numel"] for _, s, _ in rows)
    bad = [name for name, s, _ in rows if s["nan"] or s["inf"]]
    out.write("%s: checkpoint, %d tensors, %d values%s\n" % (
        os.path.basename(path), len(rows), total,
        ", NaN or Inf in %d of them: %s" % (len(bad), ", ".join(printable(b) for b in bad[:8])) if bad else ""))
    out.write("%-44s%-14s%-9s%13s%13s%13s%13s%13s%8s%8s\n" % ("tensor", "shape", "dtype", "min", "max", "mean", "std",
                                                             "l2norm", "NaN", "Inf"))
    module = None
    for name, s, t in sorted(rows, key=lambda r: r[0]):
        owner, _, leaf = name.rpartition(".")
        if owner != module:
            module = owner
            if owner:
                out.write("%s\n" % printable(owner))
        label = ("  " + leaf) if owner else leaf
        head = "%-44s%-14s%-9s" % (printable(label), "x".join(map(str, t.shape)) or "()",
                                   str(t.dtype).replace("torch.", ""))
        if "why" in s:
            out.write("%s  %s\n" % (head, s["why"]))
            continue
        out.write("%s%13s%13s%13s%13s%13s%8d%8d\n" % (
            head, _g(s["min"]), _g(s["max"]), _g(s["mean"]), _g(s["std"]), _g(s["l2norm"]), s["nan"], s["inf"]))
    quantized = sorted(name for name, _, t in rows if t.is_quantized)
    if quantized:
        out.write("measured dequantized (quantized tensors): %s\n" % ", ".join(printable(n) for n in quantized))


def changes(before, after):
    """Per tensor in both: (name, ‖after - before‖, relative change, values NaN or Inf in either,
    NaN in the first, Inf in the first, NaN in the second, Inf in the second), what NaN or Inf
    touches first, then the largest relative change; and the names only one has, with other
    shapes, or not measured (unmeasured()). The change is measured over the values finite in
    both: one NaN does not turn a tensor's whole change into nan."""
    rows, reshaped, skipped = [], [], []
    for name in before.keys() & after.keys():
        a, b = before[name], after[name]
        if a.shape != b.shape:
            reshaped.append(name)
            continue
        if unmeasured(a) or unmeasured(b):  # nothing to read, or far more values than stored
            skipped.append(name)
            continue
        a, b = (t.dequantize() if t.is_quantized else t for t in (a, b))
        a64, b64 = a.detach().to(torch.float64), b.detach().to(torch.float64)
        finite_a, finite_b = torch.isfinite(a64), torch.isfinite(b64)
        both = finite_a & finite_b
        delta = (b64[both] - a64[both]).norm().item()
        base = a64[both].norm().item()
        relative = delta / base if base > 0 else (0.0 if delta == 0 else math.inf)
        rows.append((name, delta, relative, int((~both).sum()), int(torch.isnan(a64).sum()), int(torch.isinf(a64).sum()),
                     int(torch.isnan(b64).sum()), int(torch.isinf(b64).sum())))
    rows.sort(key=lambda r: (-r[3], -r[2], r[0]))
    return (rows, sorted(before.keys() - after.keys()), sorted(after.keys() - before.keys()), sorted(reshaped),
            sorted(skipped))


def compare(path_a, a, path_b, b, out):
    rows, only_a, only_b, reshaped, skipped = changes(a, b)
    changed = [r for r in rows if r[1] != 0 or r[3]]
    broken = [r for r in rows if r[3]]
    out.write("%s -> %s: %d tensors in both, %d changed, %d unchanged%s\n" % (
        os.path.basename(path_a), os.path.basename(path_b), len(rows), len(changed), len(rows) - len(changed),
        "; NaN or Inf in %d (the change is measured over the values finite in both)" % len(broken) if broken else ""))
    line = "%-44s%16s%16s%10s%10s%10s%10s\n"
    out.write(line % ("tensor", "norm of change", "relative", "NaN 1st", "Inf 1st", "NaN 2nd", "Inf 2nd"))
    for name, delta, relative, _, *counts in rows:
        out.write(line % ((printable(name), _g(delta), _g(relative)) + tuple(counts)))
    for label, names in (("only in " + os.path.basename(path_a), only_a), ("only in " + os.path.basename(path_b), only_b),
                         ("shapes differ", reshaped),
                         ("not measured (no values, or a view repeating its storage)", skipped)):
        if names:
            out.write("%s: %s\n" % (label, ", ".join(printable(n) for n in names)))


def compare_csv(a, b, out):
    """The comparison for programs: tensor,status,norm_of_change,relative,nonfinite (values NaN or
    Inf in either),nan_first,inf_first,nan_second,inf_second, in the table's order."""
    import csv
    rows, only_a, only_b, reshaped, skipped = changes(a, b)
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["tensor", "status", "norm_of_change", "relative", "nonfinite", "nan_first", "inf_first",
                     "nan_second", "inf_second"])
    for name, delta, relative, nonfinite, *counts in rows:
        writer.writerow([name, "changed" if delta != 0 or nonfinite else "unchanged", repr(delta), repr(relative),
                         nonfinite] + counts)
    for status, names in (("only_in_first", only_a), ("only_in_second", only_b), ("shapes_differ", reshaped),
                          ("not_measured", skipped)):
        for name in names:
            writer.writerow([name, status] + [""] * 7)


def main(path, other=None, out=sys.stdout, csv=False):
    try:
        tensors = read_checkpoint(path)
        if other is None:
            show(path, tensors, out)
        elif csv:
            compare_csv(tensors, read_checkpoint(other), out)
        else:
            compare(path, tensors, other, read_checkpoint(other), out)
    except CheckpointError as exc:
        sys.stderr.write("hookscope-cli: %s\n" % exc)
        return 4
    except (MemoryError, OverflowError, TypeError, ValueError, KeyError, IndexError, RuntimeError) as exc:
        # A layout no check above foresaw: still the file's fault, said as such, never a traceback
        # the CLI would report as a Python that cannot run the engine.
        sys.stderr.write("hookscope-cli: %s could not be read as a checkpoint (%s: %s); if the file loads with "
                         "torch.load or safetensors, please report it\n"
                         % (path if other is None else "%s or %s" % (path, other), type(exc).__name__,
                            printable(str(exc))[:300]))
        return 4
    return 0
