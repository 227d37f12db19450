"""One run of a model file, as HookScope's C++ StepRunner makes it: inputs from specs or a data
file, the loss (auto, cross_entropy, mse, mean, sum), SGD or Adam, train or eval, no_grad,
seeded; one step at a time. The hooks see everything as they would in a user's own loop."""

import math
import time

import torch

FLOAT_DTYPES = {"float32": torch.float32, "float64": torch.float64, "float16": torch.float16,
                "bfloat16": torch.bfloat16}
INT_DTYPES = {"int64": torch.int64, "int32": torch.int32, "int16": torch.int16, "int8": torch.int8,
              "uint8": torch.uint8, "bool": torch.bool}
MAX_INPUT_ELEMENTS = 1 << 31


class RunError(Exception):
    """A configuration or a step the model rejects; the text says what to do."""


def parse_spec(text):
    """(shape, dtype, low, high or None) of SHAPE[:DTYPE[:LOW:HIGH]]."""
    def fail(message):
        raise RunError("bad input spec '%s': %s (expected SHAPE[:DTYPE[:LOW:HIGH]], e.g. 8x3x32x32 or "
                       "8x128:int64:0:30000)" % (text, message))
    parts = text.split(":")
    if not parts[0]:
        fail("no shape")
    if len(parts) not in (1, 2, 4):
        fail("give either a dtype alone or a dtype with both LOW and HIGH")
    shape = []
    for dim in parts[0].split("x"):
        if not dim.isdigit() or not 0 < int(dim) < (1 << 31):
            fail("dimension '%s' is not a whole number from 1" % dim)
        shape.append(int(dim))
    if math.prod(shape) > MAX_INPUT_ELEMENTS:
        fail("the shape holds more values than a synthetic input may have")
    dtype = parts[1] if len(parts) >= 2 else "float32"
    if dtype not in FLOAT_DTYPES and dtype not in INT_DTYPES:
        fail("unknown dtype '%s'" % dtype)
    low, high = 0.0, None
    if len(parts) == 4:
        try:
            low, high = float(parts[2]), float(parts[3])
        except ValueError:
            fail("LOW and HIGH must be numbers")
        if not low < high:
            fail("LOW must be below HIGH")
    elif dtype in INT_DTYPES:
        high = 2.0 if dtype == "bool" else 10.0
    return shape, dtype, low, high


def make_input(text, generator):
    shape, dtype, low, high = parse_spec(text)
    if dtype in INT_DTYPES:
        return torch.randint(math.ceil(low), math.ceil(high), shape, generator=generator,
                             dtype=torch.int64).to(INT_DTYPES[dtype])
    draw = torch.float64 if dtype == "float64" else torch.float32
    if high is not None:
        return torch.empty(shape, dtype=draw).uniform_(low, high, generator=generator).to(FLOAT_DTYPES[dtype])
    return torch.randn(shape, generator=generator, dtype=draw).to(FLOAT_DTYPES[dtype])


