"""PyTorch hooks on the user's model and optimizer: which tensors HookScope captures, and the
interventions (a changed gradient or output) the viewer asked for.

Every hook holds its owner weakly and reaches it through `capture(series, call, kind, index,
tensor)` and `fail(exc)`; copies of the model (deepcopy, pickling) carry inert hooks."""

import weakref

import torch

from ._control import BIT, PARAM_KINDS
from ._sharded import is_dtensor

# PyTorch 1.x keeps a tensor's hook dict on the grad_fn it had at the first register_hook:
# after an in-place op, a second hook would see the gradient of the op before it.
_OLD_TENSOR_HOOKS = int(torch.__version__.split(".")[0]) < 2
_ACTIVATION, _GRADIENT = BIT["activation"], BIT["gradient"]


def _inert(*args, **kwargs):
    return None


def _make_inert():
    return _inert


class Hook:
    """A hook that copies of the model (deepcopy, pickling) carry as a no-op."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, *args):
        return self.fn(*args)

    def __reduce__(self):
        return (_make_inert, ())

    def __deepcopy__(self, memo):
        return _inert


class GradientHook:
    """The hook on one module output's gradient (Tensor.register_hook), for every module that
    returned that tensor unchanged (a container's output is its last child's): one registration
    where each module's was torch's handle, dict and weak reference a step. `target` is the
    first module's (module, call, index, capture, grad_op), `more` a list of the others' or None
    (no list of its own for the common case: one more object the garbage collector would follow
    from the forward pass to the backward); each one's gradient op changes what the next one
    sees, as separate hooks would. A no-op in copies of the model."""

    __slots__ = ("hooks", "target", "more")

    def __init__(self, hooks, target):
        self.hooks, self.target, self.more = hooks, target, None

    def join(self, target):
        """Another module's target, after the ones already here."""
        if self.more is None:
            self.more = [target]
        else:
            self.more.append(target)

    def __call__(self, grad):
        owner = self.hooks._live_owner()
        if owner is None or grad is None:
            return None
        changed = None
        try:
            for module, call, index, capture, grad_op in ((self.target,) if self.more is None
                                                          else [self.target] + self.more):
                if capture:
                    owner.capture(module, call, "gradient", index, grad)
                if grad_op:
                    grad = changed = _changed_gradient(grad, grad_op)
        except Exception as exc:
            owner.fail(exc)
            return None
        return changed

    def __reduce__(self):
        return (_make_inert, ())

    def __deepcopy__(self, memo):
        return _inert


def _changed_gradient(grad, grad_op):
    kind, value = grad_op
    if kind == "clamp":
        return grad.clamp(-value, value)
    if kind == "scale":
        return grad * value
    return torch.zeros_like(grad)


