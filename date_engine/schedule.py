"""The plan's learning-rate schedule as a torch LR scheduler.

``Plan.lr(step)`` is the closed form (1-based optimizer steps). ``plan_scheduler`` drives an
optimizer with it through ``LambdaLR``, whose multiplier at scheduler step s applies to optimizer
step s + 1. Build the optimizer at ``plan.peak_lr``; groups with other LRs keep their proportion.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from date_engine.plan import Plan

__all__ = ["PlanMultiplier", "plan_scheduler"]


@dataclass
class PlanMultiplier:
    """lr(s + 1) / η for LambdaLR: picklable, and saved in the scheduler's state dict."""

    plan: Plan

    def __call__(self, scheduler_step: int) -> float:
        return self.plan.lr(scheduler_step + 1) / self.plan.peak_lr


def plan_scheduler(optimizer: torch.optim.Optimizer, plan: Plan) -> torch.optim.lr_scheduler.LambdaLR:
    """A scheduler that sets each group's LR to ``initial_lr · lr(step) / η`` before every step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, PlanMultiplier(plan))
