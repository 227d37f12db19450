"""The Lightning callback, made for whichever package (lightning.pytorch or pytorch_lightning)
the trainer comes from: a Trainer accepts only its own package's Callback."""

from ._driver import StepDriver, number


def make_callback(Callback):
    class HookScopeCallback(Callback):
        """Attaches the LightningModule to HookScope for ``Trainer.fit``:

            trainer = Trainer(callbacks=[HookScopeCallback()])

        One HookScope step per optimizer step (with ``accumulate_grad_batches=k``, k batches and
        k calls of every module), carrying the loss and what the module logged with
        ``self.log``; validation is not captured. A stop from HookScope (a break in the
        recorder, Stop in the window) sets ``trainer.should_stop`` on every rank, and ``fit``
        returns normally. The arguments are those of ``hookscope.attach``.
        """

        def __init__(self, address=None, name=None, wait=False, timeout=None, job=None):
            super().__init__()
            self._driver = StepDriver("the Lightning Trainer", address=address, name=name, wait=wait,
                                      timeout=timeout, job=job)
            self._seen_step = None
            self._loss = None

        @property
        def attached(self):
            """The ``hookscope.Attached`` of this fit (None before it starts)."""
            return self._driver.attached

        def on_fit_start(self, trainer, pl_module):
            optimizers = list(getattr(trainer, "optimizers", None) or [])
            self._driver.start(pl_module, optimizers[0] if optimizers else None)
            self._seen_step = trainer.global_step
            self._loss = None

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            # Lightning's outputs carry the loss divided by accumulate_grad_batches: their sum
            # over the batches of one optimizer step is the step's mean loss.
            loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
            loss = number(loss)
            if loss is not None:
                self._loss = loss if self._loss is None else self._loss + loss
            if self._seen_step is None or trainer.global_step == self._seen_step:
                return  # still accumulating gradients: the optimizer has not stepped
            self._seen_step = trainer.global_step
            scalars = dict(trainer.callback_metrics)
            loss, self._loss = self._loss, None
            stop = self._driver.step(loss, scalars)
            if trainer.world_size > 1:  # every rank stops at the same step, or a collective hangs
                stop = bool(trainer.strategy.reduce_boolean_decision(stop, all=False))
            if stop:
                trainer.should_stop = True

        def on_validation_start(self, trainer, pl_module):
            self._driver.suspend()

        def on_validation_end(self, trainer, pl_module):
            self._driver.resume()

        def on_fit_end(self, trainer, pl_module):
            self._driver.close()

        def on_exception(self, trainer, pl_module, exception):
            self._driver.close()

    return HookScopeCallback
