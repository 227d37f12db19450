"""A training script as users write them, attached to HookScope, for the attach tests.

A model with a module called twice, a tuple output and an in-place ReLU, fed by a DataLoader
with two forked workers. With --reference FILE it also computes, with PyTorch's own hooks,
the statistics HookScope should report, and writes them there as JSON.
"""
import argparse
import json
import math
import os
import signal
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))
import hookscope  # noqa: E402

OLD_TENSOR_HOOKS = int(torch.__version__.split(".")[0]) < 2


class Pair(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(16, 16)
        self.b = nn.Linear(16, 16)

    def forward(self, x):
        return self.a(x), self.b(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.act = nn.ReLU(inplace=True)
        self.shared = nn.Linear(16, 16)
        self.pair = Pair()
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = self.act(self.inp(x))
        h = torch.tanh(self.shared(h))
        h = self.shared(h)
        a, b = self.pair(h)
        return self.head(a * b)


def stats(t):
    t = t.detach().double().flatten()
    finite = t[torch.isfinite(t)]
    n = finite.numel()
    return {
        "numel": t.numel(),
        "min": finite.min().item() if n else float("nan"),
        "max": finite.max().item() if n else float("nan"),
        "mean": finite.mean().item() if n else float("nan"),
        "std": finite.std().item() if n > 1 else 0.0,
        "l2norm": finite.norm().item(),
        "zero_frac": (t == 0).double().mean().item() if t.numel() else 0.0,
        "nan_count": int(torch.isnan(t).sum()),
        "inf_count": int(torch.isinf(t).sum()),
    }


def tensors(value, out):
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (tuple, list)):
        for v in value:
            tensors(v, out)
    elif isinstance(value, dict):
        for v in value.values():
            tensors(v, out)
    return out


class Reference:
    """PyTorch's own hooks on every module: what HookScope must report."""

    def __init__(self, model, only=None):
        self.records = []
        self.step = 0
        self.calls = {}
        for path, module in model.named_modules():
            if only is None or path == only:
                module.register_forward_hook(self.hook(path))

    def hook(self, path):
        def forward_hook(module, inputs, output):
            call = self.calls.get(path, 0)
            self.calls[path] = call + 1
            step = self.step
            for index, t in enumerate(tensors(output, [])):
                self.records.append({"step": step, "module": path, "call": call, "kind": "activation",
                                     "index": index, **stats(t)})
                if t.requires_grad:
                    def grad_hook(g, index=index, call=call):
                        self.records.append({"step": step, "module": path, "call": call, "kind": "gradient",
                                             "index": index, **stats(g)})
                    # PyTorch 1.x: hook the tensor's current grad_fn, as a hook on this module alone would.
                    if OLD_TENSOR_HOOKS and t._backward_hooks is not None and getattr(t, "_ref_fn", None) is not t.grad_fn:
                        t._backward_hooks = None
                    t.register_hook(grad_hook)
                    if OLD_TENSOR_HOOKS:
                        t._ref_fn = t.grad_fn
        return forward_hook

    def end_step(self):
        self.step += 1
        self.calls = {}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--reference")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sleep", type=float, default=0.0)
    parser.add_argument("--kill-self-at", type=int, default=-1)
    parser.add_argument("--nan-at", type=int, default=-1)
    parser.add_argument("--only", help="reference hooks on this module only")
    parser.add_argument("--detach", action="store_true", help="run without HookScope")
    parser.add_argument("--progress", help="a file that holds the number of steps sent so far")
    args = parser.parse_args()

    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,)))
    loader = torch.utils.data.DataLoader(
        data, batch_size=16, shuffle=True, num_workers=args.workers,
        generator=torch.Generator().manual_seed(0),
        multiprocessing_context="fork" if args.workers else None)
    reference = Reference(model, args.only) if args.reference else None
    hs = None if args.detach else hookscope.attach(model, optimizer, wait=True, timeout=30)
    step = 0
    try:
        while step < args.steps:
            for x, y in loader:
                if step == args.nan_at:
                    x = x * float("nan")
                loss = nn.functional.cross_entropy(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if reference:
                    reference.end_step()
                if hs is not None:
                    hs.step(loss, batch=float(step))
                    if args.progress:  # for a test to wait on: the steps sent, written whole
                        with open(args.progress + ".new", "w") as f:
                            f.write("%d %d" % (step + 1, hs.connected))
                        os.replace(args.progress + ".new", args.progress)
                if step == args.kill_self_at:
                    os.kill(os.getpid(), signal.SIGKILL)
                step += 1
                time.sleep(args.sleep)
                if step >= args.steps:
                    break
    except hookscope.Stopped as stopped:
        print("stopped:", stopped, flush=True)
        sys.exit(7)
    if hs is not None:
        print("connected at end:", hs.connected, flush=True)
        hs.close()
    if reference:
        with open(args.reference, "w") as f:
            json.dump(reference.records, f)
    print("finished", step, "steps", flush=True)


if __name__ == "__main__":
    main()
