#!/usr/bin/env python3
"""How many captures the CUDA kernels would complete in one read, estimated on the CPU from real
training: a small CNN and a small transformer trained here with every module hooked
(activations and gradients, PyTorch's own hooks), each capture's finite min, max and amax taken
step after step, and the kernels' rule applied to them (stats_kernels.cu: the next edges are
this step's own, widened by HS_MARGIN of the span on each side; one read where the values lie
inside the edges and fill at least half their span, and the fp8 thresholds of this step's amax
fall in the band of half to twice the previous amax). The band's capacity is not modelled (a
full band is a second read too). Prints the share from the second step on, by model and kind.

    python tests/bench/one_read_share.py [STEPS]
"""
import math
import os
import re
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "..", "python", "hookscope", "stats_kernels.cu")
MARGIN = float(re.search(r"#define HS_MARGIN ([0-9.]+)", open(SOURCE).read()).group(1))


def cnn():
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(32, 10))


class Block(nn.Module):
    def __init__(self, d=64):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, 4, batch_first=True)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def transformer():
    return nn.Sequential(nn.Embedding(100, 64), Block(), Block(), nn.LayerNorm(64), nn.Linear(64, 100))


def ranges(model, step):
    """{(module, kind): (min, max)} of one training step, every module's output and gradient."""
    seen = {}

    def keep(key, t):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            finite = t.detach()[torch.isfinite(t.detach())]
            if finite.numel():
                seen[key] = (finite.min().item(), finite.max().item())

    handles = []
    for name, module in model.named_modules():
        def hook(m, args, out, name=name):
            keep((name, "activation"), out)
            if isinstance(out, torch.Tensor) and out.requires_grad:
                out.register_hook(lambda g: keep((name, "gradient"), g))
        handles.append(module.register_forward_hook(hook))
    step()
    for h in handles:
        h.remove()
    return seen


def flush_below(amax):
    return amax * 2.0 ** -9 / 448.0  # E4M3's threshold (its exact rounding does not matter here)


def one_read(previous, now):
    lo, hi = previous
    before = max(abs(lo), abs(hi))
    if hi <= lo:
        pad = max(0.5, abs(lo) * 1e-6)
        lo, hi, margin = lo - pad, hi + pad, 0.0
    else:
        margin = MARGIN * (hi - lo)
    low, high = lo - margin, hi + margin
    new_lo, new_hi = now
    own = (new_lo - max(0.5, abs(new_lo) * 1e-6), new_hi + max(0.5, abs(new_lo) * 1e-6)) if new_hi <= new_lo else None
    fits = new_lo >= low and new_hi <= high and (new_hi - new_lo >= 0.5 * (high - low) or own == (low, high))
    amax = max(abs(new_lo), abs(new_hi))
    band = flush_below(before * 0.5) <= flush_below(amax) <= flush_below(before * 2.0)
    return fits and band


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    torch.manual_seed(0)
    for name, make, batch in (("cnn", cnn, lambda: (torch.randn(32, 3, 16, 16), torch.randint(0, 10, (32,)))),
                              ("transformer", transformer,
                               lambda: (torch.randint(0, 100, (8, 32)), torch.randint(0, 100, (8, 32))))):
        model = make()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

        def step():
            x, y = batch()
            opt.zero_grad()
            out = model(x)
            loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            loss.backward()
            opt.step()

        previous, counts = {}, {}
        for i in range(steps):
            now = ranges(model, step)
            for key, r in now.items():
                if key in previous and all(map(math.isfinite, r)):
                    tally = counts.setdefault(key[1], [0, 0])
                    tally[0] += one_read(previous[key], r)
                    tally[1] += 1
            previous = now
        total = [sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())]
        by_kind = ", ".join("%s %.0f%%" % (k, 100.0 * c[0] / c[1]) for k, c in sorted(counts.items()))
        print("RESULT one_read_share model=%s steps=%d margin=%.3f share=%.3f (%s)"
              % (name, steps, MARGIN, total[0] / total[1], by_kind))


if __name__ == "__main__":
    main()
