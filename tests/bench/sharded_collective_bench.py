"""What HookScope's one collective per step costs a sharded job (docs/distributed.md): the
all-gather of a [1 + slots, 4] float64 buffer that _sharded runs at each step's end, timed
alone on gloo CPU ranks. Usage: python tests/bench/sharded_collective_bench.py [RANKS] [SLOTS]"""
import datetime
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, world, slots, port, out):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=60))
    rows = torch.zeros((1 + slots, 4), dtype=torch.float64)
    parts = [torch.empty_like(rows) for _ in range(world)]
    for _ in range(20):
        dist.all_gather(parts, rows)
    dist.barrier()
    start, n = time.perf_counter(), 500
    for _ in range(n):
        dist.all_gather(parts, rows)
    if rank == 0:
        out.put((time.perf_counter() - start) / n)
    dist.destroy_process_group()


def main():
    world = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    slots = int(sys.argv[2]) if len(sys.argv) > 2 else 64
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = mp.get_context("spawn")
    out = context.SimpleQueue()
    mp.start_processes(worker, args=(world, slots, port, out), nprocs=world, start_method="spawn")
    seconds = out.get()
    print("%d ranks, %d slots (%d bytes a rank): %.1f us per step's all-gather" % (
        world, slots, (1 + slots) * 4 * 8, seconds * 1e6))


if __name__ == "__main__":
    main()
