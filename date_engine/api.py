"""The one way in: a baseline and a target batch (or devices × micro-batch) → the run's plan and
its split; the optimizer and the LR scheduler that train with it.

``date plan``, ``date scale``, ``date sweep`` and the adapters for other trainers
(:mod:`date_engine.integrations`) all come through :func:`plan_for`::

    from date_engine import baseline, plan_for, optimizer_for, scheduler_for

    spec = baseline(batch_size=256, lr=1e-3, warmup_epochs=1, epochs=10, dataset_size=60_000,
                    optimizer="adamw", weight_decay=0.01)
    run = plan_for(spec, batch=8192, devices=8)       # or plan_for("lenet-mnist", devices=8, ...)
    run.plan.peak_lr, run.split.micro_batch, run.split.accumulation_steps
    opt = optimizer_for(model, run)                    # DATE over AdamW with the plan's β2, ε, λ
    sched = scheduler_for(opt, run)                    # step it once per optimizer step

This module is a façade: :func:`baseline` is its own; :func:`plan_for` lives in
:mod:`date_engine.runplan`, :func:`spec_with` in :mod:`date_engine.spec`, and the torch-based
builders where they are built (:mod:`date_engine.optim.build`, :mod:`date_engine.schedule`) and
:func:`train_run` with the trainer (:mod:`date_engine.train.launch`), re-exported here and loaded
on first use. Nothing here is for the command line
(:mod:`date_engine.commands` is).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from date_engine.planning import plan_for
from date_engine.spec import Spec, parse_spec, spec_with

if TYPE_CHECKING:
    from date_engine.optim.build import optimizer_for
    from date_engine.schedule import scheduler_for
    from date_engine.train.launch import train_run

__all__ = ["baseline", "optimizer_for", "plan_for", "scheduler_for", "spec_with", "train_run"]

_BUILT_ELSEWHERE = {"optimizer_for": "date_engine.optim.build",
                    "scheduler_for": "date_engine.schedule",
                    "train_run": "date_engine.train.launch"}
"""The torch-based builders and the trainer's entry this module re-exports, imported on first
use."""


def __getattr__(name: str) -> Any:
    if name in _BUILT_ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_BUILT_ELSEWHERE[name]), name)
    raise AttributeError(f"module 'date_engine.api' has no attribute {name!r}")


def baseline(*, batch_size: int, lr: float, warmup_epochs: float = 0.0,
             epochs: float | None = None, iterations: int | None = None,
             dataset_size: int | None = None, optimizer: str = "adamw",
             recipe: str | None = None, date: dict[str, Any] | None = None,
             **options: Any) -> Spec:
    """A validated spec from a baseline given in Python: B0, η0, the warmup in epochs, the length
    (``epochs`` or ``iterations``), n, the optimizer by catalog name and its options (``betas``,
    ``eps``, ``weight_decay``, ``momentum``, ...), and optionally the ``date:`` section (e.g.
    ``{"rule": "paper"}``). Bad values raise :class:`~date_engine.errors.SpecError` naming the
    field."""
    raw: dict[str, Any] = {"baseline": {
        "batch_size": batch_size, "lr": lr, "warmup_epochs": warmup_epochs,
        "optimizer": {"name": optimizer, **options}}}
    for key, value in (("epochs", epochs), ("iterations", iterations),
                       ("dataset_size", dataset_size)):
        if value is not None:
            raw["baseline"][key] = value
    if recipe is not None:
        raw["recipe"] = recipe
    if date:
        raw["date"] = date
    return parse_spec(raw, source="baseline()")