def load_data(path, batch_size):
    """Batches of inputs and targets from a torch.save file, read with weights_only."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise RunError("cannot read data file %s (%s); write it in Python with torch.save({\"inputs\": x, "
                       "\"targets\": y}, path)" % (path, exc))
    target = None
    if isinstance(data, torch.Tensor):
        inputs = [data]
    elif isinstance(data, dict):
        value = data.get("inputs")
        inputs = [value] if isinstance(value, torch.Tensor) else \
            [t for t in value if isinstance(t, torch.Tensor)] if isinstance(value, (list, tuple)) else []
        target = data.get("targets") if isinstance(data.get("targets"), torch.Tensor) else None
    else:
        inputs = []
    if not inputs:
        raise RunError("data file %s holds no inputs: save a tensor, or a dict with \"inputs\" (a tensor or a tuple "
                       "of tensors) and optional \"targets\"" % path)
    samples = inputs[0].shape[0] if inputs[0].dim() else 0
    if any(t.dim() == 0 or t.shape[0] != samples for t in inputs):
        raise RunError("data file %s: every input needs the same first (sample) dimension" % path)
    if target is not None and (target.dim() == 0 or target.shape[0] != samples):
        raise RunError("data file %s: targets have %d samples but inputs have %d"
                       % (path, target.shape[0] if target.dim() else 0, samples))
    if samples == 0:
        raise RunError("the data file %s holds no samples (its inputs have a first dimension of 0)" % path)
    batch = batch_size if batch_size > 0 else samples
    if batch > samples:
        raise RunError("batch size %d is larger than the %d samples in %s" % (batch, samples, path))
    return [([t[i:i + batch] for t in inputs], None if target is None else target[i:i + batch])
            for i in range(0, samples, batch)]


def describe(tensors):
    return ", ".join("x".join(map(str, t.shape)) + ":" + str(t.dtype).replace("torch.", "") for t in tensors)


def forward_failure(root, inputs, exc):
    """The message for an exception out of `root`'s forward: the innermost of its modules whose
    forward was running (from the traceback), and the exception as Python says it. The input is
    called the cause only when that module was handed the model's own input."""
    names = {id(module): name for name, module in root.named_modules()}
    where, handed = None, ()
    trace = exc.__traceback__
    while trace is not None:
        frame = trace.tb_frame
        module = frame.f_locals.get("self")
        if frame.f_code.co_name == "forward" and module is not None and id(module) in names:
            code = frame.f_code
            where = module
            handed = [frame.f_locals.get(arg) for arg in code.co_varnames[1:code.co_argcount]]
        trace = trace.tb_next
    reason = "%s: %s" % (type(exc).__name__, exc)
    text = describe(inputs)
    if where is None or where is root:
        place = "the model's own forward"
    else:
        place = "module '%s' (%s)" % (names[id(where)], type(where).__name__)
    if where is None or any(value is given for value in handed for given in inputs):
        return "the model rejected the input (%s) in %s: %s" % (text, place, reason)
    return "the forward failed in %s on input %s: %s" % (place, text, reason)


