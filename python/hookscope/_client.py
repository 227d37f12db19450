"""The training-script side of HookScope: `attach()` and the step loop.

Everything here runs inside someone's training run, so it never raises into their code
(except from ``step()`` when the viewer stops the run on purpose), never blocks a step
unless the viewer paused it or a breakpoint is armed, and keeps every queue bounded. Each
captured tensor becomes statistics where it lives (_stats); only those cross the wire.
"""

import atexit
import contextlib
import os
import platform
import sys
import threading
import time
import warnings
import weakref

import torch

from . import _wire
from ._address import default_address
from ._control import KINDS, Control
from ._hooks import ModelHooks, module_entries
from ._capture import DTYPES, CaptureSink
from ._sharded import ShardedStatistics, model_is_sharded
from ._stats import StepStatistics
from ._transport import Connection, Refused

_live = weakref.WeakSet()


class Stopped(RuntimeError):
    """HookScope ended the run: a breakpoint the recorder stops on, or Stop in the window."""


def _after_fork_in_child():
    # A forked child (a DataLoader worker) must not hold the connection open or send on it.
    for attached in list(_live):
        attached._forget_in_child()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


_FSDP1 = "FullyShardedDataParallel"
_WRAPPED = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module")  # FSDP1's and activation checkpointing's


def _unwrap(model):
    """The user's module inside DistributedDataParallel, DataParallel or FSDP1's
    FullyShardedDataParallel, so paths have no `module.`."""
    wrappers = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)
    while isinstance(model, wrappers) or type(model).__name__ == _FSDP1:
        model = model.module
    return model


def _named_modules(model):
    """named_modules() with the model's own paths: FSDP1's wrappers left out (each wrapped
    module keeps the wrapper's path) and their `_fsdp_wrapped_module.` taken out of paths."""
    out = []
    for path, module in model.named_modules():
        if type(module).__name__ == _FSDP1:
            continue
        out.append((".".join(part for part in path.split(".") if part not in _WRAPPED), module))
    return out


def _fsdp1_advice(model):
    """What to set where FSDP1 hides the parameters from HookScope, else None."""
    wrappers = [m for m in model.modules() if type(m).__name__ == _FSDP1]
    if not wrappers:
        return None
    if any(not getattr(m, "_use_orig_params", True) for m in wrappers):
        return ("FullyShardedDataParallel with use_orig_params=False flattens each wrapped module's parameters "
                "into one FlatParameter, so HookScope sees none of them: wrap with use_orig_params=True (or "
                "shard with fully_shard, FSDP2, for whole-tensor statistics); activations and gradients of "
                "modules are captured as usual")
    return ("FullyShardedDataParallel (FSDP1) keeps each parameter as a flat slice per rank: parameter captures "
            "are each rank's slice; shard with fully_shard (FSDP2) for whole-tensor statistics")


_EXIT_GRACE_S = 0.05     # where no step marked a backward: a short wait
_EXIT_WAIT_LIMIT_S = 2.0  # the longest the deterministic wait waits
_exit_wait = []


class _BackwardToken:
    """A value in the backward contexts' variable, whose weak reference says when the last copy
    of a context holding it is gone."""
    __slots__ = ("__weakref__",)


