"""Attach a PyTorch training run to HookScope.

    import hookscope
    hs = hookscope.attach(model, optimizer)
    for x, y in loader:
        ...
        hs.step(loss)
    hs.close()

Needs only the standard library and torch (1.13 or 2.x). Each captured tensor's statistics are
computed in this process, on the tensor's device; only they reach HookScope (docs/protocol.md).
"""

from ._address import default_address, parse_address
from ._client import KINDS, Attached, Stopped, attach
from ._stats import tensor_statistics
from ._wire import PROTOCOL_VERSION, ProtocolError
from .runs import WHOLE, RunReadError, load_run
from . import bands  # noqa: F401  (hookscope.bands.describe, first_movers)

__all__ = ["attach", "Attached", "Stopped", "KINDS", "PROTOCOL_VERSION", "ProtocolError",
           "default_address", "parse_address", "tensor_statistics", "load_run", "RunReadError", "WHOLE"]
__version__ = "0.1.0"
