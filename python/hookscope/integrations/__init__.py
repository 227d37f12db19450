"""HookScope in the trainers people already use, imported only when used:

    from hookscope.integrations.lightning import HookScopeCallback        # lightning.pytorch
    from hookscope.integrations.pytorch_lightning import HookScopeCallback  # pytorch_lightning
    from hookscope.integrations.transformers import HookScopeCallback     # transformers.Trainer

Importing this package imports none of those libraries; each module needs only its own.
"""
