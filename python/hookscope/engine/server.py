"""The engine side of the protocol for a model that runs in Python (docs/protocol.md, "An engine
process"): hello with the module tree, then configure / run / step / pause / stop from the
window, `stats` and `step` messages per step, at most one step ahead of what was acknowledged."""

import hashlib
import os
import platform
import select
import sys
import threading
import time

import torch

from .. import _wire
from .._capture import CaptureSink
from .._control import Control
from .._hooks import ModelHooks
from .._stats import StepStatistics
from .._transport import Connection, Refused
from .runner import CheckpointRunner, RunError, Runner


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class EngineServer(CaptureSink):
    def __init__(self, loaded, path, address, sock, confinement):
        """`sock`: already connected to `address` (the engine connects before it confines itself)."""
        self.loaded = loaded
        self.path = path
        self.lock = threading.RLock()
        self._stats = StepStatistics()
        self._defer_all = False
        self._step = 0
        self._warned = set()
        self._capture_seconds = 0.0
        self._hook_error = None
        self.runner = CheckpointRunner(loaded.module) if loaded.kind == "checkpoint" else Runner(loaded.module)
        self.hooks = ModelHooks(self, list(loaded.module.named_modules()), None, keep_graph=False)
        self.control = Control()
        self._conn = Connection(address, self._lost)
        self._sock = sock
        self._confinement = confinement
        self._ended = None
        self._clean = False  # ended as HookScope asked (or by its going away)
        self._running = False
        self._steps_left = -1
        self._paused_due = False
        self._acked = -1
        self._sync = False
        self._want_shapes = True

    # ---- the owner ModelHooks calls
    @property
    def connected(self):
        return self._ended is None

    suspended = False

    def capture(self, series, call, kind, index, tensor):
        start = time.perf_counter()
        CaptureSink.capture(self, series, call, kind, index, tensor)
        self._capture_seconds += time.perf_counter() - start

    def fail(self, exc):
        if self._hook_error is None:
            self._hook_error = "%s: %s" % (type(exc).__name__, exc)

    def _warn_once(self, key, message):
        if key not in self._warned:
            self._warned.add(key)
            sys.stderr.write("hookscope engine: %s\n" % message)

    def _lost(self, reason):
        # The window closed the engine (or died): either way there is nothing more to do.
        if self._ended is None:
            self._ended, self._clean = reason, True

    # ---- the session
    def hello(self):
        return {
            "type": "hello", "protocol": _wire.PROTOCOL_VERSION, "name": os.path.basename(self.path),
            "pid": os.getpid(), "host": platform.node(), "python": platform.python_version(),
            "torch": torch.__version__, "device": "cpu", "dtype": "float32", "optimizer": "",
            "modules": self.loaded.module_entries(), "statistics": self._stats.backend,
            "engine": {"model": self.path, "example_input": self.loaded.example_spec(), "sha256": sha256(self.path),
                       "confinement": self._confinement},
        }

    def serve(self):
        """Runs until HookScope stops the engine or goes away; returns how it ended."""
        try:
            messages = self._conn.connect(self.hello(), sock=self._sock)
        except Refused as exc:
            return str(exc), False
        self._watch_hangup()
        self._handle(messages)
        while self._ended is None:
            if not self._running:
                self._send_paused_if_due()
                self._receive(None)
                continue
            self._receive(0.0)
            if not self._running or self._ended is not None:
                continue
            # Step n starts once HookScope acknowledged step n-2: at most one step ahead of it.
            if self._acked < self.runner.steps_done - 2:
                self._receive(None)
                continue
            if self._run_step() and self._steps_left > 0:
                self._steps_left -= 1
                if self._steps_left == 0:
                    self._running = False
                    self._paused_due = True
        return self._ended, self._clean

    def _watch_hangup(self):
        # The window goes away (closed, killed): so does the engine, even inside a step that never ends.
        sock = self._sock

        def watch():
            poller = select.poll()
            poller.register(sock.fileno(), select.POLLRDHUP if hasattr(select, "POLLRDHUP") else select.POLLHUP)
            while True:
                if poller.poll():
                    os._exit(0)
        threading.Thread(target=watch, daemon=True).start()

    def _receive(self, timeout):
        self._handle(self._conn.receive(timeout))  # a closed connection ends the session through _lost

    def _send(self, message):
        self._conn.send(message)

    def _handle(self, messages):
        for message in messages:
            if not isinstance(message, dict):
                continue
            kind = message.get("type")
            if kind in ("welcome", "hooks"):
                self.control.handle(message)
                settings = self.control.take_settings(self.hooks.index)
                if settings is not None:
                    self.hooks.apply(*settings)
                if isinstance(message.get("sync"), bool):
                    self._sync = message["sync"]
                if kind == "welcome" and message.get("paused") is False and self.runner.config is not None:
                    self._running = True
            elif kind == "configure":
                self._configure(message.get("config"))
            elif kind in ("run", "step"):
                if self.runner.config is None:
                    self._failed("the engine has no run configuration yet: HookScope sends one before it runs")
                    continue
                self._running = True
                self._steps_left = -1 if kind == "run" else max(1, int(message.get("count", 1)))
            elif kind == "pause":
                self._running = False
                self._paused_due = True
            elif kind == "sync":
                self._sync = bool(message.get("on"))
            elif kind == "ack":
                self._acked = max(self._acked, int(message.get("step", -1)))
            elif kind == "stop":
                self._send({"type": "bye", "stopped": True})
                self._conn.drain(quiet=5.0, most=60.0)
                self._conn.flush()
                self._ended, self._clean = "stopped by HookScope: %s" % message.get("reason", ""), True
                return
            elif kind == "error":
                self._ended = "HookScope refused the engine: %s" % message.get("message", "")
                return

    def _configure(self, config):
        if not isinstance(config, dict):
            self._failed("a configure message without a configuration")
            return
        old = self.runner.config
        try:
            self.runner.configure(config)
        except RunError as exc:
            self.runner.config = None
            self._failed(str(exc))
            return
        self._stats.set_bins(self.runner.config["bins"])
        self.hooks.set_optimizer(self.runner.optimizer)  # parameter captures follow this configuration's
        keys = ("inputs", "data_file", "batch_size")
        if old is None or any(old.get(k) != config.get(k) for k in keys):
            self._want_shapes = True
        self._send({"type": "configured"})

    def _failed(self, message):
        self._running = False
        self._paused_due = True
        self._send({"type": "failed", "step": self.runner.steps_done, "message": message})

    def _send_paused_if_due(self):
        if self._paused_due:
            self._paused_due = False
            if self.runner.steps_done > 0:
                self._send({"type": "paused", "step": self.runner.steps_done - 1})

    def _run_step(self):
        step = self.runner.steps_done
        self._step = step
        self._capture_seconds = 0.0
        self._hook_error = None
        self.hooks.new_step()
        if self._want_shapes:
            self.hooks.install_probe(lambda: True)
        try:
            scalars = self.runner.step(after_backward=self._parameters_without_optimizer)
            failure = None if self._hook_error is None else \
                "HookScope's hooks failed in this step (%s)" % self._hook_error
        except RunError as exc:
            failure = str(exc)
        if failure is not None:  # the step's captures and shapes go with it
            self._stats.take()
            self.hooks.take_probe()
            self._failed(failure)
            return False
        start = time.perf_counter()
        self._send_statistics()
        if self.runner.timed:
            scalars["capture_ms"] = (self._capture_seconds + time.perf_counter() - start) * 1e3
        message = {"type": "step", "step": step,
                   "scalars": {k: _wire.encode_number(v) for k, v in scalars.items()}}
        dropped = self._take_dropped()
        if dropped:
            message["dropped"] = dropped
        if self._want_shapes:
            message["shapes"] = self.hooks.take_probe()
            self._want_shapes = False
        self._send(message)
        # With a breakpoint armed, the step is not over until HookScope has checked it.
        while self._sync and self._acked < step and self._ended is None:
            self._receive(None)
        return True

    def _parameters_without_optimizer(self):
        if self.hooks.wants_parameters():
            self.hooks.parameters_without_optimizer()
