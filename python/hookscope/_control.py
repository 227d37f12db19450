"""What the viewer asks of the script: which hooks, pause, run, step, breakpoints, stop."""

KINDS = ("activation", "input", "gradient", "param", "param_grad", "update")
BIT = {name: 1 << i for i, name in enumerate(KINDS)}
PARAM_KINDS = BIT["param"] | BIT["param_grad"] | BIT["update"]
MAX_BINS = 4096


class Control:
    """The viewer's commands as state; hook settings wait in `pending` for a step boundary."""

    def __init__(self):
        self.pending = None      # the last welcome/hooks message with settings, not yet applied
        self.paused = False
        self.budget = None       # steps left before pausing again (a `step` command)
        self.sync = False        # a breakpoint is armed: wait for each step's ack
        self.acked = -1
        self.stop_reason = None
        self.bins = 64
        self.error = None        # the viewer's error message, if it sent one
        self.binary = False      # the viewer reads statistics as binary rows (docs/protocol.md)

    def handle(self, message):
        kind = message.get("type")
        if kind in ("welcome", "hooks"):
            if "hooks" in message or "gradient" in message or "output" in message:
                self.pending = message
            self.sync = bool(message.get("sync", self.sync))
            if message.get("paused"):
                self.paused = True
            bins = message.get("bins")
            if isinstance(bins, int) and 1 <= bins <= MAX_BINS:
                self.bins = bins
            if message.get("binary_stats") is True:
                self.binary = True
        elif kind == "pause":
            self.paused = True
            self.budget = None
        elif kind == "run":
            self.paused = False
            self.budget = None
        elif kind == "step":
            self.paused = False
            self.budget = max(1, int(message.get("count", 1)))
        elif kind == "sync":
            self.sync = bool(message.get("on"))
        elif kind == "ack":
            self.acked = max(self.acked, int(message.get("step", -1)))
        elif kind == "stop":
            self.stop_reason = str(message.get("reason") or "stopped by HookScope")
        elif kind == "error":
            self.error = str(message.get("message", "no reason given"))
        # Unknown messages are ignored: a newer viewer may send more.

    def step_done(self):
        """Counts a finished step against a `step` command's budget."""
        if self.budget is not None:
            self.budget -= 1
            if self.budget <= 0:
                self.budget = None
                self.paused = True

    def take_settings(self, index):
        """The pending settings as (flags per module, gradient ops, output ops), or None."""
        settings, self.pending = self.pending, None
        if settings is None:
            return None
        flags = [0] * len(index)
        for path, kinds in (settings.get("hooks") or {}).items():
            i = index.get(path)
            if i is not None:
                for kind in kinds:
                    flags[i] |= BIT.get(kind, 0)
        grad_ops = {}
        for path, op in (settings.get("gradient") or {}).items():
            i = index.get(path)
            if i is not None and isinstance(op, list) and op and op[0] in ("clamp", "scale", "zero"):
                grad_ops[i] = (op[0], float(op[1]) if len(op) > 1 else 0.0)
        out_ops = {}
        for path, op in (settings.get("output") or {}).items():
            i = index.get(path)
            if i is not None and op in ("zero", "mean"):
                out_ops[i] = op
        return flags, grad_ops, out_ops
