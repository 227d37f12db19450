"""Opening a model file that runs in Python: a torch.export program (.pt2) or a whole-model
pickle. Each failure is a ModelFileError whose text says what happened and what to do."""

import os
import sys
import zipfile

import torch

from .._hooks import module_entries

NEEDS_TRUST = 9  # the exit code hookscope-cli's engines use for "refused: the file holds code"


class ModelFileError(Exception):
    def __init__(self, message, code=3):
        super().__init__(message)
        self.code = code


def uncalled_type(module):
    """The type shown for a module a .pt2 never called: its class is not in the program, so
    what its parameters show (a 2-D weight and a bias of its rows: Linear-shaped)."""
    params = dict(module.named_parameters(recurse=False))
    weight, bias = params.get("weight"), params.get("bias")
    if weight is not None and weight.dim() == 2 and (bias is None or tuple(bias.shape) == (weight.shape[0],)):
        return "Linear (not called)"
    return "not called"


class LoadedModel:
    """A module to hook and run, with what the window shows about it."""

    def __init__(self, module, kind, types=None, example_inputs=None):
        self.module = module
        self.kind = kind                    # "pt2", "pickle" or "checkpoint"
        self.types = types or {}            # path -> the eager module's class name (a .pt2's own are Interpreter...)
        self.example_inputs = example_inputs or []

    def type_name(self, path, module):
        if path in self.types:
            return self.types[path]
        if self.kind == "checkpoint":
            return "weights"
        if self.kind == "pt2":
            # Never called itself (a ModuleList, a TransformerEncoder's layers): torch.export kept no
            # class for it.
            # A module whose parent uses its weights without calling it (MultiheadAttention's
            # out_proj, a NonDynamicallyQuantizableLinear) is said to be one that is not called,
            # with the kind its parameters show.
            if any(True for _ in module.children()):
                return "container"
            return uncalled_type(module)
        return type(module).__name__

    def module_entries(self):
        """The hello's modules (and inspect's rows), with the eager class names a .pt2 keeps."""
        if self.kind == "checkpoint":
            return module_entries(self.module.named_modules(), self.type_name, counted=checkpoint_parameter)
        return module_entries(self.module.named_modules(), self.type_name)

    def example_spec(self):
        """The example inputs as input specs ("8x1x28x28 8x16:int64:0:100"), or ""."""
        specs = []
        for t in self.example_inputs:
            if not isinstance(t, torch.Tensor):
                return ""
            shape = "x".join(str(d) for d in t.shape) or "1"
            dtype = str(t.dtype).replace("torch.", "")
            if t.is_floating_point():
                specs.append(shape if dtype == "float32" else "%s:%s" % (shape, dtype))
            elif t.dtype == torch.bool:
                specs.append("%s:bool" % shape)
            else:  # integers (token ids, classes): the range the example used
                high = int(t.max()) + 1 if t.numel() else 10
                low = min(0, int(t.min())) if t.numel() else 0
                specs.append("%s:%s:%d:%d" % (shape, dtype, low, max(high, low + 1)))
        return " ".join(specs)


def kind_of(path):
    """"pt2", "pickle", "torchscript", "safetensors" or None, from the file's contents."""
    with open(path, "rb") as f:
        head = f.read(9)
    if len(head) == 9 and head[:2] != b"PK" and head[8:9] == b"{":
        return "safetensors"
    try:
        with zipfile.ZipFile(path) as z:
            inner = {name.split("/", 1)[1] if "/" in name else name for name in z.namelist()}
    except (zipfile.BadZipFile, OSError):
        return None
    if "archive_format" in inner or "models/model.json" in inner:
        return "pt2"
    if "constants.pkl" in inner or any(n.startswith("code/") for n in inner):
        return "torchscript"
    if "data.pkl" in inner:
        return "pickle"
    return None


def _confinement_refused(path, exc):
    return ModelFileError("%s ran code when it was opened that tried to write or run something, and the "
                          "engine's confinement refused it (%s); nothing was written" % (path, exc))


def _torch_version():
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return 0, 0