def tensors_of(value, out):
    """Tensors of a module's input or output, depth first, as HookScope numbers them."""
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            tensors_of(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            tensors_of(item, out)
    return out


def module_entries(modules, type_name=lambda path, module: type(module).__name__, counted=lambda name, p: True):
    """The hello's modules for named_modules() `modules`: path, type, own and total parameters,
    and the tied parameters each shares with the module that holds it first. `counted(name, p)`
    says whether a tensor counts as a parameter (a checkpoint's buffers do not)."""
    entries = []
    first_name = {}  # a parameter's name where it first appears: a tied one appears twice
    for path, module in modules:
        own, shared = 0, []
        for name, p in module.named_parameters(recurse=False):
            full = path + "." + name if path else name
            if id(p) in first_name:
                shared.append([full, first_name[id(p)]])
            else:
                first_name[id(p)] = full
            own += p.numel() if counted(full, p) else 0
        # PyTorch's own count: parameters() yields each tensor once, tied or not.
        prefix = path + "." if path else ""
        entry = {"path": path, "type": type_name(path, module), "params": own,
                 "total": sum(p.numel() for name, p in module.named_parameters() if counted(prefix + name, p))}
        if shared:
            entry["shared"] = shared
        entries.append(entry)
    return entries


def relative_update(after, before):
    """(after - before) / |before|, 1 in place of a zero norm: on the device, without reading the
    norm back (that would wait for a GPU)."""
    norm = before.norm()
    return (after - before) / torch.where(norm > 0, norm, torch.ones_like(norm))


def shape_text(t):
    return "x".join(str(d) for d in t.shape)


class ModelHooks:
    """The hooks on one model's modules and its optimizer."""

    def __init__(self, owner, modules, optimizer, keep_graph):
        self._owner = weakref.ref(owner)
        self.modules = modules           # named_modules() list
        self.index = {path: i for i, (path, _) in enumerate(modules)}
        self.flags = [0] * len(modules)
        self.grad_ops = {}               # module index -> ("clamp"|"scale"|"zero", value)
        self.out_ops = {}                # module index -> "zero" | "mean"
        self._keep_graph = keep_graph    # a zeroed output stays on the graph (DDP needs every gradient)
        self._handles = {}               # module index -> hook handles
        self._probe_handles = []
        self.probe = {}                  # module index -> output shapes per call (first step)
        self._calls = [0] * len(modules)
        self._current_call = {}
        self._optimizer = optimizer
        self._optimizer_handles = []
        self._wrapped_step = None
        self._update_before = []
        self._last_hooked = None         # the last output hooked: (weak reference, version, GradientHook, hooks on it)

    # ------------------------------------------------------------ modules

    def apply(self, flags, grad_ops, out_ops):
        """Installs what these settings need and removes what they no longer do."""
        self.flags, self.grad_ops, self.out_ops = flags, grad_ops, out_ops
        for i, (_, module) in enumerate(self.modules):
            wanted_forward = bool(flags[i] & (BIT["activation"] | BIT["gradient"])) or i in grad_ops or i in out_ops
            wanted_input = bool(flags[i] & BIT["input"])
            for handle in self._handles.pop(i, ()):
                handle.remove()
            new = []
            if wanted_input:
                new.append(module.register_forward_pre_hook(Hook(self._pre_hook(i))))
            if wanted_forward or wanted_input:
                new.append(module.register_forward_hook(Hook(self._forward_hook(i))))
            if new:
                self._handles[i] = new

    def install_probe(self, first_step):
        """Records every module's output shapes while `first_step()` is true."""
        def probe(i):
            def hook(module, inputs, output):
                if first_step():
                    self.probe.setdefault(i, []).append([shape_text(t) for t in tensors_of(output, [])])
            return hook
        self._probe_handles = [m.register_forward_hook(Hook(probe(i))) for i, (_, m) in enumerate(self.modules)]

    def take_probe(self):
        shapes = {str(i): calls for i, calls in self.probe.items()}
        for handle in self._probe_handles:
            handle.remove()
        self._probe_handles = []
        self.probe = {}
        return shapes

    def new_step(self):
        self._calls = [0] * len(self.modules)
        self._current_call = {}
        self._last_hooked = None

    def remove(self):
        for handles in self._handles.values():
            for handle in handles:
                handle.remove()
        self._handles.clear()
        self.take_probe()
        self._remove_optimizer_hooks()
        self._update_before = []

    def _next_call(self, i):
        call = self._current_call.pop(i, None)
        if call is None:
            call = self._calls[i]
            self._calls[i] += 1
        return call

    def _live_owner(self):
        owner = self._owner()
        return owner if owner is not None and owner.connected and not owner.suspended else None

    def _pre_hook(self, i):
        def pre_hook(module, inputs):
            owner = self._live_owner()
            if owner is None:
                return None
            try:
                call = self._calls[i]
                self._calls[i] += 1
                self._current_call[i] = call
                for index, t in enumerate(tensors_of(inputs, [])):
                    owner.capture(i, call, "input", index, t)
            except Exception as exc:
                owner.fail(exc)
            return None
        return pre_hook

    def _forward_hook(self, i):
        def forward_hook(module, inputs, output):
            owner = self._live_owner()
            if owner is None:
                return None
            try:
                call = self._next_call(i)
                flags = self.flags[i]
                grad_op = self.grad_ops.get(i)
                outputs = (output,) if type(output) is torch.Tensor else tensors_of(output, [])
                for index, t in enumerate(outputs):
                    if flags & _ACTIVATION:
                        owner.capture(i, call, "activation", index, t)
                    if (flags & _GRADIENT or grad_op) and t.requires_grad and torch.is_grad_enabled():
                        self._hook_gradient(t, i, call, index, bool(flags & _GRADIENT), grad_op)
                op = self.out_ops.get(i)
                if op and isinstance(output, torch.Tensor) and i != 0:
                    return self._intervene(op, output)
            except Exception as exc:
                owner.fail(exc)
            return None
        return forward_hook

    def _intervene(self, op, output):
        if op == "zero":
            if self._keep_graph and output.requires_grad:
                # Still on the graph (zero gradient upstream): DistributedDataParallel fails a
                # step whose parameters got no gradient at all.
                return torch.where(torch.zeros_like(output, dtype=torch.bool), output, torch.zeros_like(output))
            return torch.zeros_like(output)
        if output.is_floating_point():
            return output.mean() * torch.ones_like(output)
        return None

    def _hook_gradient(self, t, i, call, index, capture, grad_op):
        last = self._last_hooked
        version = t._version
        # The tensor the module before returned, unchanged, its hook still the last on it (a hook
        # someone registered since sees the gradient between the two): one hook for both.
        if last is not None and last[0]() is t and last[1] == version and len(t._backward_hooks or ()) == last[3]:
            last[2].join((i, call, index, capture, grad_op))
            return
        if _OLD_TENSOR_HOOKS and t._backward_hooks is not None and getattr(t, "_hookscope_fn", None) is not t.grad_fn:
            t._backward_hooks = None  # hook this tensor's current grad_fn, not the one before an in-place op
        hook = GradientHook(self, (i, call, index, capture, grad_op))
        t.register_hook(hook)
        if _OLD_TENSOR_HOOKS:
            t._hookscope_fn = t.grad_fn
        self._last_hooked = (weakref.ref(t), version, hook, len(t._backward_hooks or ()))

    # ------------------------------------------------------------ optimizer

    def set_optimizer(self, optimizer):
        """Parameter captures follow `optimizer` from now on (None: parameters_without_optimizer)."""
        self._remove_optimizer_hooks()
        self._optimizer = optimizer
        self.install_optimizer_hooks()

    def install_optimizer_hooks(self):
        opt = self._optimizer
        if opt is None:
            return
        if hasattr(opt, "register_step_pre_hook"):
            self._optimizer_handles = [opt.register_step_pre_hook(Hook(lambda o, a, k: self.before_update())),
                                       opt.register_step_post_hook(Hook(lambda o, a, k: self.after_update()))]
            return
        original = opt.step  # PyTorch 1.x has no optimizer step hooks: wrap this instance's step
        ref = weakref.ref(self)

        def step(*args, **kwargs):
            me = ref()
            if me is not None:
                me.before_update()
            result = original(*args, **kwargs)
            if me is not None:
                me.after_update()
            return result
        opt.step = step
        self._wrapped_step = original

    def _remove_optimizer_hooks(self):
        for handle in self._optimizer_handles:
            handle.remove()
        self._optimizer_handles = []
        if self._wrapped_step is not None:
            try:
                del self._optimizer.step  # back to the class's method
            except AttributeError:
                pass
            self._wrapped_step = None

    def wants_parameters(self):
        return any(f & (BIT["param"] | BIT["param_grad"]) for f in self.flags)

    def _owned_parameters(self, bits):
        for i, (path, module) in enumerate(self.modules):
            if self.flags[i] & bits:
                for pname, p in module.named_parameters(recurse=False):
                    yield i, (path + "." + pname if path else pname), p

    def before_update(self):
        owner = self._live_owner()
        if owner is None:
            return
        try:
            with owner.lock, torch.no_grad():
                for i, name, p in self._owned_parameters(PARAM_KINDS):
                    if self.flags[i] & BIT["param"]:
                        owner.capture(name, 0, "param", 0, p)
                    if self.flags[i] & BIT["param_grad"] and p.grad is not None:
                        owner.capture(name, 0, "param_grad", 0, p.grad)
                    if self.flags[i] & BIT["update"]:
                        self._update_before.append((name, p, p.detach().clone()))
        except Exception as exc:
            owner.fail(exc)

    def after_update(self):
        owner = self._live_owner()
        if owner is None:
            return
        try:
            with owner.lock, torch.no_grad():
                for name, p, before in self._update_before:
                    if is_dtensor(p):  # its norm is the whole parameter's: from the step's collective
                        owner.capture_update(name, p, before)
                        continue
                    owner.capture(name, 0, "update", 0, relative_update(p.detach(), before))
                self._update_before = []
        except Exception as exc:
            owner.fail(exc)

    def parameters_without_optimizer(self):
        """Parameters as they are at the end of the step, when attach() was given no optimizer."""
        self.before_update()
        self._update_before = []
