"""date_engine: DATE (Dynamic Adaptive-Tuning Engine, You et al., SC'19) for large-batch training.

From a small-batch baseline that works, derive the plan for a large batch — the peak learning rate
and the optimizer's settings by the optimizer family's rule (the paper's √k with ``date.rule:
paper``), linear-epoch warmup (LEGW), decay to a floor — and train with it::

    from date_engine import load_spec, optimizer_for, plan_for, scheduler_for, train_run

    run = plan_for("lenet-mnist", batch=8192, devices=8)
    run.plan.peak_lr, run.plan.warmup_epochs, run.plan.total_iterations
    run.plan.lr(1)                                           # LR of optimizer step 1
    run.split.micro_batch, run.split.accumulation_steps      # how 8192 splits over 8 devices
    optimizer = optimizer_for(model, run)                    # DATE over the plan's base optimizer
    scheduler = scheduler_for(optimizer, run)                # step it once per optimizer step
    summary = train_run(load_spec("lenet-mnist"), run, "runs/mine")  # date scale's trainer

Inside Hugging Face's Trainer or Lightning: :mod:`date_engine.integrations`. Importing this
package does not import torch; the torch-based names load on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.9.0"

# name -> module, imported on first access: `date +%s` (handed to the system's date) and `date
# plan` (no torch) pay only for what they use
_LAZY = {
    "baseline": "date_engine.api",
    "plan_for": "date_engine.planning",
    "optimizer_for": "date_engine.optim.build",
    "scheduler_for": "date_engine.schedule",
    "train_run": "date_engine.train.launch",
    "NoiseScale": "date_engine.noise",
    **dict.fromkeys(("baseline_from_file", "baseline_from_hf", "baseline_from_timm"),
                    "date_engine.baselines"),
    "DateError": "date_engine.errors",
    "PlanError": "date_engine.errors",
    "SpecError": "date_engine.errors",
    **dict.fromkeys(("Derivation", "OptimizerSettings", "Phase", "Plan"), "date_engine.plan"),
    **dict.fromkeys(("BatchSplit", "RunPlan"), "date_engine.runplan"),
    "Schedule": "date_engine.shapes",
    **dict.fromkeys(("Spec", "load_spec", "parse_spec"), "date_engine.spec"),
    "DATE": "date_engine.optim",
    "LAMB": "date_engine.optim",
    "LARS": "date_engine.optim",
}

if TYPE_CHECKING:  # what the names are, for readers and type checkers
    from date_engine.api import baseline
    from date_engine.baselines import (
        baseline_from_file,
        baseline_from_hf,
        baseline_from_timm,
    )
    from date_engine.errors import DateError, PlanError, SpecError
    from date_engine.noise import NoiseScale
    from date_engine.optim import DATE, LAMB, LARS
    from date_engine.optim.build import optimizer_for
    from date_engine.plan import Derivation, OptimizerSettings, Phase, Plan
    from date_engine.planning import plan_for
    from date_engine.runplan import BatchSplit, RunPlan
    from date_engine.schedule import scheduler_for
    from date_engine.shapes import Schedule
    from date_engine.spec import Spec, load_spec, parse_spec
    from date_engine.train.launch import train_run


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'date_engine' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "DATE",
    "LAMB",
    "LARS",
    "BatchSplit",
    "DateError",
    "Derivation",
    "NoiseScale",
    "OptimizerSettings",
    "Phase",
    "Plan",
    "PlanError",
    "RunPlan",
    "Schedule",
    "Spec",
    "SpecError",
    "baseline",
    "baseline_from_file",
    "baseline_from_hf",
    "baseline_from_timm",
    "load_spec",
    "optimizer_for",
    "parse_spec",
    "plan_for",
    "scheduler_for",
    "train_run",
]