class _BackwardContexts:
    """Each backward() stores a copy of the Python contextvars context in PyTorch's thread-local
    state, which DDP's allreduce hands to gloo's work objects; a gloo worker thread can drop the
    last copy after the interpreter has begun to finalize, and the rank then aborts ("terminate
    called without an active exception") after a complete run, with or without HookScope. Each
    step() sets a fresh token in a context variable, so the next backward's copies hold it; at
    exit (atexit runs before finalization) the variable is cleared and the wait lasts until every
    token is gone, which is when gloo has let go of every backward's context (docs/distributed.md).
    Not only the last backward's: a gloo worker can wait for the GIL to drop an earlier step's
    context through the steps after it (small steps hand the GIL back before the worker wakes),
    and then drops it during finalization. No step at all: a short wait instead."""

    def __init__(self):
        import contextvars
        self._var = contextvars.ContextVar("hookscope_backward", default=None)
        self._refs = []
        self.waited_s = None

    def mark(self):
        token = _BackwardToken()
        self._var.set(token)
        self._refs = [ref for ref in self._refs if ref() is not None] + [weakref.ref(token)]

    def wait(self, limit=_EXIT_WAIT_LIMIT_S):
        started = time.monotonic()
        if not self._refs:
            time.sleep(_EXIT_GRACE_S)
        else:
            try:
                self._var.set(None)  # atexit runs in the main thread's context, the loop's
            except Exception:
                pass
            deadline = started + limit
            while any(r() is not None for r in self._refs) and time.monotonic() < deadline:
                time.sleep(0.001)
        self.waited_s = time.monotonic() - started


def _let_gloo_finish_at_exit():
    """In a multi-rank job, the wait at exit of _BackwardContexts, registered once; returns it."""
    if not _exit_wait:
        _exit_wait.append(_BackwardContexts())
        atexit.register(_exit_wait[0].wait)
    return _exit_wait[0]


def _process_group():
    """Whether this process is in an initialised torch.distributed process group."""
    try:
        import torch.distributed as dist
        return dist.is_available() and dist.is_initialized()
    except Exception:
        return False


def _distributed(job):
    """(rank, world size, job) of this process in a torch.distributed job, or None alone."""
    rank = world = None
    if _process_group():
        try:
            import torch.distributed as dist
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
        if _FSDP1 in type(module).__name__ or type(module).__name__.startswith("FSDP"):
            return False
    return not model_is_sharded(model)


def attach(model, optimizer=None, address=None, name=None, wait=False, timeout=None, job=None, buffer_mib=None):
    """Connects `model` (and optionally its optimizer) to a HookScope window or recorder.

    address: ``unix:PATH`` or ``tcp://HOST:PORT?token=T``; default ``$HOOKSCOPE_ADDRESS``, else
    the address HookScope listens on by default. With no viewer listening, this warns once and
    training runs unhooked; ``wait=True`` waits for one instead (``timeout`` seconds, or forever).

    In a torch.distributed job every rank calls this the same way: the rank and world size come
    from torch.distributed (or torchrun's RANK and WORLD_SIZE), the job from MASTER_ADDR and
    MASTER_PORT unless ``job`` names it. A DistributedDataParallel model is attached through its
    module, so paths are the model's own. (``buffer_mib`` is accepted for scripts written for
    protocol 1 and ignored: no tensor bytes leave the process any more.)
    """
    return Attached(model, optimizer=optimizer, address=address, name=name, wait=wait, timeout=timeout, job=job)


