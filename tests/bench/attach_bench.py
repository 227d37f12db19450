#!/usr/bin/env python3
"""Cost of attaching a training script to HookScope (issue 14's benchmark).

resnet18 (eager, as torchvision's), batch 8x3x112x112, SGD, CPU; every module hooked for
activations and gradients through `hookscope-cli record --hook '*'`. Steps of four identical
models are interleaved: plain, attached, the Python peer (hooks computing the same statistics
and a 64-bin histogram in the hook), and attached with no viewer listening. Also: attach cost
for a 1,000-module model, and bytes per step on the wire.

Usage: PYTHON attach_bench.py HOOKSCOPE_CLI [ROUNDS]
"""
import copy
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "fixtures"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))
from architectures import resnet18  # noqa: E402
from python_peer import forward_hook as peer_hook  # noqa: E402

import hookscope  # noqa: E402


def recorder(cli, folder, *args):
    proc = subprocess.Popen([cli, "record", "--out", os.path.join(folder, "export"), "--address",
                             "unix:" + os.path.join(folder, "hs.sock"), "--timeout", "600", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    address = proc.stdout.readline().strip().split("=", 1)[1]
    return proc, address


def step(model, opt, x, y):
    opt.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def main():
    cli = sys.argv[1]
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    folder = tempfile.mkdtemp(prefix="hs-bench-")
    try:
        torch.manual_seed(0)
        base = resnet18(num_classes=10).train()
        plain, attached, peer, alone = base, copy.deepcopy(base), copy.deepcopy(base), copy.deepcopy(base)
        models = (("plain", plain), ("attached", attached), ("peer", peer), ("no viewer", alone))
        opts = {name: torch.optim.SGD(m.parameters(), lr=0.01) for name, m in models}
        for m in peer.modules():
            m.register_forward_hook(peer_hook)
        x = torch.randn(8, 3, 112, 112)
        y = torch.randint(0, 10, (8,))
        proc, address = recorder(cli, folder, "--hook", "*", "--kinds", "activation,gradient")
        hs = hookscope.attach(attached, address=address)
        assert hs.connected
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nobody = hookscope.attach(alone, address="unix:" + os.path.join(folder, "nobody.sock"))
        assert not nobody.connected
        times = {name: [] for name, _ in models}
        for name, model in models:  # warm up
            step(model, opts[name], x, y)
            if name == "attached":
                hs.step()
        sent0, shared0, steps0 = hs.bytes_sent, hs.bytes_shared, hs._step
        for _ in range(rounds):
            for name, model in models:
                for _ in range(3):
                    start = time.perf_counter()
                    loss = step(model, opts[name], x, y)
                    if name == "attached":
                        hs.step(loss)
                    elif name == "no viewer":
                        nobody.step(loss)
                    times[name].append((time.perf_counter() - start) * 1e3)
        steps = hs._step - steps0
        sent, shared = (hs.bytes_sent - sent0) / steps, (hs.bytes_shared - shared0) / steps
        dropped = hs._dropped
        hs.close()
        proc.wait(timeout=600)
        med = {k: statistics.median(v) for k, v in times.items()}
        print(f"attach: resnet18, batch 8x3x112x112, SGD, {torch.get_num_threads()} threads, "
              f"{rounds} rounds x 3 steps, every module hooked (activation, gradient)")
        for name, _ in models:
            print(f"  {name:9s} median {med[name]:9.2f} ms  ratio {med[name] / med['plain']:.3f}")
        print(f"  per step: {sent / 1024:.1f} KiB on the socket, {shared / 2**20:.1f} MiB of tensors through "
              f"shared memory; captures dropped: {dropped}")

        # Attach cost: until the viewer has the tree of a 1,000-module model.
        shutil.rmtree(os.path.join(folder, "export"), ignore_errors=True)
        big = nn.Sequential(*[nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(333)])
        modules = sum(1 for _ in big.modules())
        proc, address = recorder(cli, folder, "--hook", "*")
        start = time.perf_counter()
        hs = hookscope.attach(big, address=address)
        attach_ms = (time.perf_counter() - start) * 1e3
        assert hs.connected
        big(torch.randn(2, 4)).sum().backward()
        hs.step()
        hs.close()
        proc.wait(timeout=600)
        print(f"  attach of a {modules}-module model: {attach_ms:.1f} ms until the viewer has its tree")
        print(f"RESULT attach plain_ms={med['plain']:.3f} attached_ms={med['attached']:.3f} "
              f"ratio={med['attached'] / med['plain']:.4f} peer_ratio={med['peer'] / med['plain']:.4f} "
              f"no_viewer_ratio={med['no viewer'] / med['plain']:.4f} "
              f"socket_kib={sent / 1024:.1f} shared_mib={shared / 2**20:.1f} attach_ms={attach_ms:.1f}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
