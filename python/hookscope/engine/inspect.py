"""python -m hookscope.engine inspect: the module tree of a model that runs in Python, with every
call's output shapes when --input is given, in the columns of hookscope-cli inspect."""

import os
import sys

from ._terminal import printable
from .runner import RunError, Runner


def inspect(loaded, path, inputs):
    shapes = {}
    if inputs and loaded.kind != "checkpoint":
        from .._hooks import shape_text, tensors_of
        handles = []
        for name, module in loaded.module.named_modules():
            def hook(module, args, output, name=name):
                shapes.setdefault(name, []).append(", ".join(shape_text(t) for t in tensors_of(output, [])) or
                                                   "(no tensor)")
            handles.append(module.register_forward_hook(hook))
        runner = Runner(loaded.module)
        try:
            runner.configure({"inputs": inputs, "no_grad": True, "optimizer": "none", "train": False})
            runner.step(forward_only=True)
        except RunError as exc:
            sys.stderr.write("hookscope-cli: %s\n" % exc)
            return 4
        for h in handles:
            h.remove()
    entries = loaded.module_entries()
    lines = ["%s: %d modules, %d parameters%s" % (os.path.basename(path), len(entries), entries[0]["total"],
                                                  ", input " + loaded.example_spec() if loaded.example_spec() else "")]
    rows = []
    for entry in entries:
        p = entry["path"]
        depth = p.count(".") + 1 if p else 0
        name = "  " * depth + (printable(p.rsplit(".", 1)[-1]) if p else "(root %s)" % printable(entry["type"]))
        rows.append((entry, p, name, printable(entry["type"])))
    # Columns as wide as their longest cell ("TransformerEncoderLayer"), so that none runs into the next.
    wide_name = max([40] + [len(r[2]) + 2 for r in rows])
    wide_type = max([18] + [len(r[3]) + 2 for r in rows])
    head = "%-*s%-*s%12s%14s" % (wide_name, "module", wide_type, "type", "own params", "total params")
    lines.append(head + ("  output shape" if shapes else ""))
    for entry, p, name, type_name in rows:
        line = "%-*s%-*s%12d%14d" % (wide_name, name, wide_type, type_name, entry["params"], entry["total"])
        if p in shapes:
            calls = shapes[p]
            line += "  " + "; ".join(("call %d: " % c if len(calls) > 1 else "") + s for c, s in enumerate(calls))
        elif shapes:
            line += "  (not called)"
        lines.append(line)
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
