"""The plan's learning-rate schedule on an optimizer: one mechanism, :func:`set_lr`.

``Plan.lr(step)`` is the closed form (1-based optimizer steps). The bundled trainer calls
:func:`set_lr` before each optimizer step; :class:`PlanScheduler` is the same call as a torch LR
scheduler for other trainers (stepped once after each optimizer step, as they step theirs).
Build the optimizer at ``plan.peak_lr``; groups with other LRs keep their proportion.
"""

from __future__ import annotations

from typing import Any

import torch

from date_engine.plan import Plan

__all__ = ["PlanScheduler", "plan_scheduler", "set_lr"]


class PlanScheduler(torch.optim.lr_scheduler.LRScheduler):
    """:func:`set_lr` as a torch LR scheduler: built, it sets optimizer step 1's LR; each
    ``step()`` sets the next step's. Its state dict is the step count alone (plain numbers, so a
    checkpoint loads with ``torch.load(weights_only=True)``); the plan comes from the code that
    builds it, as the optimizer does."""

    def __init__(self, optimizer: torch.optim.Optimizer, plan: Plan) -> None:
        self.plan = plan
        super().__init__(optimizer)

    def step(self, epoch: Any = None) -> None:
        self._step_count += 1  # torch's count of step() calls, which its warnings read
        self.last_epoch += 1
        set_lr(self.optimizer, self.plan, self.last_epoch + 1)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"last_epoch": self.last_epoch, "_step_count": self._step_count}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.last_epoch = state_dict["last_epoch"] - 1
        self._step_count = state_dict["_step_count"] - 1
        self.step()


def plan_scheduler(optimizer: torch.optim.Optimizer, plan: Plan) -> PlanScheduler:
    """The plan's LR on ``optimizer`` at every optimizer step (:class:`PlanScheduler`)."""
    return PlanScheduler(optimizer, plan)


def set_lr(optimizer: torch.optim.Optimizer, plan: Plan, step: int) -> float:
    """Set every group's LR for optimizer step ``step`` (1-based) and return lr(step).

    A group keeps its proportion to the plan's peak: the LR it was built with is remembered as
    ``initial_lr`` (the key torch's schedulers use) and scaled by lr(step) / η (a group built at
    η runs at lr(step) exactly). Being a function of
    the step alone, it needs no state of its own in a checkpoint. With a batch ramp it also sets
    the base optimizer's options (β2, ε, ...) the plan derived at the step's batch.
    """
    lr = plan.lr(step)
    stage = plan.stage_at(step)
    for group in optimizer.param_groups:
        initial = group.setdefault("initial_lr", group["lr"])
        group["lr"] = lr if initial == plan.peak_lr else initial * lr / plan.peak_lr
        if stage is not None:  # a batch ramp: the optimizer's values derived at this batch
            group.update((k, _like(group[k], v)) for k, v in stage.options.items() if k in group
                         and not (k == "weight_decay" and group.get("decay_exempt")))
    return lr


def _like(current, value):
    """``value`` in the type the optimizer keeps (JSON gives lists where torch keeps tuples)."""
    return tuple(value) if isinstance(current, tuple) else value
