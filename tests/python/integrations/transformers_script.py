"""A Hugging Face Trainer run with HookScope's callback, for the integration tests.

train_script.Net behind a forward that takes labels and returns the loss, as Trainer expects;
evaluation every two steps. --reference FILE as in lightning_script.py.
"""
import argparse
import json
import os
import sys
import tempfile

import torch
import torch.nn as nn

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "attach"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "python"))
from train_script import Net  # noqa: E402
from lightning_script import TrainingReference  # noqa: E402


class Classifier(nn.Module):
    def __init__(self, nan_at):
        super().__init__()
        self.net = Net()
        self.nan_at = nan_at
        self.step = 0

    def forward(self, x, labels=None):
        if self.training and 0 <= self.nan_at <= self.step:
            x = x * float("nan")
        logits = self.net(x)
        loss = nn.functional.cross_entropy(logits, labels) if labels is not None else None
        return {"loss": loss, "logits": logits}


class Rows(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(0)
        self.x, self.y = torch.randn(n, 8, generator=g), torch.randint(0, 4, (n,), generator=g)

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--nan-at", type=int, default=-1, help="NaN inputs from this optimizer step on")
    parser.add_argument("--reference")
    args = parser.parse_args()

    from transformers import Trainer, TrainerCallback, TrainingArguments
    from hookscope.integrations.transformers import HookScopeCallback

    torch.manual_seed(0)
    model = Classifier(args.nan_at)

    class ReferenceSteps(TrainerCallback):
        def __init__(self):
            self.reference = TrainingReference(model)

        def on_step_end(self, args_, state, control, **kwargs):
            self.reference.end_step()
            model.step = state.global_step

    reference = ReferenceSteps() if args.reference else None
    callbacks = [HookScopeCallback(wait=True, timeout=60)] + ([reference] if reference else [])
    if not reference:
        class Steps(TrainerCallback):
            def on_step_end(self, args_, state, control, **kwargs):
                model.step = state.global_step
        callbacks.append(Steps())
    with tempfile.TemporaryDirectory() as out:
        training = TrainingArguments(
            output_dir=out, max_steps=args.steps, per_device_train_batch_size=16,
            per_device_eval_batch_size=32, gradient_accumulation_steps=args.accumulate, learning_rate=0.05,
            logging_steps=1, eval_strategy="steps", eval_steps=2, save_strategy="no", report_to=[],
            use_cpu=True, dataloader_num_workers=0, seed=0, disable_tqdm=True)
        trainer = Trainer(model=model, args=training, train_dataset=Rows(256), eval_dataset=Rows(64),
                          callbacks=callbacks)
        result = trainer.train()
    if reference:
        with open(args.reference, "w") as f:
            json.dump(reference.reference.records, f)
    print("train returned at step %d" % result.global_step, flush=True)


if __name__ == "__main__":
    main()
