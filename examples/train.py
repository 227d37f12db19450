"""A small training script attached to HookScope: the quick start of the README.

A CNN learns to tell two kinds of synthetic 28x28 images apart (no download). Start HookScope
first (File > Attach in the window, or `hookscope-cli record`), then run this script with the
HOOKSCOPE_ADDRESS it shows; `import hookscope` needs PYTHONPATH=<HookScope>/python (or
`pip install ./python`). Without a HookScope the script waits `--wait` seconds, then trains
unhooked.
"""
import argparse

import torch
import torch.nn as nn

import hookscope


def batches(steps, batch=32, seed=0):
    """Pairs (images, labels): class 1 has a bright square in the middle, class 0 does not."""
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        y = torch.randint(0, 2, (batch,), generator=g)
        x = torch.randn(batch, 1, 28, 28, generator=g)
        x[y == 1, :, 10:18, 10:18] += 0.4
        yield x, y


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--wait", type=float, default=30, help="seconds to wait for HookScope")
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(16 * 7 * 7, 32), nn.ReLU(), nn.Linear(32, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    with hookscope.attach(model, optimizer, wait=True, timeout=args.wait) as hs:
        for x, y in batches(args.steps):
            out = model(x)
            loss = loss_fn(out, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            accuracy = (out.argmax(1) == y).float().mean().item()
            hs.step(loss, accuracy=accuracy)
    print(f"trained {args.steps} steps: loss {loss.item():.4f}, accuracy {accuracy:.2f}")


if __name__ == "__main__":
    main()