def _load_pt2(path, trust):
    if not trust:
        names = pt2_pickle_globals(path)
        if names:
            raise ModelFileError(
                "%s holds pickles that run code when torch.export.load opens them (a .pt2 saved by "
                "torch.export.save holds none):\n%sLoad it only if you trust where it came from: run again with "
                "--trust (the window asks)." % (path, _listed(names)), code=NEEDS_TRUST)
    if not hasattr(torch, "export") or not hasattr(torch.export, "unflatten") or _torch_version() < (2, 3):
        raise ModelFileError(
            "%s is a torch.export program (.pt2), which needs PyTorch 2.3 or newer with torch.export; this Python "
            "(%s) has PyTorch %s. Name a Python with a newer PyTorch: hookscope-cli --python PATH, or Settings > "
            "Python for model files in the window" % (path, sys.executable, torch.__version__))
    try:
        program = torch.export.load(path)
    except PermissionError as exc:
        raise _confinement_refused(path, exc)
    except Exception as exc:
        raise ModelFileError("cannot load the torch.export program %s (%s: %s); it may come from a newer PyTorch "
                             "than this one (%s): name a Python with that version with --python"
                             % (path, type(exc).__name__, exc, torch.__version__))
    try:
        module = torch.export.unflatten(program)
    except Exception as exc:
        raise ModelFileError("cannot rebuild the module tree of %s (torch.export.unflatten: %s: %s)"
                             % (path, type(exc).__name__, exc))
    # The unflattened modules are InterpreterModules: the eager classes are in the graph's metadata.
    types = {}
    for node in program.graph.nodes:
        for value in (node.meta.get("nn_module_stack") or {}).values():
            try:
                fqn, cls = value
            except (TypeError, ValueError):
                continue
            name = cls if isinstance(cls, str) else getattr(cls, "__qualname__", str(cls))
            types.setdefault(fqn, name.rsplit(".", 1)[-1])
    example = []
    if program.example_inputs is not None:
        args, kwargs = program.example_inputs
        example = list(args) if not kwargs else []
    return LoadedModel(module, "pt2", types, example)


_SAFE_GLOBALS = ("collections.OrderedDict", "torch._utils.", "torch._tensor._rebuild", "_codecs.encode",
                 "torch.device", "torch.Size", "builtins.set", "__builtin__.set", "torch.nn.parameter.Parameter")


def globals_of(data):
    """The classes and functions a pickle names, outside what weights_only allows."""
    import pickletools
    found, strings = [], []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name == "GLOBAL":
                found.append(arg.replace(" ", "."))
            elif op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
                strings.append(arg)
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append("%s.%s" % (strings[-2], strings[-1]))
    except Exception as exc:  # a pickle this walk cannot read: what it would run is unknown
        return ["(an unreadable pickle: %s)" % exc]
    return sorted({g for g in found
                   if not g.startswith(_SAFE_GLOBALS) and not (g.startswith("torch.") and g.count(".") == 1)})


def _listed(names, most=12):
    lines = "".join("  %s\n" % n for n in names[:most])
    return lines + ("  ... and %d more\n" % (len(names) - most) if len(names) > most else "")


def pickle_globals(path):
    """globals_of the pickle of a torch.save file."""
    with zipfile.ZipFile(path) as z:
        name = next(n for n in z.namelist() if n.endswith("/data.pkl") or n == "data.pkl")
        return globals_of(z.read(name))


def pt2_pickle_globals(path):
    """What the pickles inside a .pt2 name beyond weights: torch.export.load unpickles its sample
    inputs (and constants) with weights_only=False, so a crafted one runs code when opened."""
    import io
    found = []
    with zipfile.ZipFile(path) as z:
        for name in z.namelist():
            if name.endswith(".pkl"):
                found += globals_of(z.read(name))
            elif name.endswith(".pt"):
                try:
                    with zipfile.ZipFile(io.BytesIO(z.read(name))) as inner:
                        for record in inner.namelist():
                            if record.endswith("data.pkl"):
                                found += ["%s (in %s)" % (g, name.split("/", 1)[-1])
                                          for g in globals_of(inner.read(record))]
                except zipfile.BadZipFile:
                    found += globals_of(z.read(name))
    return sorted(set(found))


# What a state_dict holds beside parameters under these names: BatchNorm's running statistics.
BUFFER_NAMES = ("running_mean", "running_var", "num_batches_tracked")


