"""A torch.distributed job as users write it (gloo on the CPU, DistributedDataParallel), every
rank attached to HookScope with the same two lines, for the distributed tests.

Each rank sees its own data. --reference DIR writes, per rank, what PyTorch's own hooks see
at step 0 (reference-RANK.json). Faults for the tests: --nudge R:S moves one weight of rank R
after its optimizer step S (the ranks' parameters then differ), --nan R:S puts a NaN into rank
R's input at step S, --die R:S kills rank R (SIGKILL) at the start of step S.
"""
import argparse
import datetime
import json
import os
import signal
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
import hookscope  # noqa: E402
from train_script import Reference  # noqa: E402


class Net(nn.Module):
    def __init__(self, width=16, depth=2):
        super().__init__()
        self.inp = nn.Linear(8, width)
        self.act = nn.ReLU()
        self.body = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)])
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        return self.head(self.body(self.act(self.inp(x))))


def fault(text):
    if not text:
        return None
    rank, step = text.split(":")
    return int(rank), int(step)


def worker(rank, args):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.collective_timeout))
    torch.manual_seed(0)  # the same initial weights on every rank, as DDP also ensures
    model = Net(args.width, args.depth)
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    reference = Reference(model) if args.reference else None
    if args.plain:
        hs = hookscope.attach(ddp, opt, address="unix:/nonexistent/hookscope.sock")  # the baseline: nothing listens
    else:
        hs = hookscope.attach(ddp, opt, wait=True, timeout=60)
    data = torch.Generator().manual_seed(100 + rank)  # each rank its own shard
    nudge, nan, die = fault(args.nudge), fault(args.nan), fault(args.die)
    stopped = None
    started = time.monotonic()
    for step in range(args.steps):
        if die == (rank, step):
            os.kill(os.getpid(), signal.SIGKILL)
        x = torch.randn(args.batch, 8, generator=data)
        y = torch.randn(args.batch, 4, generator=data)
        if nan == (rank, step):
            x[0, 0] = float("nan")
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        if nudge == (rank, step):
            with torch.no_grad():
                model.body[0][0].weight[0, 0] += 1e-3
        if reference is not None:
            reference.end_step()
        if args.sleep:
            time.sleep(args.sleep)  # a step that takes as long as real ones
        try:
            hs.step(loss)
        except hookscope.Stopped as exc:
            stopped = (step, str(exc))
            break
    if reference is not None:
        with open(os.path.join(args.reference, "reference-%d.json" % rank), "w") as f:
            json.dump([r for r in reference.records if r["step"] == 0], f)
    if args.report:
        with open(os.path.join(args.report, "rank-%d.json" % rank), "w") as f:
            json.dump({"steps": step + 1, "stopped": stopped, "seconds": time.monotonic() - started,
                       "bytes_sent": hs.bytes_sent,
                       "connected": hs.connected}, f)
    hs.close()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--width", type=int, default=16)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--reference")
    parser.add_argument("--report", help="folder for each rank's steps and how it ended")
    parser.add_argument("--nudge")
    parser.add_argument("--nan")
    parser.add_argument("--die")
    parser.add_argument("--plain", action="store_true", help="no viewer (a benchmark's baseline)")
    parser.add_argument("--sleep", type=float, default=0, help="seconds each step also takes")
    parser.add_argument("--collective-timeout", type=float, default=20)
    args = parser.parse_args()
    torch.set_num_threads(1)
    mp.spawn(worker, args=(args,), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
