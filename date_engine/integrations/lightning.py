"""The plan in PyTorch Lightning: ``pip install -e '.[lightning]'``.

::

    from date_engine import plan_for
    from date_engine.integrations.lightning import DatePlan, optimizers_for, trainer_settings

    run = plan_for("my-baseline.yaml", batch=8192, devices=64)

    class Model(L.LightningModule):
        def configure_optimizers(self):
            return optimizers_for(self, run)          # DATE + the plan's LR, stepped per step

    trainer = L.Trainer(**trainer_settings(run), callbacks=[DatePlan(run)])
    trainer.fit(Model(), DataLoader(data, batch_size=run.split.micro_batch, shuffle=True))

:class:`DatePlan` checks, before the first step, that devices × the dataloader's batch ×
``accumulate_grad_batches`` is the plan's batch and ``max_steps`` its steps, and refuses in one
sentence with the values to set. The measured batch ramp is not offered here: Lightning changes
accumulation only at epoch boundaries (``GradientAccumulationScheduler``), while a measured ramp
moves at the step its noise scale passes a rung (docs/integrations.md).
"""

from __future__ import annotations

from typing import Any

from date_engine.errors import DateError, expect
from date_engine.integrations import ADAPTER_RATIOS, lightning_settings, mismatches, require
from date_engine.runplan import RunPlan

L = require("lightning", "lightning")

__all__ = ["DatePlan", "optimizers_for", "trainer_settings"]


def trainer_settings(run: RunPlan) -> dict[str, Any]:
    """The ``lightning.Trainer`` arguments the plan sets: devices, accumulate_grad_batches,
    max_steps, gradient_clip_val."""
    return lightning_settings(run)["trainer"]


def optimizers_for(module: Any, run: RunPlan, date: bool | None = None) -> dict[str, Any]:
    """What ``configure_optimizers`` returns: the plan's optimizer (the base alone, or DATE over
    it with ``date=True``; by default :data:`~date_engine.integrations.ADAPTER_RATIOS`) and its LR
    schedule with ``interval: "step"`` (stepped once per optimizer step, after accumulation)."""
    from date_engine.api import optimizer_for, scheduler_for

    expect(date, (bool, type(None)), "optimizers_for: date", "True, False or None")
    optimizer = optimizer_for(module, run, date=ADAPTER_RATIOS if date is None else date)
    return {"optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler_for(optimizer, run), "interval": "step",
                             "frequency": 1}}


class DatePlan(L.pytorch.Callback):
    """Checks the Trainer and the training dataloader against the plan before the first step."""

    def __init__(self, plan: RunPlan) -> None:
        expect(plan, RunPlan, "DatePlan: plan", "a RunPlan (date_engine.plan_for(...))")
        self.plan = plan

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        loader = trainer.train_dataloader
        per_device = getattr(loader, "batch_size", None)
        if per_device is None:  # a batch sampler of the user's own: trust its batches
            per_device = self.plan.split.micro_batch
        wrong = mismatches(self.plan, trainer.world_size, per_device,
                           trainer.accumulate_grad_batches, trainer.max_steps)
        if wrong:
            want = lightning_settings(self.plan)
            t = want["trainer"]
            raise DateError(
                f"the Trainer's settings do not train the plan: {'; '.join(wrong)}; use "
                f"Trainer(devices={t['devices']}, accumulate_grad_batches="
                f"{t['accumulate_grad_batches']}, max_steps={t['max_steps']}) and a dataloader of "
                f"batch_size={want['dataloader_batch_size']} (trainer_settings(run) gives them).")