class Attached(CaptureSink):
    """A model attached to HookScope. Call ``step(loss)`` once per training step."""

    def __init__(self, model, optimizer=None, address=None, name=None, wait=False, timeout=None, job=None):
        fsdp1 = _fsdp1_advice(model)
        model = _unwrap(model)
        self._model = model
        self._dist = _distributed(job)
        self._backward_contexts = _let_gloo_finish_at_exit() if self._dist and self._dist[1] > 1 else None
        if self._backward_contexts is not None:
            self._backward_contexts.mark()  # the first step's backward holds a token too
        # In a job, each step's end carries (sum, norm) of every parameter and gradient: rank_divergence.
        self._prints = list(model.named_parameters()) if self._dist and self._dist[1] > 1 \
            and _replicated(model) else []
        self._optimizer = optimizer
        self._pid = os.getpid()
        self.lock = threading.RLock()
        self._state = "off"  # "on" while connected; "off" without a viewer; "closed" after
        self._step = 0
        self._control = Control()
        self._hooks = ModelHooks(self, _named_modules(model), optimizer,
                                 keep_graph=self._dist is not None and self._dist[1] > 1)
        self._stats = StepStatistics()
        # Sharded parameters (FSDP2, tensor parallel): their whole tensors' statistics need the
        # step's collective, which every rank runs at every step from now on (_sharded).
        if self._dist and self._dist[1] > 1 and _process_group() and model_is_sharded(model):
            self._shards = ShardedStatistics(self._stats)
        self._defer_all = False     # tests: CPU tensors take the device path (row buffer, one copy)
        self._suspended = 0         # > 0 inside suspended_capture(): hooks capture nothing
        self._warned = set()
        self.address = address or os.environ.get("HOOKSCOPE_ADDRESS") or default_address()
        self.name = name or os.path.basename(sys.argv[0] or "python") or "python"
        self._conn = Connection(self.address, self._detach)
        _live.add(self)
        if fsdp1:
            self._warn_once("fsdp1", fsdp1)
        self._connect(wait, timeout)
        if self._state == "on":
            self._hooks.install_optimizer_hooks()
            self._hooks.install_probe(lambda: self._step == 0 and self.connected and not self._suspended)
            ref = weakref.ref(self)

            def close_at_exit():
                me = ref()
                if me is not None:
                    me.close()
            atexit.register(close_at_exit)

    # ---------------------------------------------------------------- public

    @property
    def connected(self):
        """Whether a viewer is attached and hooks are live (never in a forked child: the at-fork
        handler closes its copy, so no pid check runs in every hook, nor under torch.compile)."""
        return self._state == "on"

    @property
    def suspended(self):
        """Whether the hooks skip what runs now (inside ``with hs.suspended_capture():``)."""
        return self._suspended > 0

    @contextlib.contextmanager
    def suspended_capture(self):
        """Forward passes inside this block are not part of a step (validation, evaluation):
        the hooks capture nothing and call numbers do not move. Blocks nest."""
        self._suspended += 1
        try:
            yield self
        finally:
            self._suspended -= 1

    def suspend(self):
        """As entering ``suspended_capture()``, for callbacks that see only a start and an end."""
        self._suspended += 1

    def resume(self):
        """Ends one ``suspend()``; more resumes than suspends are ignored."""
        self._suspended = max(0, self._suspended - 1)

    @property
    def bytes_sent(self):
        """Bytes this script sent to the viewer, frame headers included."""
        return self._conn.bytes_sent

    @property
    def statistics_backend(self):
        """What computes the statistics, e.g. "cpu: native; cuda: triton" (_stats's backends)."""
        return self._stats.backend

    def step(self, loss=None, **scalars):
        """Ends a training step: sends the loss and scalars, and obeys pause, step and break."""
        if self._backward_contexts is not None:
            self._backward_contexts.mark()
        if not self.connected:
            if self._shards is not None and self._shards.live:  # the other ranks wait in the collective
                with self.lock:
                    try:
                        self._finish_shards(False)
                    except Exception:
                        self._shards.live = False
            return
        with self.lock:
            try:
                self._end_step(loss, scalars)
            except Stopped:
                raise
            except Exception as exc:  # never let HookScope end a training run by accident
                self.fail(exc)

    def close(self):
        """Removes every hook and says goodbye to the viewer; training goes on unhooked."""
        if self._state != "on" or os.getpid() != self._pid:
            return
        with self.lock:
            left = 0
            try:
                self._conn.send({"type": "bye", "steps": self._step})
                # A viewer still reading what the steps sent gets it all and the goodbye; one that
                # reads nothing for 5 s (or is still behind after a minute) does not hold the script.
                left = self._conn.drain(quiet=5.0, most=60.0)
            except Exception:
                pass
            if left:
                self._warn_once("unsent", "the viewer had not read the last %.1f MiB of statistics when the script "
                                          "closed (it read nothing for 5 s, or was still behind after a minute): its "
                                          "last steps are not in the recording, and it will say the script left "
                                          "without closing" % (left / 1048576.0))
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

    def _connect(self, wait, timeout):
        try:
            messages = self._conn.connect(self._hello(), wait=wait, timeout=timeout)
        except Refused as exc:
            self._warn_once("connect", "%s; training runs without HookScope" % exc)
            return
        self._state = "on"
        self._say_backend()
        self._handle(messages)  # in order: a change of hooks after the welcome wins
        self._apply_pending()

    def _hello(self):
        modules = module_entries(self._hooks.modules)
        try:
            first = next(self._model.parameters())
            device, dtype = str(first.device), DTYPES.get(first.dtype, str(first.dtype))
        except StopIteration:
            device, dtype = "cpu", "float32"
        hello = {
            "type": "hello", "protocol": _wire.PROTOCOL_VERSION, "name": self.name, "pid": self._pid,
            "host": platform.node(), "python": platform.python_version(), "torch": torch.__version__,
            "device": device, "dtype": dtype, "modules": modules, "statistics": self._stats.backend,
            "optimizer": type(self._optimizer).__name__ if self._optimizer is not None else None,
        }
        if self._dist is not None:
            rank, world, job = self._dist
            hello["dist"] = {"rank": rank, "world_size": world, "job": job}
            if self._prints:
                hello["parameters"] = [name for name, _ in self._prints]
        return hello

    def _forget_in_child(self):
        self._state = "closed"
        self._conn.close()  # the child's copy only: the parent's connection stays

    def _detach(self, reason):
        """Removes every hook and closes the connection; `reason` is warned about once."""
        if self._state == "closed":
            return
        self._state = "closed"
        self._hooks.remove()
        self._conn.close()
        if reason:
            self._warn_once("detached", reason + "; hooks removed, training goes on without HookScope")

    def fail(self, exc):
        self._detach("an error inside HookScope's hooks (%s: %s)" % (type(exc).__name__, exc))

    def _handle(self, messages):
        for message in messages:
            self._control.handle(message)
            if self._control.error is not None:
                self._detach("the viewer ended the connection: %s" % self._control.error)
                return

    def _receive(self, timeout):
        self._handle(self._conn.receive(timeout))

    def _apply_pending(self):
        if self._stats.bins != self._control.bins:
            self._stats.set_bins(self._control.bins)
        settings = self._control.take_settings(self._hooks.index)
        if settings is not None:
            self._hooks.apply(*settings)

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

    def _scalars(self, loss, scalars):
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
        return values

    def _end_step(self, loss, scalars):
        if self._optimizer is None and self._hooks.wants_parameters():
            self._hooks.parameters_without_optimizer()
        self._finish_shards(True)
        self._send_statistics()
        self._say_backend()
        message = {"type": "step", "step": self._step, "scalars": self._scalars(loss, scalars)}
        reads = self._stats.take_reads()
        if reads:
            message["reads"] = reads
        if self._prints:
            message["fingerprint"] = self._fingerprint()
        dropped = self._take_dropped()
        if dropped:
            message["dropped"] = dropped
        if self._step == 0:
            message["shapes"] = self._hooks.take_probe()
        done = self._step
        self._conn.send(message)
        self._step += 1
        self._hooks.new_step()
        control = self._control
        self._receive(0.0)
        while self.connected and control.sync and control.acked < done and control.stop_reason is None:
            self._receive(None)
        control.step_done()
        if self.connected and control.paused and control.stop_reason is None:
            self._conn.send({"type": "paused", "step": done})  # a job lines its ranks up on it
        while self.connected and control.paused and control.stop_reason is None:
            self._receive(None)
        if control.stop_reason is not None and self._state == "on":
            reason = control.stop_reason
            self._conn.send({"type": "bye", "steps": self._step, "stopped": True})
            self._conn.drain(quiet=5.0, most=60.0)
            self._conn.flush()
            self._detach(None)
            raise Stopped(reason)
        if self.connected:
            self._apply_pending()


__all__ = ["KINDS", "Attached", "Stopped", "attach"]
