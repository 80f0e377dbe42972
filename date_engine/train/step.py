"""One optimizer step of ``date scale``: the micro-batches, the all-reduce, clipping, the update.

Per optimizer step each process runs ``accumulation_steps`` micro-batches forward and backward;
DDP's ``no_sync`` keeps the gradients of all but the last local, so they are all-reduced once per
step. Then, in one host synchronisation, the processes agree whether to go on (:func:`agree`), and
the optimizer (DATE over the base) takes the step.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from date_engine.recipes import Recipe, RecipeData
from date_engine.train.runtime import Runtime

__all__ = ["StepRunner", "Verdict", "agree", "to_device"]


class StepRunner:
    """The model, its DDP wrapper, the optimizer and the loss scaler, stepped together."""

    def __init__(
        self,
        model: torch.nn.Module,
        wrapped: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        scaler: torch.amp.GradScaler | None,
        recipe: Recipe,
        data: RecipeData,
        runtime: Runtime,
        accumulation: int,
    ) -> None:
        self.model, self.wrapped, self.optimizer, self.scaler = model, wrapped, optimizer, scaler
        self.recipe, self.data, self.rt, self.accumulation = recipe, data, runtime, accumulation

    def forward_backward(self, batches: Iterator[Any]) -> Tensor:
        """Accumulate the gradients of one global batch; returns this process's mean loss (a
        device scalar: reading it would synchronise)."""
        rt, total = self.rt, torch.zeros((), device=self.rt.device)
        for micro in range(self.accumulation):
            batch = to_device(next(batches), rt.device)
            sync = micro == self.accumulation - 1 or not rt.distributed
            with nullcontext() if sync else self.wrapped.no_sync(), rt.autocast():
                loss = self.recipe.loss(self.wrapped, batch, self.data) / self.accumulation
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            total += loss.detach().float()
        return total

    def unscale_and_clip(self, clip: float | None, measure: bool) -> Tensor | None:
        """Unscale fp16 gradients; clip them to ``clip`` and/or return their global norm."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if clip is None and not measure:
            return None
        return torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip or math.inf)

    def update(self) -> None:
        """The optimizer step (skipped by the scaler after an fp16 overflow), gradients cleared."""
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


@dataclass(frozen=True)
class Verdict:
    """What all processes agreed on after a step's backward pass."""

    nonfinite: bool
    """Some process's loss is NaN or infinite: the step must not be taken."""
    stop: bool
    """Some process was asked to stop (SIGINT/SIGTERM): stop after this step."""
    save: bool
    """Rank 0's clock says a checkpoint is due after this step."""


def agree(rt: Runtime, loss: Tensor, stop_requested: bool, save_due: bool) -> Verdict:
    """The one host synchronisation per step: the flags of every process, OR-ed together.

    Rank 0's clock alone decides ``save_due``, so every process saves the same step."""
    flags = torch.cat(
        [
            (~torch.isfinite(loss)).float().view(1),
            torch.tensor([float(stop_requested), float(save_due)], device=rt.device),
        ]
    )
    if rt.distributed:
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    nonfinite, stop, save = (bool(v) for v in flags.tolist())
    return Verdict(nonfinite, stop, save)


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch
