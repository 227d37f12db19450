"""``HookScopeCallback`` for ``lightning.pytorch`` (``import lightning``)."""

from lightning.pytorch import Callback

from ._lightning import make_callback

HookScopeCallback = make_callback(Callback)

__all__ = ["HookScopeCallback"]
