"""The plan in Hugging Face's ``Trainer``: ``pip install 'date-engine[hf]'``.

::

    from date_engine import plan_for
    from date_engine.integrations.hf import DateTrainer, training_arguments

    run = plan_for("my-baseline.yaml", batch=8192, devices=64)
    args = training_arguments(run, output_dir="out")       # batch split, steps, LR, β2, ε, λ
    trainer = DateTrainer(model=model, args=args, train_dataset=data, plan=run)
    trainer.train()                                         # torchrun --nproc-per-node ... as usual

:class:`DateTrainer` overrides ``create_optimizer`` and ``create_scheduler`` (HF refuses
``optimizers=(...)`` under FSDP): DATE over the base optimizer with the plan's options, and the
plan's LR for every optimizer step. At ``train()`` it checks that world size × per-device batch ×
accumulation is the plan's batch and that ``auto_find_batch_size`` is off (it would halve the
per-device batch and with it the global batch), before any step.
"""

from __future__ import annotations

from typing import Any

from date_engine.errors import DateError
from date_engine.integrations import hf_arguments, mismatches, require
from date_engine.runplan import RunPlan

transformers = require("transformers", "hf")
require("accelerate", "hf")

__all__ = ["DateTrainer", "training_arguments"]


def training_arguments(run: RunPlan, output_dir: str, grad_clip: float | None = None,
                       **overrides: Any) -> transformers.TrainingArguments:
    """``TrainingArguments`` with the fields the plan sets (:func:`~date_engine.integrations.
    hf_arguments`) and ``overrides`` for the rest (logging, saving, precision, ...)."""
    fields = {**hf_arguments(run, grad_clip), **overrides}
    return transformers.TrainingArguments(output_dir=output_dir, **fields)


class DateTrainer(transformers.Trainer):
    """``transformers.Trainer`` that trains with a date_engine plan: ``plan=`` a RunPlan (from
    ``date_engine.plan_for``); ``date=False`` for the base optimizer without DATE's ratios."""

    def __init__(self, *args: Any, plan: RunPlan, date: bool = True, **kwargs: Any) -> None:
        if not isinstance(plan, RunPlan):
            raise TypeError(f"DateTrainer: plan= takes a RunPlan (date_engine.plan_for(...)), got "
                            f"{type(plan).__name__}.")
        if kwargs.get("optimizers", (None, None)) != (None, None):
            raise ValueError("DateTrainer builds the plan's optimizer and scheduler; leave "
                             "optimizers= out.")
        self.plan, self.use_date = plan, date
        super().__init__(*args, **kwargs)

    def create_optimizer(self, model: Any = None) -> Any:
        from date_engine.api import optimizer_for

        if self.optimizer is None:
            self.optimizer = optimizer_for(model if model is not None else self.model, self.plan,
                                           date=self.use_date)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        from date_engine.api import scheduler_for

        if self.lr_scheduler is None:
            self.lr_scheduler = scheduler_for(optimizer or self.optimizer, self.plan)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self.check_plan()
        return super().train(*args, **kwargs)

    def check_plan(self) -> None:
        """Refuse, in one sentence with the values to set, settings that train another batch or
        another number of steps than the plan's."""
        a = self.args
        if a.auto_find_batch_size:
            raise DateError("auto_find_batch_size halves the per-device batch without raising "
                            "gradient_accumulation_steps, so the global batch would leave the "
                            "plan's; set auto_find_batch_size=False and give the micro-batch "
                            "that fits (date plan --devices N --micro-batch M prints the "
                            "accumulation that keeps the batch).")
        wrong = mismatches(self.plan, a.world_size, a.per_device_train_batch_size,
                           a.gradient_accumulation_steps, a.max_steps)
        if wrong:
            want = hf_arguments(self.plan)
            raise DateError(
                f"the Trainer's settings do not train the plan: {'; '.join(wrong)}; set "
                f"per_device_train_batch_size={want['per_device_train_batch_size']}, "
                f"gradient_accumulation_steps={want['gradient_accumulation_steps']} and "
                f"max_steps={want['max_steps']} on {self.plan.split.world_size} processes "
                "(training_arguments(plan, ...) sets them).")
