"""A sharded torch.distributed job as users write it (gloo on the CPU): FSDP2's fully_shard on an
MLP with uneven shards or a transformer block, or tensor parallel Linears (ColwiseParallel,
RowwiseParallel), every rank attached to HookScope after sharding, for the sharded tests.

--reference DIR: rank 0 writes reference.json, what tensor_statistics gives for each
parameter's and gradient's whole tensor (DTensor.full_tensor(), gathered by this script before
the optimizer step) at every step. --count DIR: every rank writes collectives-RANK.json, each
collective it issued from HookScope's code with the HookScope function that issued it.
"""
import argparse
import datetime
import json
import os
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = os.path.normpath(os.path.join(HERE, "..", "..", "..", "python"))
sys.path.insert(0, PACKAGE)
import hookscope  # noqa: E402

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # PyTorch before 2.6
    from torch.distributed._composable.fsdp import fully_shard
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402


def build(kind, mesh):
    torch.manual_seed(0)
    if kind == "mlp":  # 10 rows over 4 ranks: 3, 3, 3, 1; 7 and 5 rows over 2 ranks: 4 and 3, 3 and 2
        model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 7), nn.Tanh(), nn.Linear(7, 5))
        for layer in (model[0], model[2], model[4]):
            fully_shard(layer, mesh=mesh)
        return fully_shard(model, mesh=mesh), (16, 8)
    if kind == "block":
        model = nn.TransformerEncoderLayer(d_model=12, nhead=2, dim_feedforward=20, dropout=0.0, batch_first=True)
        return fully_shard(model, mesh=mesh), (4, 6, 12)
    if kind.startswith("fsdp1"):
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy
        model = nn.Sequential(nn.Linear(8, 10), nn.ReLU(), nn.Linear(10, 7))
        return FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=kind == "fsdp1",
                                        auto_wrap_policy=ModuleWrapPolicy({nn.Linear})), (16, 8)
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    model = nn.Sequential(nn.Linear(8, 12), nn.ReLU(), nn.Linear(12, 6))
    return parallelize_module(model, mesh, {"0": ColwiseParallel(), "2": RowwiseParallel()}), (16, 8)


def reference_row(name, what, t):
    s = hookscope.tensor_statistics(t)
    return {"name": name, "kind": what, "shape": list(t.shape), **{k: v for k, v in s.items() if k != "backend"}}


def count_collectives(rank, folder):
    """Wraps torch.distributed's and the functional collectives: each call from HookScope's
    package is written down with the HookScope functions on its stack."""
    calls = []
    path = os.path.join(folder, "collectives-%d.json" % rank)

    def wrap(module, name):
        original = getattr(module, name)

        def counted(*args, **kwargs):
            ours = [f.name for f in traceback.extract_stack() if f.filename.startswith(os.path.join(PACKAGE, "hookscope"))]
            if ours:
                calls.append({"op": name, "stack": ours, "step": STEP[0]})
                with open(path, "w") as f:
                    json.dump(calls, f)
            return original(*args, **kwargs)
        setattr(module, name, counted)

    for name in ("all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter_tensor", "broadcast",
                 "barrier", "reduce", "gather", "scatter", "all_to_all_single", "send", "recv"):
        wrap(dist, name)
    import torch.distributed._functional_collectives as funcol
    for name in ("all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "all_to_all_single", "broadcast"):
        if hasattr(funcol, name):
            wrap(funcol, name)
    with open(path, "w") as f:
        json.dump(calls, f)


STEP = [0]


def worker(rank, args):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    dist.init_process_group("gloo", rank=rank, world_size=args.world, timeout=datetime.timedelta(seconds=120))
    mesh = init_device_mesh("cpu", (args.world,))
    model, shape = build(args.model, mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    if args.count:
        count_collectives(rank, args.count)
    if rank == args.unattached_rank or args.plain:  # no viewer listens there: this rank trains unhooked
        hs = hookscope.attach(model, opt, address="unix:/nonexistent/hookscope.sock")
    else:
        hs = hookscope.attach(model, opt, wait=True, timeout=60)
    reference, outputs = [], []
    if args.reference:  # each module's output, as a PyTorch forward hook sees it (torch ops)
        def seen(name):
            def hook(module, inputs, out):
                if isinstance(out, torch.Tensor):
                    outputs.append({"step": STEP[0], "name": name, "min": float(out.min()),
                                    "max": float(out.max())})
            return hook
        for name, module in model.named_modules():
            module.register_forward_hook(seen(name))
    for step in range(args.steps):
        STEP[0] = step
        torch.manual_seed(100 * step + rank)  # each rank its own data
        x = torch.randn(*shape)
        if args.nan_at == step and rank == 0:
            x[0] = float("nan")
        loss = model(x).float().pow(2).mean()
        loss.backward()
        if args.reference:  # the whole tensors, gathered by the script itself (every rank takes part)
            for name, p in model.named_parameters():
                full, grad = p.full_tensor(), p.grad.full_tensor() if p.grad is not None else None
                if rank == 0:
                    reference.append({"step": step, **reference_row(name, "param", full)})
                    if grad is not None:
                        reference.append({"step": step, **reference_row(name, "param_grad", grad)})
        opt.step()
        hs.step(loss)
        opt.zero_grad()
    hs.close()
    if args.reference:
        with open(os.path.join(args.reference, "outputs-%d.json" % rank), "w") as f:
            json.dump(outputs, f)
    if rank == 0 and args.reference:
        with open(os.path.join(args.reference, "reference.json"), "w") as f:
            json.dump(reference, f)
    dist.barrier()
    dist.destroy_process_group()
    print("rank %d finished" % rank, file=sys.stderr, flush=True)  # all that is left is the exit


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--model", choices=("mlp", "block", "tp", "fsdp1", "fsdp1-flat"), default="mlp")
    parser.add_argument("--reference")
    parser.add_argument("--count")
    parser.add_argument("--nan-at", type=int, default=-1)
    parser.add_argument("--unattached-rank", type=int, default=-1)
    parser.add_argument("--plain", action="store_true", help="no rank attached: the baseline")
    args = parser.parse_args()
    mp.spawn(worker, args=(args,), nprocs=args.world, join=True)


if __name__ == "__main__":
    main()
