#!/usr/bin/env python3
"""How many captures the CUDA kernels would complete in one read, estimated on the CPU from real
training: a small CNN, a small transformer and a ResNet-50-shaped CNN (bottleneck blocks 3-4-6-3,
BatchNorm, in-place ReLU, downsampling; narrower and on smaller images than torchvision's) trained
here with every module hooked (activations and gradients, PyTorch's own hooks), each capture's
finite min, max and amax taken step after step, and the kernels' rule applied to them
(stats_kernels.cu: the next edges are this step's own, widened by HS_MARGIN of the span on each
side, and scaled by the drift of the series' group, activations or gradients: the geometric mean,
weighted HS_DRIFT_WEIGHT, of how much the amax of each capture of the group before it changed
since its series' previous capture, each change clamped to [1/4, 4]; one read where the values
lie inside the edges and fill at least half their span, the fp8 thresholds of this step's amax
fall in the band of half to twice the forecast amax, and the band holds no more than
HS_BAND_CAPACITY values of each format). --no-drift leaves the drift out. Prints the share from the fifth step
on, by model and kind, and why the others took two reads.

    python tests/bench/one_read_share.py [STEPS] [--bf16] [--no-drift] [--models cnn,transformer,resnet]

--bf16 runs the models under CPU autocast to bfloat16 (captured tensors are then mostly bf16).
"""
import math
import os
import re
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "..", "..", "python", "hookscope", "stats_kernels.cu")
_KERNELS = open(SOURCE).read()
MARGIN = float(re.search(r"#define HS_MARGIN ([0-9.]+)", _KERNELS).group(1))
BAND_CAPACITY = int(re.search(r"#define HS_BAND_CAPACITY (\d+)", _KERNELS).group(1))
DRIFT_WEIGHT = float(re.search(r"#define HS_DRIFT_WEIGHT ([0-9.]+)", _KERNELS).group(1))
FROM_STEP = 5


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


class Bottleneck(nn.Module):
    def __init__(self, inside, width, stride):
        super().__init__()
        out = 4 * width
        self.conv1, self.bn1 = nn.Conv2d(inside, width, 1, bias=False), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = nn.Conv2d(width, width, 3, stride, 1, bias=False), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = nn.Conv2d(width, out, 1, bias=False), nn.BatchNorm2d(out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or inside != out:
            self.downsample = nn.Sequential(nn.Conv2d(inside, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(y)))
        return self.relu(self.bn3(self.conv3(y)) + identity)


def resnet(base=16, classes=10):
    layers, inside = [nn.Conv2d(3, base, 7, 2, 3, bias=False), nn.BatchNorm2d(base), nn.ReLU(inplace=True),
                      nn.MaxPool2d(3, 2, 1)], base
    for stage, blocks in enumerate((3, 4, 6, 3)):
        width = base * 2 ** stage
        for b in range(blocks):
            layers.append(Bottleneck(inside, width, 2 if b == 0 and stage > 0 else 1))
            inside = 4 * width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inside, classes))


def band_counts(t, before):
    """Values of t in each fp8 band a previous amax `before` gives (E4M3's, E5M2's)."""
    m = t.detach().abs().float()
    out = []
    for largest, smallest in ((448.0, 2.0 ** -9), (57344.0, 2.0 ** -16)):
        low, high = before * 0.5 * smallest / largest, before * 2.0 * smallest / largest
        out.append(int(((m > 0) & (m >= low) & (m < high)).sum()))
    return out


def ranges(model, step, previous=None):
    """{(module, kind): (min, max)} of one training step, every module's output and gradient."""
    seen = {}

    def keep(key, t):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel():
            finite = t.detach()[torch.isfinite(t.detach())]
            if finite.numel():
                lo, hi = finite.min().item(), finite.max().item()
                before = previous.get(key) if previous else None
                bands = band_counts(finite, max(abs(before[0]), abs(before[1]))) if before else [0, 0]
                seen[key] = (lo, hi, bands)

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


