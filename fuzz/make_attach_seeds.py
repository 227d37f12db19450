"""Seeds for AttachWireFuzz: what a script sends after its hello (first byte 0), as real
streams: inline captures of several dtypes, steps with scalars and gaps, a goodbye."""
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from hookscope import _wire  # noqa: E402


def capture(step, module, kind, index, dtype, shape, payload, call=0):
    header = {"type": "capture", "step": step, "module": module, "call": call, "kind": kind, "index": index,
              "dtype": dtype, "shape": shape, "device": "cpu", "bytes": len(payload), "inline": True}
    return _wire.json_frame(header) + _wire.data_header(len(payload)) + payload


def main(folder):
    os.makedirs(folder, exist_ok=True)
    f32 = struct.pack("<6f", 1.0, -2.0, 0.0, float("nan"), float("inf"), 3.5)
    step0 = (capture(0, 1, "activation", 0, "float32", [2, 3], f32)
             + capture(0, 2, "gradient", 0, "float32", [6], f32, call=1)
             + capture(0, 0, "input", 0, "int64", [2], struct.pack("<2q", 7, -7))
             + _wire.json_frame({"type": "step", "step": 0, "scalars": {"loss": 0.5, "acc": "nan"},
                                 "shapes": {"1": [["2x3"]]}}))
    step1 = (capture(1, 1, "activation", 0, "float16", [2], struct.pack("<2e", 1.0, -1.0))
             + _wire.json_frame({"type": "capture", "step": 1, "param": "fc.weight", "call": 0, "kind": "param",
                                 "index": 0, "dtype": "bool", "shape": [0], "bytes": 0})
             + _wire.json_frame({"type": "step", "step": 1, "scalars": {}, "dropped": {"captures": 2, "bytes": 64}}))
    seeds = {"two-steps": step0 + step1 + _wire.json_frame({"type": "bye", "steps": 2}),
             "one-step": step0, "bye": _wire.json_frame({"type": "bye"})}
    for name, data in seeds.items():
        with open(os.path.join(folder, name), "wb") as f:
            f.write(b"\x00" + data)
    hello = _wire.json_frame({"type": "hello", "protocol": 1, "modules": [{"path": "", "type": "M", "params": 1}]})
    with open(os.path.join(folder, "own-hello"), "wb") as f:
        f.write(b"\x01" + hello + step0)
    # A rank of a distributed job: its hello names the job and the parameters its steps' prints follow.
    rank_hello = _wire.json_frame({"type": "hello", "protocol": 1, "dist": {"rank": 1, "world_size": 2, "job": "h:1"},
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
    engine_hello = _wire.json_frame({"type": "hello", "protocol": 1, "name": "m.pt",
                                     "engine": {"model": "/m.pt", "example_input": "2x3", "sha256": "ab",
                                                "confinement": "no file writes"},
                                     "modules": [{"path": "", "type": "M", "params": 0},
                                                 {"path": "fc", "type": "Linear", "params": 6}]})
    stats = {"shape": [2, 3], "dtype": "float32", "numel": 6, "min": -2.0, "max": 3.5, "mean": 0.6, "std": 2.1,
             "l2": 4.5, "zeros": 0.2, "nan": 1, "inf": 0, "hist": [1, 0, 2, 1], "lo": -2.0, "hi": 3.5}
    engine_step = (_wire.json_frame({"type": "configured"})
                   + _wire.json_frame({"type": "stats", "step": 0, "captures": [
                       dict(stats, module=1, call=0, kind="activation", index=0),
                       dict(stats, module=1, call=0, kind="gradient", index=0, min="nan", max="inf"),
                       dict(stats, param="fc.weight", call=0, kind="param_grad", index=0)]})
                   + _wire.json_frame({"type": "step", "step": 0, "scalars": {"loss": 0.5, "step_ms": 3.0}})
                   + _wire.json_frame({"type": "failed", "step": 1, "message": "the model rejects the input"})
                   + _wire.json_frame({"type": "paused", "step": 0}))
    with open(os.path.join(folder, "engine"), "wb") as f:
        f.write(b"\x01" + engine_hello + engine_step)
    with open(os.path.join(folder, "engine-stats"), "wb") as f:
        f.write(b"\x00" + engine_step)


if __name__ == "__main__":
    main(sys.argv[1])