def checkpoint_parameter(name, tensor):
    """Whether a checkpoint's tensor counts as a parameter: a state_dict holds buffers too, and
    says nothing of which is which; BatchNorm's running statistics and integer tensors (a
    parameter is floating point) are buffers."""
    return name.rsplit(".", 1)[-1] not in BUFFER_NAMES and (tensor.is_floating_point() or tensor.is_complex())


class Weights(torch.nn.Module):
    """A checkpoint's tensors as a module tree built from their dotted names (read-only)."""


def checkpoint_module(tensors, path):
    root = Weights()
    for name, t in sorted(tensors.items()):
        *owners, leaf = name.split(".")
        module = root
        for part in owners:
            child = module._modules.get(part)
            if child is None:
                if part in module._parameters or not part:
                    raise ModelFileError("%s names both a tensor and a module %r: HookScope cannot draw it as a tree"
                                         % (path, part), code=4)
                child = Weights()
                module.add_module(part, child)
            module = child
        if leaf in module._modules or not leaf:
            raise ModelFileError("%s names both a tensor and a module %r" % (path, name), code=4)
        module.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
    return root


def _load_checkpoint(path):
    from .checkpoint import CheckpointError, read_checkpoint
    try:
        tensors = read_checkpoint(path)
    except CheckpointError as exc:
        raise ModelFileError(str(exc), code=4)
    return LoadedModel(checkpoint_module(tensors, path), "checkpoint",
                       types={"": "checkpoint"})


def _load_pickle(path, trust, python_path):
    names = pickle_globals(path)
    if not names:  # weights alone: a checkpoint, read with weights_only
        return _load_checkpoint(path)
    if not trust:
        raise ModelFileError(
            "%s is a pickle of Python objects (torch.save(model)), and opening it runs the code it names:\n%s"
            "Load it only if you trust where it came from: run again with --trust (the window asks). Its classes "
            "must be importable: --python-path DIR adds the folder that holds their module."
            % (path, _listed(names)), code=NEEDS_TRUST)
    for folder in python_path:
        sys.path.insert(0, os.path.abspath(folder))
    try:
        value = torch.load(path, map_location="cpu", weights_only=False)
    except (ModuleNotFoundError, AttributeError) as exc:
        missing = getattr(exc, "name", None) or str(exc)
        if "__main__" in str(exc):
            raise ModelFileError(
                "%s was saved by a script that defined the model's classes itself (__main__: %s), so no other "
                "process can import them. Save the model with torch.export.save(torch.export.export(model, "
                "(example,)), 'model.pt2') (or torch.jit.script(model).save('model.pt')), or define its classes "
                "in a module and give that module's folder with --python-path" % (path, exc))
        raise ModelFileError(
            "%s names Python code this process cannot import (%s: %s): it needs the module that defined the model's "
            "classes. Give the folder that holds it with --python-path DIR (Settings > Python path for model files "
            "in the window)" % (path, type(exc).__name__, missing))
    except PermissionError as exc:
        raise _confinement_refused(path, exc)
    except Exception as exc:
        raise ModelFileError("cannot load %s (%s: %s)" % (path, type(exc).__name__, exc))
    if isinstance(value, torch.nn.Module):
        return LoadedModel(value, "pickle")
    if isinstance(value, dict):
        raise ModelFileError("%s holds a %s, not a model: a checkpoint (its weights) has no code to run; save the "
                             "model itself with torch.save(model) or torch.export" % (path, type(value).__name__))
    raise ModelFileError("%s holds a %s, not a torch.nn.Module" % (path, type(value).__name__))


def load(path, trust=False, python_path=()):
    if not os.path.isfile(path):
        raise ModelFileError("%s is not a file" % path)
    kind = kind_of(path)
    if kind == "pt2":
        return _load_pt2(path, trust)
    if kind == "pickle":
        return _load_pickle(path, trust, python_path)
    if kind == "safetensors":
        return _load_checkpoint(path)
    if kind == "torchscript":
        raise ModelFileError("%s is a TorchScript archive: HookScope's C++ engine runs it (hookscope-cli serve)" % path)
    raise ModelFileError("%s is not a model file the Python engine opens (a torch.export .pt2, or torch.save(model))"
                         % path)


__all__ = ["LoadedModel", "ModelFileError", "NEEDS_TRUST", "globals_of", "kind_of", "load", "pickle_globals",
           "pt2_pickle_globals"]