def two_reads_because(previous, now, drift=1.0):
    """Why the kernels would read a capture twice given its series' previous capture and its
    group's drift, or None."""
    lo, hi = previous[0], previous[1]
    before = max(abs(lo), abs(hi))
    if hi <= lo:
        pad = max(0.5, abs(lo) * 1e-6)
        lo, hi, margin, drift = lo - pad, hi + pad, 0.0, 1.0
    else:
        margin = MARGIN * (hi - lo)
    low, high = (lo - margin) * drift, (hi + margin) * drift
    before *= drift
    new_lo, new_hi, bands = now[:3]
    own = (new_lo - max(0.5, abs(new_lo) * 1e-6), new_hi + max(0.5, abs(new_lo) * 1e-6)) if new_hi <= new_lo else None
    if not (new_lo >= low and new_hi <= high):
        return "outside the edges"
    if not (new_hi - new_lo >= 0.5 * (high - low) or own == (low, high)):
        return "fills less than half"
    amax = max(abs(new_lo), abs(new_hi))
    if not flush_below(before * 0.5) <= flush_below(amax) <= flush_below(before * 2.0):
        return "amax out of its band"
    if max(bands) > BAND_CAPACITY:
        return "fp8 band over capacity"
    return None


def batches(name):
    if name == "cnn":
        return cnn, lambda: (torch.randn(32, 3, 16, 16), torch.randint(0, 10, (32,)))
    if name == "transformer":
        return transformer, lambda: (torch.randint(0, 100, (8, 32)), torch.randint(0, 100, (8, 32)))
    return resnet, lambda: (torch.randn(16, 3, 64, 64), torch.randint(0, 10, (16,)))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps = int(args[0]) if args else 60
    bf16 = "--bf16" in sys.argv
    names = "cnn,transformer,resnet"
    if "--models" in sys.argv:
        names = sys.argv[sys.argv.index("--models") + 1]
    torch.manual_seed(0)
    for name in names.split(","):
        make, batch = batches(name)
        model = make()
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)

        def step():
            x, y = batch()
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                out = model(x)
                loss = nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y.reshape(-1))
            loss.backward()
            opt.step()

        previous, counts, reasons, drifts = {}, {}, {}, {}
        for i in range(steps):
            now = ranges(model, step, previous)
            for key, r in now.items():  # in the order they were captured
                if key in previous and "--no-drift" not in sys.argv:
                    drift = drifts.get(key[1], 1.0)
                    before, amax = max(map(abs, previous[key][:2])), max(map(abs, r[:2]))
                    if before > 0 and 0 < amax < math.inf:
                        change = min(4.0, max(0.25, amax / before))
                        drifts[key[1]] = drift ** (1 - DRIFT_WEIGHT) * change ** DRIFT_WEIGHT
                else:
                    drift = 1.0
                if i >= FROM_STEP and key in previous and all(map(math.isfinite, r[:2])):
                    why = two_reads_because(previous[key], r, drift)
                    tally = counts.setdefault(key[1], [0, 0])
                    tally[0] += why is None
                    tally[1] += 1
                    if why:
                        reasons[why] = reasons.get(why, 0) + 1
            previous = now
        total = [sum(c[0] for c in counts.values()), sum(c[1] for c in counts.values())]
        by_kind = ", ".join("%s %.0f%%" % (k, 100.0 * c[0] / c[1]) for k, c in sorted(counts.items()))
        why = ", ".join("%s %d" % kv for kv in sorted(reasons.items(), key=lambda kv: -kv[1])) or "none"
        print("RESULT one_read_share model=%s steps=%d from_step=%d bf16=%d margin=%.3f drift=%s share=%.3f (%s; two "
              "reads: %s)" % (name, steps, FROM_STEP, bf16, MARGIN, "off" if "--no-drift" in sys.argv else DRIFT_WEIGHT,
                              total[0] / total[1], by_kind, why))


if __name__ == "__main__":
    main()
