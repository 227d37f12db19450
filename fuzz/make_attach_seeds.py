"""Seeds for AttachWireFuzz: what a script sends after its hello (first byte 0), as real
streams: statistics of several dtypes and kinds, steps with scalars and named gaps, a goodbye."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from hookscope import _wire  # noqa: E402


def stats(step, module, kind, index, dtype, shape, call=0, **extra):
    numel = 1
    for d in shape:
        numel *= d
    entry = {"module": module, "call": call, "kind": kind, "index": index, "shape": shape, "dtype": dtype,
             "numel": numel, "min": -2.0, "max": 3.5, "mean": 0.6, "std": 2.1, "l2": 4.5, "zeros": 0.0,
             "nan": 0, "inf": 0, "hist": [1] * min(numel, 4) + [0] * (4 - min(numel, 4)), "lo": -2.0, "hi": 3.5}
    entry.update(extra)
    return _wire.json_frame({"type": "stats", "step": step, "captures": [entry]})


def main(folder):
    os.makedirs(folder, exist_ok=True)
    step0 = (stats(0, 1, "activation", 0, "float32", [2, 3], nan=1, inf=1)
             + stats(0, 2, "gradient", 0, "float32", [6], call=1, min="nan", max="inf")
             + stats(0, 0, "input", 0, "int64", [2])
             + _wire.json_frame({"type": "step", "step": 0, "scalars": {"loss": 0.5, "acc": "nan"},
                                 "shapes": {"1": [["2x3"]]}}))
    step1 = (stats(1, 1, "activation", 0, "float16", [2])
             + _wire.json_frame({"type": "stats", "step": 1, "captures": [
                 {"param": "fc.weight", "call": 0, "kind": "param", "index": 0, "dtype": "bool", "shape": [0],
                  "numel": 0, "min": "nan", "max": "nan", "mean": "nan", "std": 0, "l2": 0, "zeros": 0, "nan": 0,
                  "inf": 0, "hist": [0, 0], "lo": 0, "hi": 0}]})
             + _wire.json_frame({"type": "step", "step": 1, "scalars": {}, "dropped": {"captures": 2, "series": [
                 {"module": 1, "call": 0, "kind": "activation", "index": 0, "reason": "the viewer was 20 MiB behind"},
                 {"param": "fc.weight", "call": 0, "kind": "param", "index": 0, "reason": "RuntimeError: x"}]}}))
    seeds = {"two-steps": step0 + step1 + _wire.json_frame({"type": "bye", "steps": 2}),
             "one-step": step0, "bye": _wire.json_frame({"type": "bye"})}
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"\x00" + data)
    hello = _wire.json_frame({"type": "hello", "protocol": _wire.PROTOCOL_VERSION, "modules": [{"path": "", "type": "M", "params": 1}]})
    with open(os.path.join(folder, "own-hello"), "wb") as f:
        f.write(b"\x01" + hello + step0)
    # A rank of a distributed job: its hello names the job and the parameters its steps' prints follow.
    rank_hello = _wire.json_frame({"type": "hello", "protocol": _wire.PROTOCOL_VERSION, "dist": {"rank": 1, "world_size": 2, "job": "h:1"},
                                   "parameters": ["fc.weight", "fc.bias"],
                                   "modules": [{"path": "", "type": "M", "params": 0},
                                               {"path": "fc", "type": "Linear", "params": 6}]})
    rank_step = _wire.json_frame({"type": "step", "step": 0, "scalars": {"loss": 1.0},
                                  "fingerprint": {"params": [[1.5, 2.0], ["nan", "inf"]],
                                                  "grads": [[0.1, 0.2], None]}})
    with open(os.path.join(folder, "rank-hello"), "wb") as f:
        f.write(b"\x01" + rank_hello + rank_step + _wire.json_frame({"type": "paused", "step": 0})
                + _wire.json_frame({"type": "bye", "steps": 1, "stopped": True}))
    # An engine process (hookscope-cli serve): its hello says so, its steps' statistics come as
    # stats messages it computed itself, and it answers configure.
    engine_hello = _wire.json_frame({"type": "hello", "protocol": _wire.PROTOCOL_VERSION, "name": "m.pt",
                                     "engine": {"model": "/m.pt", "example_input": "2x3", "sha256": "ab",
                                                "confinement": "no file writes"},
                                     "modules": [{"path": "", "type": "M", "params": 0},
                                                 {"path": "fc", "type": "Linear", "params": 6}]})
    entry = {"shape": [2, 3], "dtype": "float32", "numel": 6, "min": -2.0, "max": 3.5, "mean": 0.6, "std": 2.1,
             "l2": 4.5, "zeros": 0.2, "nan": 1, "inf": 0, "hist": [1, 0, 2, 1], "lo": -2.0, "hi": 3.5}
    engine_step = (_wire.json_frame({"type": "configured"})
                   + _wire.json_frame({"type": "stats", "step": 0, "captures": [
                       dict(entry, module=1, call=0, kind="activation", index=0),
                       dict(entry, module=1, call=0, kind="gradient", index=0, min="nan", max="inf"),
                       dict(entry, param="fc.weight", call=0, kind="param_grad", index=0)]})
                   + _wire.json_frame({"type": "step", "step": 0, "scalars": {"loss": 0.5, "step_ms": 3.0}})
                   + _wire.json_frame({"type": "failed", "step": 1, "message": "the model rejects the input"})
                   + _wire.json_frame({"type": "paused", "step": 0}))
    with open(os.path.join(folder, "engine"), "wb") as f:
        f.write(b"\x01" + engine_hello + engine_step)
    # A protocol 1 script: its frames say version 1.
    old = _wire.json_frame({"type": "hello", "protocol": 1, "modules": [{"path": "", "type": "M"}]})
    with open(os.path.join(folder, "protocol-1"), "wb") as f:
        f.write(b"\x01" + old[:2] + b"\x01" + old[3:])
    with open(os.path.join(folder, "engine-stats"), "wb") as f:
        f.write(b"\x00" + engine_step)


if __name__ == "__main__":
    main(sys.argv[1])
