"""HookScope's Python engine: runs the model files that only Python can run (a torch.export
`.pt2`, a whole-model pickle) for a HookScope window or `hookscope-cli capture`, speaking the
engine side of the protocol `hookscope-cli serve` speaks for TorchScript (docs/protocol.md), with
the package's own hooks and statistics. Started by `hookscope-cli serve` and `inspect`:

    python -m hookscope.engine serve MODEL --address unix:PATH [--trust] [--no-confine] [--python-path DIR]
    python -m hookscope.engine inspect MODEL [--input SPEC ...] [--trust] [--python-path DIR]
"""
