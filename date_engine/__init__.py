"""date_engine: DATE (Dynamic Adaptive-Tuning Engine, You et al., SC'19) for large-batch training.

From a small-batch baseline that works, derive the plan for a large batch — sqrt-scaled learning
rate, linear-epoch warmup (LEGW), decay to a floor — and train with it::

    from date_engine import load_spec, derive_plan

    plan = derive_plan(load_spec("recipes/lenet-mnist.yaml"), batch=8192)
    plan.peak_lr, plan.warmup_epochs, plan.total_iterations   # 3.5355e-3, 16.0, 220
    plan.lr(1)                                               # LR of optimizer step 1

Importing this package does not import torch; the torch-based names (``DATE``, ``LARS``,
``LAMB``, ``build_optimizer``, ``plan_scheduler``) load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from date_engine.errors import DateError, PlanError, SpecError
from date_engine.plan import Derivation, Phase, Plan, derive_plan
from date_engine.spec import Spec, load_spec, parse_spec

__version__ = "0.1.0"

# name -> module; imported on first access so that `date plan` never pays for torch
_LAZY = {
    "DATE": "date_engine.optim",
    "LAMB": "date_engine.optim",
    "LARS": "date_engine.optim",
    "build_optimizer": "date_engine.optim.build",
    "plan_scheduler": "date_engine.schedule",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'date_engine' has no attribute {name!r}")


__all__ = [
    "DATE",
    "LAMB",
    "LARS",
    "build_optimizer",
    "plan_scheduler",
    "DateError",
    "Derivation",
    "Phase",
    "Plan",
    "PlanError",
    "Spec",
    "SpecError",
    "derive_plan",
    "load_spec",
    "parse_spec",
]
