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

:class:`DateProbe` measures the gradient noise scale while Lightning trains the baseline and
writes probe.json for ``plan_for(..., probe=)`` and ``date plan --probe``
(:mod:`date_engine.integrations.probing`).
"""

from __future__ import annotations

from typing import Any

from date_engine.errors import DateError, expect
from date_engine.integrations import ADAPTER_RATIOS, lightning_settings, mismatches, require
from date_engine.runplan import RunPlan

L = require("lightning", "lightning")

__all__ = ["DatePlan", "DateProbe", "optimizers_for", "trainer_settings"]


def trainer_settings(run: RunPlan) -> dict[str, Any]:
    """The ``lightning.Trainer`` arguments the plan sets: devices, accumulate_grad_batches,
    max_steps, gradient_clip_val."""
    return lightning_settings(run)["trainer"]


def optimizers_for(module: Any, run: RunPlan, date: bool | None = None) -> dict[str, Any]:
    """What ``configure_optimizers`` returns: the plan's optimizer (the base alone, or DATE over
    it with ``date=True``; by default :data:`~date_engine.integrations.ADAPTER_RATIOS`) and its LR
    schedule with ``interval: "step"`` (stepped once per optimizer step, after accumulation)."""
    from date_engine.optim.build import optimizer_for
    from date_engine.schedule import scheduler_for

    expect(date, (bool, type(None)), "optimizers_for: date", "True, False or None")
    optimizer = optimizer_for(module, run, date=ADAPTER_RATIOS if date is None else date)
    return {"optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler_for(optimizer, run), "interval": "step",
                             "frequency": 1}}


class DatePlan(L.pytorch.Callback):
    """Checks the Trainer and the training dataloader against the plan before the first step."""

    def __init__(self, run: RunPlan | None = None, **kwargs: Any) -> None:
        if "plan" in kwargs:
            raise DateError("DatePlan takes the RunPlan as run (plan= was its old name); write "
                            "DatePlan(run).")
        if kwargs:
            raise DateError(f"DatePlan takes one argument, run; got {', '.join(kwargs)}.")
        expect(run, RunPlan, "DatePlan: run", "a RunPlan (date_engine.plan_for(...))")
        self.run = run

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        loader = trainer.train_dataloader
        per_device = getattr(loader, "batch_size", None)
        if per_device is None:  # a batch sampler of the user's own: trust its batches
            per_device = self.run.split.micro_batch
        wrong = mismatches(self.run, trainer.world_size, per_device,
                           trainer.accumulate_grad_batches, trainer.max_steps)
        if wrong:
            want = lightning_settings(self.run)
            t = want["trainer"]
            raise DateError(
                f"the Trainer's settings do not train the plan: {'; '.join(wrong)}; use "
                f"Trainer(devices={t['devices']}, accumulate_grad_batches="
                f"{t['accumulate_grad_batches']}, max_steps={t['max_steps']}) and a dataloader of "
                f"batch_size={want['dataloader_batch_size']} (trainer_settings(run) gives them).")


class DateProbe(L.pytorch.Callback):
    """``date probe`` for a baseline Lightning trains: measures the gradient noise scale during
    the run and writes ``path`` (probe.json) when it ends. ``spec``: the baseline (a Spec, its
    YAML or a shipped baseline's name, with ``baseline.dataset_size``), whose batch must be
    devices × the dataloader's batch × ``accumulate_grad_batches``, with two or more
    micro-batches per step. ``share``: stop after that share of the baseline's steps (default:
    the whole run). No LR check (docs/noise.md)."""

    def __init__(self, path: str, spec: Any, *, share: float | None = None) -> None:
        from date_engine.integrations.probing import check_probe_args
        from date_engine.spec import spec_with

        check_probe_args(path, share)
        self.path, self.spec, self.share = path, spec_with(spec), share
        self.meter: Any = None
        self.probe: Any = None
        """The probe written, None before the end or where too few steps were measured."""

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        from date_engine.integrations.probing import InRunProbe
        from date_engine.planning import plan_for

        per_device = getattr(trainer.train_dataloader, "batch_size", None)
        n, world = trainer.accumulate_grad_batches, trainer.world_size
        b0 = self.spec.baseline.batch_size
        if per_device is None or per_device * n * world != b0:
            raise DateError(f"DateProbe: the Trainer trains batches of {per_device} × "
                            f"{n} accumulated × {world} devices, not the baseline's {b0}; give "
                            "the dataloader and accumulate_grad_batches the baseline's split.")
        run = plan_for(self.spec, batch=b0, devices=world, micro_batch=per_device)
        self.meter = InRunProbe(self.spec, run, self.path, lambda: self._last, share=self.share,
                                run_dir=str(trainer.default_root_dir))
        self.meter.attach(pl_module)
        self._last, self._micro_batches = False, 0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        n = trainer.accumulate_grad_batches
        self._last = (batch_idx + 1) % n == 0 or batch_idx + 1 == trainer.num_training_batches

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._micro_batches += 1
        self.meter.loss(loss.detach() * trainer.accumulate_grad_batches)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self.meter.end_step(self._micro_batches):
            trainer.should_stop = True
        self._micro_batches = 0

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.meter.detach()
        self.probe = self.meter.write()
