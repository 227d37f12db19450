#!/usr/bin/env python3
"""A two-rank DDP job (gloo, CPU) that ends right after its last step, with the race of
PyTorch's gloo threads at exit made likely (sys.setswitchinterval(1.0)): a gloo worker can drop
the last copy of a backward's context after the interpreter has begun to finalize, and the rank
aborts ("terminate called without an active exception"). With --attach each rank is attached
(no viewer listening: the hooks stay off, the exit wait is registered all the same).

    PYTHON ddp_exit_race.py --port P [--attach]        exit 0, or not 0 when a rank aborted
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))


def worker(rank, port, attach):
    sys.setswitchinterval(1.0)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    model = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hs = None
    if attach:
        import warnings
        import hookscope
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # no viewer is listening, on purpose
            hs = hookscope.attach(model, opt, address="unix:/nonexistent/hookscope-exit-race.sock")
    for _ in range(5):
        loss = model(torch.randn(16, 64)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        if hs is not None:
            hs.step(loss)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--attach", action="store_true")
    args = parser.parse_args()
    os.environ.pop("HOOKSCOPE_ADDRESS", None)
    mp.spawn(worker, args=(args.port, args.attach), nprocs=2, join=True)


if __name__ == "__main__":
    main()
