"""What every trainer callback does the same way: attach once, end one HookScope step per
optimizer step with the loss and the trainer's scalars, keep evaluation out of the steps, and
turn a stop from HookScope into a message and a flag the trainer obeys, never a traceback."""

import numbers
import sys

import torch

from .._client import Stopped, attach


def innermost_optimizer(optimizer):
    """The torch optimizer inside the wrappers trainers hand out (Lightning's LightningOptimizer,
    Accelerate's AcceleratedOptimizer): its step hooks are the ones that fire."""
    seen = set()
    while optimizer is not None and id(optimizer) not in seen:
        seen.add(id(optimizer))
        inner = getattr(optimizer, "optimizer", None) or getattr(optimizer, "_optimizer", None)
        if not isinstance(inner, torch.optim.Optimizer):
            break
        optimizer = inner
    return optimizer


def number(value):
    """A float for a scalar a trainer logged (a Python number or a one-element tensor), else None."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            return None
        value = value.detach().float().item()
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


class StepDriver:
    """One attached model inside a trainer's loop."""

    def __init__(self, trainer_name, address=None, name=None, wait=False, timeout=None, job=None):
        self._trainer_name = trainer_name
        self._options = dict(address=address, name=name, wait=wait, timeout=timeout, job=job)
        self.attached = None
        self.stopped = None    # HookScope's reason, once it stopped the run

    def start(self, model, optimizer):
        if self.attached is None:
            self.attached = attach(model, innermost_optimizer(optimizer), **self._options)

    @property
    def connected(self):
        return self.attached is not None and self.attached.connected

    def step(self, loss, scalars):
        """Ends a HookScope step; returns True when HookScope asked the run to stop."""
        if not self.connected:
            return self.stopped is not None
        values = {}
        for key, value in scalars.items():
            v = number(value)
            if v is not None:
                values[str(key)] = v
        if loss is None and "loss" in values:
            loss = values["loss"]
        values.pop("loss", None)
        try:
            self.attached.step(loss, **values)
        except Stopped as stopped:
            self.stopped = str(stopped)
            sys.stderr.write("HookScope stopped the run (%s); %s ends training after this step.\n"
                             % (self.stopped, self._trainer_name))
            sys.stderr.flush()
            return True
        return False

    def suspend(self):
        if self.attached is not None:
            self.attached.suspend()

    def resume(self):
        if self.attached is not None:
            self.attached.resume()

    def close(self):
        if self.attached is not None:
            self.attached.close()
