"""``HookScopeCallback`` for the ``pytorch_lightning`` package (Lightning's older name)."""

from pytorch_lightning import Callback

from ._lightning import make_callback

HookScopeCallback = make_callback(Callback)

__all__ = ["HookScopeCallback"]
