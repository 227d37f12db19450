"""``HookScopeCallback`` for Hugging Face's ``transformers.Trainer``."""

from transformers import TrainerCallback

from ._driver import StepDriver


class HookScopeCallback(TrainerCallback):
    """Attaches the Trainer's model to HookScope:

        trainer = Trainer(..., callbacks=[HookScopeCallback()])

    One HookScope step per optimizer step (``gradient_accumulation_steps`` batches each),
    carrying the loss, learning rate and the rest of what the Trainer logs at that step (it logs
    every ``logging_steps``: set 1 for a loss at every step); evaluation is not captured. A stop
    from HookScope (a break in the recorder, Stop in the window) sets
    ``control.should_training_stop`` and ``train()`` returns normally. The arguments are those of
    ``hookscope.attach``.
    """

    def __init__(self, address=None, name=None, wait=False, timeout=None, job=None):
        self._driver = StepDriver("the Trainer", address=address, name=name, wait=wait, timeout=timeout, job=job)
        self._pending = False   # a step ended; its loss comes with the Trainer's on_log
        self._evaluating = False

    @property
    def attached(self):
        """The ``hookscope.Attached`` of this training (None before it starts)."""
        return self._driver.attached

    def on_train_begin(self, args, state, control, model=None, optimizer=None, **kwargs):
        self._driver.start(model, optimizer)

    def _end_step(self, control, logs):
        self._pending = False
        if self._driver.step(None, logs or {}):
            control.should_training_stop = True

    def _evaluation_next(self, control):
        # The Trainer evaluates right after this callback returns: keep it out of the next step.
        if control.should_evaluate and not self._evaluating:
            self._evaluating = True
            self._driver.suspend()

    def on_step_end(self, args, state, control, **kwargs):
        if self._pending:  # the last step's log never came
            self._end_step(control, None)
        if control.should_log:
            self._pending = True   # the Trainer logs this step's loss next: end it there
        else:
            self._end_step(control, None)
        self._evaluation_next(control)
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        self._evaluation_next(control)
        return control

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._pending:
            logs = dict(logs or {})
            if "learning_rate" in logs:
                logs.setdefault("lr", logs.pop("learning_rate"))
            self._end_step(control, logs)
        return control

    def on_evaluate(self, args, state, control, **kwargs):
        if self._evaluating:
            self._evaluating = False
            self._driver.resume()
        return control

    def on_train_end(self, args, state, control, **kwargs):
        if self._pending:
            self._end_step(control, None)
        self._driver.close()
        return control