def first_tensor(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        for item in value:
            t = first_tensor(item)
            if t is not None:
                return t
    if isinstance(value, dict):
        for item in value.values():
            t = first_tensor(item)
            if t is not None:
                return t
    return None


def checked_bins(config):
    bins = int(config.get("bins", 64))
    if not 1 <= bins <= 4096:
        raise RunError("histogram bins must be between 1 and 4096, got %d" % bins)
    return bins


class Runner:
    timed = True  # a step's scalars: its loss, learning rate and timings

    def __init__(self, module):
        self.module = module
        self.parameters = [p for p in module.parameters() if p.requires_grad]
        self.config = None
        self.batches = []
        self.optimizer = None
        self.synthetic_target = None
        self.steps_done = 0

    def configure(self, config):
        bins = checked_bins(config)
        lr = float(config.get("lr", 0.01))
        if not lr > 0:
            raise RunError("learning rate must be positive, got %g" % lr)
        if config.get("data_file"):
            batches = load_data(config["data_file"], int(config.get("batch_size", 0)))
        else:
            specs = config.get("inputs") or []
            if not specs:
                raise RunError("no input given: give one input spec per model input, e.g. 8x1x28x28 (--input in "
                               "hookscope-cli, the Inputs box of the window's Run tab)")
            generator = torch.Generator().manual_seed(int(config.get("seed", 0)))
            batches = [([make_input(s, generator) for s in specs], None)]
        self.config = dict(config, bins=bins, lr=lr)
        self.batches = batches
        self.synthetic_target = None
        self.optimizer = None
        if not config.get("no_grad") and self.parameters:
            kind = config.get("optimizer", "sgd")
            if kind == "sgd":
                self.optimizer = torch.optim.SGD(self.parameters, lr=lr, momentum=float(config.get("momentum", 0.0)),
                                                 weight_decay=float(config.get("weight_decay", 0.0)))
            elif kind == "adam":
                self.optimizer = torch.optim.Adam(self.parameters, lr=lr,
                                                  weight_decay=float(config.get("weight_decay", 0.0)))

    def _loss(self, out, target):
        kind = self.config.get("loss", "auto")
        if kind == "auto":
            classes = out.is_floating_point() and out.dim() == 2 and out.shape[1] >= 2
            kind = ("mse" if target.is_floating_point() else "cross_entropy") if target is not None else \
                "cross_entropy" if classes else "mse"
        if kind in ("cross_entropy", "mse") and target is None:
            if self.synthetic_target is None:
                generator = torch.Generator().manual_seed(int(self.config.get("seed", 0)) + 1)
                if kind == "cross_entropy":
                    if out.dim() < 2:
                        raise RunError("cross_entropy needs an output of shape [N, classes]")
                    self.synthetic_target = torch.randint(0, out.shape[1], (out.shape[0],), generator=generator)
                else:
                    self.synthetic_target = torch.randn(out.shape, generator=generator, dtype=out.dtype
                                                        if out.is_floating_point() else torch.float32)
            target = self.synthetic_target
        prediction = out if out.is_floating_point() else out.float()
        try:
            if kind == "cross_entropy":
                return torch.nn.functional.cross_entropy(prediction, target.long())
            if kind == "mse":
                return torch.nn.functional.mse_loss(prediction, target.to(prediction.dtype))
            if kind == "sum":
                return prediction.sum()
            return prediction.mean()
        except Exception as exc:
            raise RunError("cannot compute the %s loss on output %s: %s" % (kind, describe([out]), exc))

    def step(self, forward_only=False, after_backward=None):
        """One step; returns its scalars. `after_backward` runs before the optimizer (parameter captures)."""
        if self.config is None:
            raise RunError("the engine has no run configuration yet: configure it first")
        inputs, target = self.batches[self.steps_done % len(self.batches)]
        scalars = {"loss": float("nan"), "forward_ms": 0.0, "backward_ms": 0.0, "optimizer_ms": 0.0}
        begin = time.perf_counter()
        self.module.train(bool(self.config.get("train", True)))
        if self.optimizer is not None:
            self.optimizer.zero_grad(set_to_none=True)
        else:
            for p in self.parameters:
                p.grad = None
        with torch.set_grad_enabled(not self.config.get("no_grad", False)):
            start = time.perf_counter()
            try:
                output = self.module(*inputs)
            except Exception as exc:
                raise RunError(forward_failure(self.module, inputs, exc))
            scalars["forward_ms"] = (time.perf_counter() - start) * 1e3
            if not forward_only:
                out = first_tensor(output)
                if out is None:
                    raise RunError("the model's output holds no tensor, so no loss can be computed")
                loss = self._loss(out, target)
                scalars["loss"] = float(loss.detach())
                if not self.config.get("no_grad") and loss.requires_grad:
                    start = time.perf_counter()
                    try:
                        loss.backward()
                    except Exception as exc:
                        raise RunError("backward failed: %s: %s" % (type(exc).__name__, exc))
                    scalars["backward_ms"] = (time.perf_counter() - start) * 1e3
                    if self.optimizer is not None:
                        start = time.perf_counter()
                        self.optimizer.step()
                        scalars["optimizer_ms"] = (time.perf_counter() - start) * 1e3
                    elif after_backward:
                        after_backward()
        scalars["step_ms"] = (time.perf_counter() - begin) * 1e3
        scalars["lr"] = self.config["lr"] if self.optimizer is not None else 0.0
        self.steps_done += 1
        return scalars


class CheckpointRunner(Runner):
    """A checkpoint has no code: a step runs nothing and captures its tensors (`after_backward`,
    the parameter captures), the same at every step."""

    def configure(self, config):
        self.config = dict(config, bins=checked_bins(config), lr=0.0)
        self.optimizer = None

    timed = False  # nothing runs: no loss, rate or timings (zeros read as measured; issue 59)

    def step(self, forward_only=False, after_backward=None):
        if self.config is None:
            raise RunError("the engine has no run configuration yet: configure it first")
        if after_backward and not forward_only:
            after_backward()
        self.steps_done += 1
        return {}
