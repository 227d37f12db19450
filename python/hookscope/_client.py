"""The training-script side of HookScope: hooks that ship captured tensors to a viewer.

Everything here runs inside someone's training run, so it never raises into their code
(except from ``step()`` when the viewer stops the run on purpose), never blocks a step
unless the viewer paused it or a breakpoint is armed, and keeps every queue bounded.
"""

import fcntl
import json
import mmap
import os
import platform
import select
import socket
import struct
import sys
import threading
import time
import warnings
import weakref

import torch

from . import _wire
from ._address import default_address, parse_address

KINDS = ("activation", "input", "gradient", "param", "param_grad", "update")
_BIT = {name: 1 << i for i, name in enumerate(KINDS)}
_PARAM_KINDS = _BIT["param"] | _BIT["param_grad"] | _BIT["update"]
_DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
    torch.bfloat16: "bfloat16", torch.int64: "int64", torch.int32: "int32", torch.int16: "int16",
    torch.int8: "int8", torch.uint8: "uint8", torch.bool: "bool",
}
# PyTorch 1.x keeps a tensor's hook dict on the grad_fn it had at the first register_hook:
# after an in-place op, a second hook would see the gradient of the op before it.
_OLD_TENSOR_HOOKS = int(torch.__version__.split(".")[0]) < 2
_RING_HEADER = 64
_DEFAULT_BUFFER_MIB = 256
_OUTBOX_CAPTURE_LIMIT = 64 << 20   # inline captures wait in at most this much memory
_OUTBOX_HARD_LIMIT = 256 << 20     # a viewer this far behind is treated as gone
_HANDSHAKE_SECONDS = 10.0
_BATCH_BYTES = 16 << 10            # captures' messages leave in batches of about this size

_live = weakref.WeakSet()


class Stopped(RuntimeError):
    """HookScope ended the run: a breakpoint the recorder stops on, or Stop in the window."""


def _after_fork_in_child():
    # A forked child (a DataLoader worker) must not hold the connection open or send on it.
    for attached in list(_live):
        attached._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _inert(*args, **kwargs):
    return None


def _make_inert():
    return _inert


class _Hook:
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


def _tensors(value, out):
    """Tensors of a module's input or output, depth first, as HookScope numbers them."""
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for item in value:
            _tensors(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, out)
    return out


def _shape_text(t):
    return "x".join(str(d) for d in t.shape)


