"""The plan's learning-rate schedule as a torch LR scheduler.

``Plan.lr(step)`` is the closed form (1-based optimizer steps). ``plan_scheduler`` drives an
optimizer with it through ``LambdaLR``, whose multiplier at scheduler step s applies to optimizer
step s + 1. Build the optimizer at ``plan.peak_lr``; groups with other LRs keep their proportion.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from date_engine.plan import Plan

__all__ = ["PlanMultiplier", "plan_scheduler", "set_lr"]


@dataclass
class PlanMultiplier:
    """lr(s + 1) / η for LambdaLR: picklable, and saved in the scheduler's state dict."""

    plan: Plan

    def __call__(self, scheduler_step: int) -> float:
        return self.plan.lr(scheduler_step + 1) / self.plan.peak_lr


def plan_scheduler(
    optimizer: torch.optim.Optimizer, plan: Plan
) -> torch.optim.lr_scheduler.LambdaLR:
    """A scheduler that sets each group's LR to ``initial_lr · lr(step) / η`` before every step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, PlanMultiplier(plan))


def set_lr(optimizer: torch.optim.Optimizer, plan: Plan, step: int) -> float:
    """Set every group's LR for optimizer step ``step`` (1-based) and return lr(step).

    A group keeps its proportion to the plan's peak: the LR it was built with is remembered as
    ``initial_lr`` (the key torch's schedulers use) and scaled by lr(step) / η. Being a function of
    the step alone, it needs no state of its own in a checkpoint. With a batch ramp it also sets
    the base optimizer's options (β2, ε, ...) the plan derived at the step's batch.
    """
    lr = plan.lr(step)
    stage = plan.stage_at(step)
    for group in optimizer.param_groups:
        initial = group.setdefault("initial_lr", group["lr"])
        group["lr"] = initial * lr / plan.peak_lr
        if stage is not None:  # a batch ramp: the optimizer's values derived at this batch
            group.update((k, _like(group[k], v)) for k, v in stage.options.items() if k in group
                         and not (k == "weight_decay" and group.get("decay_exempt")))
    return lr


def _like(current, value):
    """``value`` in the type the optimizer keeps (JSON gives lists where torch keeps tuples)."""
    return tuple(value) if isinstance(current, tuple) else value
