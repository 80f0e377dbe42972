"""The plan's learning-rate schedule on an optimizer: one mechanism, :func:`set_lr`.

``Plan.lr(step)`` is the closed form (1-based optimizer steps). The bundled trainer calls
:func:`set_lr` before each optimizer step; :class:`PlanScheduler` is the same call as a torch LR
scheduler for other trainers (stepped once after each optimizer step, as they step theirs).
Build the optimizer at ``plan.peak_lr``; groups with other LRs keep their proportion.
"""

from __future__ import annotations

from typing import Any

import torch

from date_engine.errors import DateError, expect
from date_engine.plan import Plan
from date_engine.runplan import RunPlan, plan_of

__all__ = ["PlanScheduler", "scheduler_for", "set_lr"]


class PlanScheduler(torch.optim.lr_scheduler.LRScheduler):
    """:func:`set_lr` as a torch LR scheduler: built, it sets optimizer step 1's LR; each
    ``step()`` sets the next step's. Its state dict is the step count and the plan's
    :meth:`~date_engine.plan.Plan.summary` (plain values, so a checkpoint loads with
    ``torch.load(weights_only=True)``): a state saved under another plan is refused when loaded,
    unless ``replan`` — then the run continues at the step of this plan that has trained on as many
    samples as the saved one had (HF's Trainer, Lightning and accelerate save and load this state
    with their checkpoints)."""

    def __init__(self, optimizer: torch.optim.Optimizer, plan: Plan,
                 replan: bool = False) -> None:
        self.plan, self.replan = plan, replan
        super().__init__(optimizer)

    def step(self, epoch: Any = None) -> None:
        self._step_count += 1  # torch's count of step() calls, which its warnings read
        self.last_epoch += 1
        set_lr(self.optimizer, self.plan, self.last_epoch + 1)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_lr(self) -> list[float]:
        return [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict[str, Any]:
        return {"last_epoch": self.last_epoch, "_step_count": self._step_count,
                "plan": self.plan.summary(),
                "samples": int(self.plan.samples_through(max(self.last_epoch, 0))),
                "proportions": [g["initial_lr"] / self.plan.peak_lr
                                for g in self.optimizer.param_groups]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        step = resumed_step(self.plan, state_dict, self.replan)
        saved = state_dict.get("plan")
        if saved is not None and saved["id"] != self.plan.identity:
            # replanned: each group at its saved proportion of this plan's peak, with this plan's
            # options (an optimizer loaded from the checkpoint holds the saved plan's)
            for group, share in zip(self.optimizer.param_groups, state_dict["proportions"]):
                group["initial_lr"] = share * self.plan.peak_lr
                _set_options(group, self.plan.optimizer.options)
        self.last_epoch = step - 1
        self._step_count = state_dict["_step_count"] - state_dict["last_epoch"] + step - 1
        self.step()


def resumed_step(plan: Plan, state: dict[str, Any], replan: bool = False) -> int:
    """The optimizer steps of ``plan`` done at the scheduler state ``state``: its own count when
    it was saved under ``plan`` (or by a version that saved no plan); else, with ``replan``, the
    most steps of ``plan`` that train on no more samples than the saved run had; else a
    DateError naming both plans."""
    saved = state.get("plan")
    if saved is None or saved.get("id") == plan.identity:
        return state["last_epoch"]
    if not replan:
        raise DateError(f"checkpoint of another plan ({_describe(saved)}) than this one "
                        f"({_describe(plan.summary())}); resume it under its own plan, or pass "
                        f"replan=True to continue it under this one.")
    return plan.steps_within(state["samples"])


def _describe(summary: dict[str, Any]) -> str:
    """A plan's summary in words: 'batch 128, 50 steps, peak LR 0.002'."""
    return f"batch {summary['batch']}, {summary['steps']} steps, peak LR {summary['peak_lr']:.3g}"


def set_lr(optimizer: torch.optim.Optimizer, plan: Plan, step: int, *, scale: float = 1.0,
           constant: float | None = None) -> float:
    """Set every group's LR for optimizer step ``step`` (1-based) and return lr(step).

    A group keeps its proportion to the plan's peak: the LR it was built with is remembered as
    ``initial_lr`` (the key torch's schedulers use) and scaled by lr(step) / η (a group built at
    η runs at lr(step) exactly). Being a function of
    the step alone, it needs no state of its own in a checkpoint. With a batch ramp it also sets
    the base optimizer's options (β2, ε, ...) the plan derived at the step's batch. ``scale``
    multiplies the schedule (the spike guard's lowered LR); ``constant`` replaces it (a probe's
    branch trains at one LR).
    """
    lr = (constant if constant is not None else plan.lr(step)) * scale
    stage = plan.stage_at(step)
    for group in optimizer.param_groups:
        initial = group.setdefault("initial_lr", group["lr"])
        group["lr"] = lr if initial == plan.peak_lr else initial * lr / plan.peak_lr
        if stage is not None:  # a batch ramp: the optimizer's values derived at this batch
            _set_options(group, stage.options)
    return lr


def _set_options(group: dict[str, Any], options: dict[str, Any]) -> None:
    """The plan's optimizer ``options`` (β2, ε, λ, ...) in a param group that has them; a group
    exempt from weight decay keeps its none."""
    group.update((k, _like(group[k], v)) for k, v in options.items() if k in group
                 and not (k == "weight_decay" and group.get("decay_exempt")))


def _like(current, value):
    """``value`` in the type the optimizer keeps (JSON gives lists where torch keeps tuples)."""
    return tuple(value) if isinstance(current, tuple) else value


def scheduler_for(optimizer: torch.optim.Optimizer, run: RunPlan | Plan, *, replan: bool = False
                  ) -> torch.optim.lr_scheduler.LRScheduler:
    """The plan's LR schedule over ``optimizer``: step it once per optimizer step (not per
    micro-batch, not per process); optimizer step s (from 1) runs at ``plan.lr(s)``. Its state
    carries the plan's id: loading a state saved under another plan is refused, unless
    ``replan`` (continue at the step of this plan that has trained on as many samples)."""
    plan = plan_of(run, "scheduler_for")
    expect(optimizer, torch.optim.Optimizer, "scheduler_for: optimizer",
           "the torch optimizer to schedule (optimizer_for(model, run))")
    expect(replan, bool, "scheduler_for: replan", "True or False")
    return PlanScheduler(optimizer, plan, replan)
