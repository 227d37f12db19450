#!/usr/bin/env python3
"""The Python peer of HookScope's overhead benchmark: hooks on every module of resnet18
(torchvision's, as written in tests/fixtures/architectures.py) computing min/max/mean/std/norm
and a 64-bin histogram of each output and, through
a tensor hook, of its gradient. Prints the median step time with and without the hooks.

Usage: PYTHON python_peer.py [ROUNDS], with the PyTorch HookScope is built on.
"""
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
from architectures import resnet18  # noqa: E402


def summarize(t):
    """What the issue's peer computes: min, max, mean, std, norm and a 64-bin histogram.
    (Unlike HookScope it does not separate out NaN/Inf, which would cost it more.)"""
    t = t.detach()
    lo, hi = t.min(), t.max()
    t.mean(), t.std(), t.norm()
    torch.histc(t, bins=64, min=lo.item(), max=hi.item())


def forward_hook(module, inputs, output):
    outputs = output if isinstance(output, (tuple, list)) else [output]
    for t in outputs:
        if isinstance(t, torch.Tensor):
            summarize(t)
            if t.requires_grad:
                t.register_hook(lambda g: summarize(g))


def time_steps(model, x, y, steps):
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    torch.manual_seed(0)
    model = resnet18(num_classes=10).train()
    x = torch.randn(8, 3, 112, 112)
    y = torch.randint(0, 10, (8,))
    handles = []
    plain, hooked = [], []
    time_steps(model, x, y, 3)  # warm up
    for _ in range(rounds):
        plain += time_steps(model, x, y, 3)
        handles = [m.register_forward_hook(forward_hook) for m in model.modules()]
        hooked += time_steps(model, x, y, 3)
        for h in handles:
            h.remove()
    a, c = statistics.median(plain), statistics.median(hooked)
    print(f"python peer: resnet18, batch 8x3x112x112, SGD, {torch.get_num_threads()} threads, {rounds} rounds x 3 steps")
    print(f"  without hooks median {a:9.2f} ms")
    print(f"  hooks on every module median {c:9.2f} ms  ratio {c / a:.3f}")
    print(f"RESULT peer plain_ms={a:.3f} hooked_ms={c:.3f} ratio={c / a:.4f}")


if __name__ == "__main__":
    main()