class _Ring:
    """A shared-memory ring of captured tensor bytes; the viewer reports how far it has read."""

    def __init__(self, size):
        self.fd = os.memfd_create("hookscope-captures", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, size)
            # The viewer maps it too: sealed, so this side can never shrink it under the viewer.
            fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
            self.map = mmap.mmap(self.fd, size)
        except BaseException:
            os.close(self.fd)
            raise
        self.size = size
        self.capacity = size - _RING_HEADER
        self.bytes = torch.frombuffer(self.map, dtype=torch.uint8)
        self.head = 0  # absolute position after the newest block

    def consumed(self):
        return struct.unpack_from("<Q", self.map, 0)[0]

    def reserve(self, nbytes):
        """(offset in the map, absolute end) for a block, or None when the viewer is that far behind."""
        need = (nbytes + 63) & ~63
        if need > self.capacity:
            return None
        phys = self.head % self.capacity
        start = self.head
        if phys + need > self.capacity:  # blocks never wrap: skip to the start
            start += self.capacity - phys
            phys = 0
        end = start + need
        if end - self.consumed() > self.capacity:
            return None
        self.head = end
        return _RING_HEADER + phys, end

    def close_fd(self):
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def _unwrap(model):
    """The user's module inside DistributedDataParallel or DataParallel, so paths have no `module.`."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers):
        model = model.module
    return model


def _distributed(job):
    """(rank, world size, job) of this process in a torch.distributed job, or None alone."""
    rank = world = None
    try:
        import torch.distributed as dist
        if dist.is_available() and dist.is_initialized():
            rank, world = dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    if rank is None and "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun, before init
        try:
            rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except ValueError:
            rank = world = None
    if rank is None or world is None or world < 1 or not 0 <= rank < world:
        return None
    if job is None:
        master = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        job = "%s:%s" % master if all(master) else ""
        run = os.environ.get("TORCHELASTIC_RUN_ID")
        if run and run != "none":
            job = (job + "/" if job else "") + run
    return rank, world, str(job)


def _replicated(model):
    """Whether every rank holds the whole model (DDP), not a shard of it (FSDP, DTensor)."""
    for module in model.modules():
        if "FullyShardedDataParallel" in type(module).__name__ or type(module).__name__.startswith("FSDP"):
            return False
    return not any(type(p).__name__ == "DTensor" for p in model.parameters())


def attach(model, optimizer=None, address=None, name=None, wait=False, timeout=None, buffer_mib=None, job=None):
    """Connects `model` (and optionally its optimizer) to a HookScope window or recorder.

    address: ``unix:PATH`` or ``tcp://HOST:PORT?token=T``; default ``$HOOKSCOPE_ADDRESS``, else
    the address HookScope listens on by default. With no viewer listening, this warns once and
    training runs unhooked; ``wait=True`` waits for one instead (``timeout`` seconds, or forever).

    In a torch.distributed job every rank calls this the same way: the rank and world size come
    from torch.distributed (or torchrun's RANK and WORLD_SIZE), the job from MASTER_ADDR and
    MASTER_PORT unless ``job`` names it. A DistributedDataParallel model is attached through its
    module, so paths are the model's own.
    """
    return Attached(model, optimizer=optimizer, address=address, name=name, wait=wait,
                    timeout=timeout, buffer_mib=buffer_mib, job=job)


class Attached:
    """A model attached to HookScope. Call ``step(loss)`` once per training step."""

    def __init__(self, model, optimizer=None, address=None, name=None, wait=False, timeout=None,
                 buffer_mib=None, job=None):
        model = _unwrap(model)
        self._model = model
        self._dist = _distributed(job)
        # In a job, each step's end carries (sum, norm) of every parameter and gradient: rank_divergence.
        self._prints = list(model.named_parameters()) if self._dist and self._dist[1] > 1 \
            and _replicated(model) else []
        self._optimizer = optimizer
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._state = "off"  # "on" while connected; "off" without a viewer; "closed" after
        self._sock = None
        self._ring = None
        self._reader = _wire.FrameReader()
        self._outbox = bytearray()
        self._step = 0
        self._modules = list(model.named_modules())
        self._index = {path: i for i, (path, _) in enumerate(self._modules)}
        self._flags = [0] * len(self._modules)
        self._handles = {}          # module index -> hook handles
        self._probe_handles = []
        self._probe = {}            # module index -> output shapes per call (first step)
        self._grad_ops = {}         # module index -> ("clamp"|"scale"|"zero", value)
        self._out_ops = {}          # module index -> "zero" | "mean"
        self._pending = None        # hook settings to apply at the next step boundary
        self._calls = [0] * len(self._modules)
        self._current_call = {}
        self._deferred = []         # captures of device tensors, copied at the end of the step
        self._defer_all = False     # tests: take the device path with CPU tensors
        self._update_before = []
        self._dropped = 0
        self._dropped_bytes = 0
        self.bytes_sent = 0     # on the socket, frames included
        self.bytes_shared = 0   # tensor bytes through shared memory
        self._unsent_shared = 0
        self._paused = False
        self._budget = None
        self._sync = False
        self._acked = -1
        self._stop_reason = None
        self._warned = set()
        self.address = address or os.environ.get("HOOKSCOPE_ADDRESS") or default_address()
        self.name = name or os.path.basename(sys.argv[0] or "python") or "python"
        _live.add(self)
        self._connect(wait, timeout, buffer_mib)
        if self._state == "on":
            self._install_optimizer_hooks()
            self._install_probe()
            ref = weakref.ref(self)

            def close_at_exit():
                me = ref()
                if me is not None:
                    me.close()
            import atexit
            atexit.register(close_at_exit)

    # ---------------------------------------------------------------- public

    @property
    def connected(self):
        """Whether a viewer is attached and hooks are live."""
        return self._state == "on" and os.getpid() == self._pid

    def step(self, loss=None, **scalars):
        """Ends a training step: sends the loss and scalars, and obeys pause, step and break."""
        if not self.connected:
            return
        with self._lock:
            try:
                self._end_step(loss, scalars)
            except Stopped:
                raise
            except Exception as exc:  # never let HookScope end a training run by accident
                self._fail(exc)

    def close(self):
        """Removes every hook and says goodbye to the viewer; training goes on unhooked."""
        if self._state != "on" or os.getpid() != self._pid:
            return
        with self._lock:
            try:
                self._send({"type": "bye", "steps": self._step})
                self._flush(deadline=time.monotonic() + 5.0)
            except Exception:
                pass
            self._detach(None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # ---------------------------------------------------------------- connection

    def _warn_once(self, key, message):
        if key in self._warned:
            return
        self._warned.add(key)
        warnings.warn("HookScope: " + message, RuntimeWarning, stacklevel=3)

    def _connect(self, wait, timeout, buffer_mib):
        try:
            kind, where, token = parse_address(self.address)
        except ValueError as exc:
            self._warn_once("address", "%s; training runs without HookScope" % exc)
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            sock = None
            try:
                sock = socket.socket(socket.AF_UNIX if kind == "unix" else socket.AF_INET, socket.SOCK_STREAM)
                sock.settimeout(_HANDSHAKE_SECONDS)
                sock.connect(where)
                break
            except OSError as exc:
                if sock is not None:
                    sock.close()
                if wait and (deadline is None or time.monotonic() < deadline):
                    time.sleep(0.25)
                    continue
                self._warn_once("connect", "no viewer listens at %s (%s); training runs without HookScope. "
                                "Open File > Attach to a training script in HookScope, or run "
                                "`hookscope-cli record --out DIR`, then set HOOKSCOPE_ADDRESS to the address "
                                "it prints" % (self.address, exc.strerror or exc))
                return
        try:
            if kind == "unix":
                mib = buffer_mib or int(os.environ.get("HOOKSCOPE_BUFFER_MIB", _DEFAULT_BUFFER_MIB))
                try:
                    self._ring = _Ring(max(1, mib) << 20)
                except (OSError, AttributeError, ValueError):
                    self._ring = None  # no memfd here: tensors travel inline
            hello = self._hello(token)
            frame = _wire.json_frame(hello)
            if self._ring is not None:
                socket.send_fds(sock, [frame], [self._ring.fd])
                self._ring.close_fd()
            else:
                sock.sendall(frame)
            messages = self._await_welcome(sock)
            welcome = messages[0]
        except (OSError, _wire.ProtocolError, ValueError) as exc:
            sock.close()
            self._ring = None
            self._warn_once("handshake", "the viewer at %s did not accept this script (%s); training runs "
                            "without HookScope" % (self.address, exc))
            return
        if welcome.get("type") == "error":
            sock.close()
            self._ring = None
            self._warn_once("refused", "the viewer at %s refused this script: %s; training runs without "
                            "HookScope" % (self.address, welcome.get("message", "no reason given")))
            return
        sock.setblocking(False)
        self._sock = sock
        self._state = "on"
        for message in messages:  # in order: a change of hooks after the welcome wins
            self._handle(message)
        self._apply_pending()

    def _hello(self, token):
        modules = []
        for path, module in self._modules:
            own = sum(p.numel() for p in module.parameters(recurse=False))
            modules.append({"path": path, "type": type(module).__name__, "params": own})
        try:
            first = next(self._model.parameters())
            device, dtype = str(first.device), _DTYPES.get(first.dtype, str(first.dtype))
        except StopIteration:
            device, dtype = "cpu", "float32"
        hello = {
            "type": "hello", "protocol": _wire.PROTOCOL_VERSION, "name": self.name, "pid": self._pid,
            "host": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
            "device": device, "dtype": dtype, "modules": modules,
            "optimizer": type(self._optimizer).__name__ if self._optimizer is not None else None,
            "shm": self._ring.size if self._ring is not None else 0,
        }
        if self._dist is not None:
            rank, world, job = self._dist
            hello["dist"] = {"rank": rank, "world_size": world, "job": job}
            if self._prints:
                hello["parameters"] = [name for name, _ in self._prints]
        if token:
            hello["token"] = token
        return hello

    def _await_welcome(self, sock):
        deadline = time.monotonic() + _HANDSHAKE_SECONDS
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise OSError("no answer within %.0f s" % _HANDSHAKE_SECONDS)
            sock.settimeout(remaining)
            data = sock.recv(65536)
            if not data:
                raise OSError("the viewer closed the connection")
            self._reader.feed(data)
            messages = self._reader.messages()
            if messages:
                return messages  # the welcome (or an error), and what followed it

    def _forget_in_child(self):
        self._state = "closed"
        if self._sock is not None:
            try:
                self._sock.close()  # the child's copy only: the parent's connection stays
            except OSError:
                pass
            self._sock = None

    def _detach(self, reason):
        """Removes every hook and closes the connection; `reason` is warned about once."""
        for handles in self._handles.values():
            for handle in handles:
                handle.remove()
        self._handles.clear()
        for handle in self._probe_handles:
            handle.remove()
        self._probe_handles = []
        self._remove_optimizer_hooks()
        self._deferred = []
        self._update_before = []
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
        if self._ring is not None:
            self._ring.bytes = None
            try:
                self._ring.map.close()
            except BufferError:
                pass  # a capture still holds a view; the map goes with it
            self._ring = None
        self._state = "closed"
        if reason:
            self._warn_once("detached", reason + "; hooks removed, training goes on without HookScope")

    def _fail(self, exc):
        self._detach("an error inside HookScope's hooks (%s: %s)" % (type(exc).__name__, exc))

    # ---------------------------------------------------------------- sending

    def _send(self, message):
        frame = _wire.json_frame(message)
        self.bytes_sent += len(frame)
        self._outbox += frame
        self._flush()

    def _flush(self, deadline=None):
        """Sends what the socket takes now; with a deadline, waits until then for the rest."""
        self._unsent_shared = 0
        while self._outbox and self._sock is not None:
            try:
                sent = self._sock.send(self._outbox)
                del self._outbox[:sent]
                continue
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as exc:
                self._detach("the viewer went away (%s)" % (exc.strerror or exc))
                return
            if deadline is None:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            select.select([], [self._sock], [], remaining)
        if len(self._outbox) > _OUTBOX_HARD_LIMIT:
            self._detach("the viewer stopped reading (%d MiB waiting)" % (len(self._outbox) >> 20))

    def _receive(self, timeout=0.0):
        """Handles what the viewer sent; waits up to `timeout` seconds (None: until something comes)."""
        if self._sock is None:
            return
        wants_write = [self._sock] if self._outbox else []
        readable, writable, _ = select.select([self._sock], wants_write, [], timeout)
        if writable:
            self._flush()
        if not readable or self._sock is None:
            return
        try:
            data = self._sock.recv(1 << 16)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._detach("the viewer went away (%s)" % (exc.strerror or exc))
            return
        if not data:
            self._detach("the viewer closed the connection")
            return
        self._reader.feed(data)
        try:
            messages = self._reader.messages()
        except _wire.ProtocolError as exc:
            self._detach("the viewer sent a bad message (%s)" % exc)
            return
        for message in messages:
            self._handle(message)

    def _handle(self, message):
        kind = message.get("type")
        if kind in ("welcome", "hooks"):
            if "hooks" in message or "gradient" in message or "output" in message:
                self._pending = message
            self._sync = bool(message.get("sync", self._sync))
            if message.get("paused"):
                self._paused = True
        elif kind == "pause":
            self._paused = True
            self._budget = None
        elif kind == "run":
            self._paused = False
            self._budget = None
        elif kind == "step":
            self._paused = False
            self._budget = max(1, int(message.get("count", 1)))
        elif kind == "sync":
            self._sync = bool(message.get("on"))
        elif kind == "ack":
            self._acked = max(self._acked, int(message.get("step", -1)))
        elif kind == "stop":
            self._stop_reason = str(message.get("reason") or "stopped by HookScope")
        elif kind == "error":
            self._detach("the viewer ended the connection: %s" % message.get("message", "no reason given"))
        # Unknown messages are ignored: a newer viewer may send more.

    # ---------------------------------------------------------------- hooks

    def _apply_pending(self):
        settings, self._pending = self._pending, None
        if settings is None:
            return
        flags = [0] * len(self._modules)
        for path, kinds in (settings.get("hooks") or {}).items():
            i = self._index.get(path)
            if i is None:
                continue
            for kind in kinds:
                flags[i] |= _BIT.get(kind, 0)
        self._grad_ops = {}
        for path, op in (settings.get("gradient") or {}).items():
            i = self._index.get(path)
            if i is not None and isinstance(op, list) and op and op[0] in ("clamp", "scale", "zero"):
                self._grad_ops[i] = (op[0], float(op[1]) if len(op) > 1 else 0.0)
        self._out_ops = {}
        for path, op in (settings.get("output") or {}).items():
            i = self._index.get(path)
            if i is not None and op in ("zero", "mean"):
                self._out_ops[i] = op
        self._flags = flags
        for i, (_, module) in enumerate(self._modules):
            wanted_forward = bool(flags[i] & (_BIT["activation"] | _BIT["gradient"])) or i in self._grad_ops \
                or i in self._out_ops
            wanted_input = bool(flags[i] & _BIT["input"])
            handles = self._handles.pop(i, None)
            if handles:
                for handle in handles:
                    handle.remove()
            new = []
            if wanted_input:
                new.append(module.register_forward_pre_hook(_Hook(self._make_pre_hook(i))))
            if wanted_forward or wanted_input:
                new.append(module.register_forward_hook(_Hook(self._make_forward_hook(i))))
            if new:
                self._handles[i] = new

    def _install_probe(self):
        def probe(i):
            def hook(module, inputs, output):
                if self._step == 0 and self.connected:
                    self._probe.setdefault(i, []).append([_shape_text(t) for t in _tensors(output, [])])
            return hook
        self._probe_handles = [m.register_forward_hook(_Hook(probe(i))) for i, (_, m) in enumerate(self._modules)]

    def _next_call(self, i):
        call = self._current_call.pop(i, None)
        if call is None:
            call = self._calls[i]
            self._calls[i] += 1
        return call

    def _make_pre_hook(self, i):
        ref = weakref.ref(self)

        def pre_hook(module, inputs):
            me = ref()
            if me is None or not me.connected:
                return None
            try:
                call = me._calls[i]
                me._calls[i] += 1
                me._current_call[i] = call
                for index, t in enumerate(_tensors(inputs, [])):
                    me._capture(i, call, "input", index, t)
            except Exception as exc:
                me._fail(exc)
            return None
        return pre_hook

    def _make_forward_hook(self, i):
        ref = weakref.ref(self)

        def forward_hook(module, inputs, output):
            me = ref()
            if me is None or not me.connected:
                return None
            try:
                call = me._next_call(i)
                flags = me._flags[i]
                grad_op = me._grad_ops.get(i)
                for index, t in enumerate(_tensors(output, [])):
                    if flags & _BIT["activation"]:
                        me._capture(i, call, "activation", index, t)
                    if (flags & _BIT["gradient"] or grad_op) and t.requires_grad and torch.is_grad_enabled():
                        me._hook_gradient(t, i, call, index, bool(flags & _BIT["gradient"]), grad_op)
                op = me._out_ops.get(i)
                if op and isinstance(output, torch.Tensor) and i != 0:
                    if op == "zero":
                        if me._dist is not None and me._dist[1] > 1 and output.requires_grad:
                            # Still on the graph (zero gradient upstream): DistributedDataParallel
                            # fails a step whose parameters got no gradient at all.
                            return torch.where(torch.zeros_like(output, dtype=torch.bool), output,
                                               torch.zeros_like(output))
                        return torch.zeros_like(output)
                    if output.is_floating_point():
                        return output.mean() * torch.ones_like(output)
            except Exception as exc:
                me._fail(exc)
            return None
        return forward_hook

    def _hook_gradient(self, t, i, call, index, capture, grad_op):
        ref = weakref.ref(self)

        def gradient_hook(grad):
            me = ref()
            if me is None or not me.connected or grad is None:
                return None
            try:
                if capture:
                    me._capture(i, call, "gradient", index, grad)
                if grad_op:
                    kind, value = grad_op
                    if kind == "clamp":
                        return grad.clamp(-value, value)
                    if kind == "scale":
                        return grad * value
                    return torch.zeros_like(grad)
            except Exception as exc:
                me._fail(exc)
            return None

        if _OLD_TENSOR_HOOKS and t._backward_hooks is not None and getattr(t, "_hookscope_fn", None) is not t.grad_fn:
            t._backward_hooks = None  # hook this tensor's current grad_fn, not the one before an in-place op
        t.register_hook(_Hook(gradient_hook))
        if _OLD_TENSOR_HOOKS:
            t._hookscope_fn = t.grad_fn

    # ---------------------------------------------------------------- optimizer

    def _install_optimizer_hooks(self):
        self._optimizer_handles = []
        self._wrapped_step = None
        opt = self._optimizer
        if opt is None:
            return
        if hasattr(opt, "register_step_pre_hook"):
            self._optimizer_handles = [opt.register_step_pre_hook(_Hook(lambda o, a, k: self._before_update())),
                                       opt.register_step_post_hook(_Hook(lambda o, a, k: self._after_update()))]
            return
        original = opt.step  # PyTorch 1.x has no optimizer step hooks: wrap this instance's step
        ref = weakref.ref(self)

        def step(*args, **kwargs):
            me = ref()
            if me is not None:
                me._before_update()
            result = original(*args, **kwargs)
            if me is not None:
                me._after_update()
            return result
        opt.step = step
        self._wrapped_step = original

    def _remove_optimizer_hooks(self):
        for handle in getattr(self, "_optimizer_handles", []):
            handle.remove()
        self._optimizer_handles = []
        if getattr(self, "_wrapped_step", None) is not None:
            try:
                del self._optimizer.step  # back to the class's method
            except AttributeError:
                pass
            self._wrapped_step = None

    def _owned_parameters(self, bits):
        for i, (path, module) in enumerate(self._modules):
            if self._flags[i] & bits:
                for pname, p in module.named_parameters(recurse=False):
                    yield i, (path + "." + pname if path else pname), p

    def _before_update(self):
        if not self.connected:
            return
        try:
            with self._lock, torch.no_grad():
                for i, name, p in self._owned_parameters(_PARAM_KINDS):
                    if self._flags[i] & _BIT["param"]:
                        self._capture(name, 0, "param", 0, p)
                    if self._flags[i] & _BIT["param_grad"] and p.grad is not None:
                        self._capture(name, 0, "param_grad", 0, p.grad)
                    if self._flags[i] & _BIT["update"]:
                        self._update_before.append((name, p, p.detach().clone()))
        except Exception as exc:
            self._fail(exc)

    def _after_update(self):
        if not self.connected:
            return
        try:
            with self._lock, torch.no_grad():
                for name, p, before in self._update_before:
                    # On the device, without reading the norm back (that would wait for a GPU).
                    norm = before.norm()
                    norm = torch.where(norm > 0, norm, torch.ones_like(norm))
                    self._capture(name, 0, "update", 0, (p.detach() - before) / norm)
                self._update_before = []
        except Exception as exc:
            self._fail(exc)

    # ---------------------------------------------------------------- captures

    def _capture(self, series, call, kind, index, tensor):
        """Ships one tensor's values; `series` is a module index or a parameter name."""
        t = tensor.detach()
        dtype = _DTYPES.get(t.dtype)
        if dtype is None or t.layout != torch.strided:
            self._warn_once(("dtype", str(t.dtype)), "tensors of %s (%s) are not captured" % (t.dtype, t.layout))
            return
        # Written by hand: json.dumps of a dict costs more than the rest of a capture.
        where = '"module":%d' % series if isinstance(series, int) else '"param":' + json.dumps(series)
        header = '{"type":"capture","step":%d,%s,"call":%d,"kind":"%s","index":%d,"dtype":"%s","shape":[%s],' \
                 '"device":"%s"' % (self._step, where, call, kind, index, dtype, ",".join(map(str, t.shape)), t.device)
        with self._lock:
            if t.device.type != "cpu" or self._defer_all:
                # One copy per tensor now, started without waiting; one wait at the end of the step.
                staged = torch.empty(t.shape, dtype=t.dtype, pin_memory=torch.cuda.is_available())
                staged.copy_(t, non_blocking=True)
                self._deferred.append((header, staged))
                return
            self._ship(header, t)

    def _drop(self, nbytes):
        self._dropped += 1
        self._dropped_bytes += nbytes

    def _queue(self, header_text, data=None):
        """Queues a capture's frames; they leave in batches, or with the step's end."""
        frame = _wire.text_frame(header_text)
        self.bytes_sent += len(frame)
        self._outbox += frame
        if data is not None:
            self._outbox += _wire.data_header(len(data))
            self._outbox += data
            self.bytes_sent += _wire.HEADER.size + len(data)
        if len(self._outbox) >= _BATCH_BYTES:
            self._flush()

    def _ship(self, header, t):
        nbytes = t.numel() * t.element_size()
        if nbytes == 0:
            self._queue(header + ',"bytes":0}')
            return
        if self._ring is not None:
            place = self._ring.reserve(nbytes)
            if place is None:
                self._drop(nbytes)
                return
            offset, end = place
            self._ring.bytes[offset:offset + nbytes].view(t.dtype).view(t.shape).copy_(t)
            self.bytes_shared += nbytes
            self._unsent_shared += nbytes
            self._queue(header + ',"bytes":%d,"offset":%d,"end":%d}' % (nbytes, offset, end))
            if self._unsent_shared * 8 > self._ring.capacity:  # the viewer must see it to release it
                self._flush()
            return
        if len(self._outbox) + nbytes > _OUTBOX_CAPTURE_LIMIT:
            self._drop(nbytes)
            return
        import ctypes
        data = t.contiguous()
        self._queue(header + ',"bytes":%d,"inline":true}' % nbytes, ctypes.string_at(data.data_ptr(), nbytes))

    def _ship_deferred(self):
        if not self._deferred:
            return
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        deferred, self._deferred = self._deferred, []
        for header, staged in deferred:
            self._ship(header, staged)

    # ---------------------------------------------------------------- step

    def _fingerprint(self):
        """(sum, L2 norm) in float64 of every parameter and of its gradient, read back at once."""
        def pair(t):
            t = t.detach()
            return torch.stack([t.sum(dtype=torch.float64), torch.linalg.vector_norm(t, dtype=torch.float64)])

        with torch.no_grad():
            grads = [p.grad for _, p in self._prints]
            rows = [pair(p) for _, p in self._prints] + [pair(g) for g in grads if g is not None]
            rows = torch.stack(rows).cpu().tolist() if rows else []  # one wait for a GPU, not one per tensor
        grad_rows = iter(rows[len(self._prints):])
        encode = _wire.encode_number
        return {"params": [[encode(s), encode(n)] for s, n in rows[:len(self._prints)]],
                "grads": [[encode(v) for v in next(grad_rows)] if g is not None else None for g in grads]}

    def _end_step(self, loss, scalars):
        if self._optimizer is None and any(f & (_BIT["param"] | _BIT["param_grad"]) for f in self._flags):
            self._before_update()  # no optimizer given: parameters as they are at the end of the step
            self._update_before = []
        self._ship_deferred()
        values = {}
        if loss is not None:
            values["loss"] = _wire.encode_number(loss.detach().float().item() if isinstance(loss, torch.Tensor) else loss)
        if self._optimizer is not None and self._optimizer.param_groups:
            values.setdefault("lr", _wire.encode_number(self._optimizer.param_groups[0].get("lr", 0.0)))
        for key, value in scalars.items():
            if isinstance(value, torch.Tensor):
                value = value.detach().float().item()
            try:
                values[str(key)] = _wire.encode_number(value)
            except (TypeError, ValueError):
                self._warn_once(("scalar", key), "step(%s=...) is not a number and is not sent" % key)
        message = {"type": "step", "step": self._step, "scalars": values}
        if self._prints:
            message["fingerprint"] = self._fingerprint()
        if self._dropped:
            message["dropped"] = {"captures": self._dropped, "bytes": self._dropped_bytes}
            self._dropped = self._dropped_bytes = 0
        if self._step == 0:
            message["shapes"] = {str(i): calls for i, calls in self._probe.items()}
            for handle in self._probe_handles:
                handle.remove()
            self._probe_handles = []
            self._probe = {}
        done = self._step
        self._send(message)
        self._step += 1
        self._calls = [0] * len(self._modules)
        self._current_call = {}
        self._receive(0.0)
        while self.connected and self._sync and self._acked < done and self._stop_reason is None:
            self._receive(None)
        if self._budget is not None:
            self._budget -= 1
            if self._budget <= 0:
                self._budget = None
                self._paused = True
        if self.connected and self._paused and self._stop_reason is None:
            self._send({"type": "paused", "step": done})  # a job lines its ranks up on it
        while self.connected and self._paused and self._stop_reason is None:
            self._receive(None)
        if self._stop_reason is not None and self._state == "on":
            reason = self._stop_reason
            self._send({"type": "bye", "steps": self._step, "stopped": True})
            self._flush(deadline=time.monotonic() + 5.0)
            self._detach(None)
            raise Stopped(reason)
        self._apply_pending()
