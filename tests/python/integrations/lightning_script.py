"""A Lightning fit with HookScope's callback, for the integration tests.

train_script.Net inside a LightningModule that logs a scalar with self.log and validates every
two batches. With --reference FILE, PyTorch's own hooks record what HookScope should report for
the training forwards and backwards (FILE.rank{R} per rank under DDP).
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "attach"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
from train_script import Net, Reference  # noqa: E402


class TrainingReference(Reference):
    """Reference hooks that see training forwards only (validation runs in eval mode)."""

    def hook(self, path):
        inner = super().hook(path)

        def forward_hook(module, inputs, output):
            if module.training:
                inner(module, inputs, output)
        return forward_hook


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--package", default="lightning", choices=["lightning", "pytorch_lightning"])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--nan-at", type=int, default=-1, help="NaN inputs from this optimizer step on")
    parser.add_argument("--reference")
    args = parser.parse_args()

    if args.package == "lightning":
        import lightning.pytorch as pl
        from hookscope.integrations.lightning import HookScopeCallback
    else:
        import pytorch_lightning as pl
        from hookscope.integrations.pytorch_lightning import HookScopeCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = torch.compile(Net()) if args.compile else Net()

        def training_step(self, batch, batch_idx):
            x, y = batch
            if 0 <= args.nan_at <= self.trainer.global_step:
                x = x * float("nan")
            loss = nn.functional.cross_entropy(self.net(x), y)
            self.log("batch_mean", x.mean())
            return loss

        def validation_step(self, batch, batch_idx):
            x, y = batch
            self.log("val_loss", nn.functional.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    class ReferenceSteps(pl.Callback):
        def __init__(self):
            self.reference = None
            self.seen = 0

        def on_fit_start(self, trainer, pl_module):
            self.reference = TrainingReference(pl_module)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step != self.seen:
                self.seen = trainer.global_step
                self.reference.end_step()

    torch.manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(256, 8), torch.randint(0, 4, (256,)))
    train = torch.utils.data.DataLoader(data, batch_size=16)
    val = torch.utils.data.DataLoader(data, batch_size=32)
    hookscope_cb = HookScopeCallback(wait=True, timeout=60)
    callbacks = [hookscope_cb]
    reference = ReferenceSteps() if args.reference else None
    if reference:
        callbacks.append(reference)
    trainer = pl.Trainer(
        accelerator="cpu", devices=args.devices, strategy="ddp" if args.devices > 1 else "auto",
        max_steps=args.steps, accumulate_grad_batches=args.accumulate, precision=args.precision,
        val_check_interval=2, limit_val_batches=2, num_sanity_val_steps=1, callbacks=callbacks,
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Module(), train, val)
    if reference:
        path = args.reference + (".rank%d" % trainer.global_rank if args.devices > 1 else "")
        with open(path, "w") as f:
            json.dump(reference.reference.records, f)
    print("fit returned at step %d, should_stop=%s, rank %d" % (trainer.global_step, trainer.should_stop,
                                                                 trainer.global_rank), flush=True)


if __name__ == "__main__":
    main()
