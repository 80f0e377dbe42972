"""One optimizer step of ``date scale``: the micro-batches, the all-reduce, clipping, the update.

Per optimizer step each process runs ``accumulation_steps`` micro-batches forward and backward;
DDP's ``no_sync`` keeps the gradients of all but the last local, so they are all-reduced once per
step. Then, in one host synchronisation, the processes agree whether to go on (:func:`agree`), and
the optimizer (DATE over the base) takes the step.

The same synchronisation carries what the gradient noise scale (:mod:`date_engine.noise`) needs:
a backward hook on every parameter adds the squared norm of each micro-batch's gradient before it
is accumulated or all-reduced, and the step's gradient norm (taken for clipping and logging
anyway) gives the other half. Both stay on the device until the agreement reads them. ``date
probe`` also measures the product of each step's gradient with the previous step's (a copy of the
gradient kept between steps; the pair noise scale of :mod:`date_engine.noise`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from date_engine.optim._tensors import is_sharded, local
from date_engine.recipes import Recipe, RecipeData
from date_engine.train.runtime import Runtime

__all__ = ["StepRunner", "Verdict", "agree", "squared_norm_hook", "to_device"]


def squared_norm_hook(total: Tensor) -> Callable[[Tensor], None]:
    """A gradient hook that adds the squared norm of each gradient it sees to ``total`` (float32,
    in place): registered on every parameter, it sums |g|² of one micro-batch's gradient before
    accumulation and DDP's all-reduce. Two dispatches per parameter and micro-batch (the norm, a
    fused square-and-add): on a small model these hooks are most of what the measurement costs.
    The incoming gradient needs no detach: the trainer's backward builds no graph of its own."""

    def add(grad: Tensor) -> None:
        if grad.is_sparse:
            grad = grad.coalesce().values()
        norm = torch.linalg.vector_norm(grad, dtype=torch.float32)
        total.addcmul_(norm, norm)

    return add


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
        measure_noise: bool = False,
        measure_norm: bool = False,
        measure_pairs: bool = False,
    ) -> None:
        self.model, self.wrapped, self.optimizer, self.scaler = model, wrapped, optimizer, scaler
        self.recipe, self.data, self.rt, self.accumulation = recipe, data, runtime, accumulation
        self.measure_noise = measure_noise
        self.measure_norm = measure_norm
        """Take the gradient norm every step (the spike guard watches it)."""
        self._previous: Tensor | None = None
        """The previous step's gradient, flat (float32), where pairs are measured."""
        if measure_noise and measure_pairs:
            size = sum(p.numel() for p in model.parameters() if p.requires_grad)
            self._previous = torch.zeros(size, device=runtime.device)
        self._pair = torch.zeros((), device=runtime.device)
        """⟨this step's gradient, the previous step's⟩, before clipping"""
        self._micro_sq = torch.zeros((), device=runtime.device)
        """Σ over this step's micro-batches of |gradient of the micro-batch's share of the loss|²"""
        add = squared_norm_hook(self._micro_sq)
        self._hooks = [p.register_hook(add) for p in model.parameters()
                       if p.requires_grad] if measure_noise else []

    def close(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def forward_backward(self, batches: Iterator[Any]) -> Tensor:
        """Accumulate the gradients of one global batch; returns this process's mean loss (a
        device scalar: reading it would synchronise)."""
        rt, total = self.rt, torch.zeros((), device=self.rt.device)
        self._micro_sq.zero_()
        for micro in range(self.accumulation):
            batch = to_device(next(batches), rt.device)
            sync = micro == self.accumulation - 1 or not rt.distributed
            with nullcontext() if sync else rt.no_sync(self.wrapped), rt.autocast():
                loss = self.recipe.loss(self.wrapped, batch, self.data) / self.accumulation
            (self.scaler.scale(loss) if self.scaler is not None else loss).backward()
            total += loss.detach().float()
        return total

    def unscale_and_clip(self, clip: float | None, measure: bool) -> Tensor | None:
        """Unscale fp16 gradients; clip them to ``clip`` and/or return their global norm (taken
        before clipping). The norm is always taken when the noise scale is measured."""
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self._previous is not None:
            self._pair_product()
        if clip is not None and not self.rt.sharded:
            return torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        if not (measure or self.measure_noise or self.measure_norm or clip is not None):
            return None
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        norm = torch.nn.utils.get_total_norm(grads) if grads else torch.zeros(())
        if self.rt.sharded:  # each process holds a shard of each gradient: one all-reduce
            norm = norm.full_tensor() if is_sharded(norm) else norm
            if clip is not None:
                torch.nn.utils.clip_grads_with_norm_(self.model.parameters(), clip, norm)
        return norm

    def _pair_product(self) -> None:
        """⟨g_t, g_t−1⟩ into ``_pair`` (on the device), and this step's gradient kept for the
        next: one flat copy, one dot product. A parameter without a gradient this step counts as
        a zero gradient."""
        flat = torch.cat([
            (p.grad.to_dense() if p.grad.is_sparse else p.grad).flatten().float()
            if p.grad is not None else torch.zeros(p.numel(), device=self._previous.device)
            for p in self.model.parameters() if p.requires_grad])
        self._pair = torch.vdot(flat, self._previous)
        self._previous = flat

    @property
    def previous_gradient(self) -> Tensor | None:
        """The last step's gradient, flat, kept for the next pair product (None where pairs are
        not measured): a checkpoint keeps it, so that a resumed run's pairs go on unbroken."""
        return self._previous

    def resume_pairs(self, gradient: Tensor | None) -> bool:
        """Take the checkpoint's ``previous_gradient``; False where there is none to take (the
        pairs then start afresh)."""
        if self._previous is None or gradient is None or gradient.shape != self._previous.shape:
            return False
        self._previous = gradient.to(self._previous.device, torch.float32)
        return True

    def noise_sample(self, grad_norm: Tensor | None) -> Tensor | None:
        """(mean over this process's micro-batches of |g_micro|², |g_step|²[, ⟨g_step,
        g_previous step⟩ where pairs are measured]) on the device, for :func:`agree`; None when
        the noise scale is not measured."""
        if not self.measure_noise or grad_norm is None:
            return None
        # each micro-batch's loss was divided by the accumulation steps, and fp16 scales it
        per_micro = self._micro_sq * self.accumulation
        if self.scaler is not None:
            per_micro = per_micro / self.scaler._get_scale_async().float().square()
        parts = [per_micro, grad_norm.detach().float().square()]
        if self._previous is not None:
            parts.append(self._pair.float())
        return torch.stack(parts)

    def state_sum(self) -> Tensor:
        """The sum of every entry of the model's floating parameters and buffers and of the
        optimizer's floating state, as a device scalar: not finite when any entry is not (or when
        they add up past 1e38, a state no run trains on). :func:`agree` checks it every step, in
        the step's one synchronisation, so that a run whose state turned non-finite while its
        loss stayed finite stops at once, not when the next checkpoint finds it. One read of the
        state, no temporaries: 0.3% of a ResNet-50 step on the CPU (benchmarks/state_check.py;
        a max-abs reduction took 16× longer)."""
        tensors = [t for t in (*self.model.parameters(), *self.model.buffers())
                   if t.is_floating_point()]
        for state in self.optimizer.state.values():
            tensors += [t for t in state.values() if torch.is_tensor(t) and t.is_floating_point()]
        tensors = [local(t) for t in tensors]  # fsdp: each process its shards; agree() ORs them
        sums = [t.detach().sum(dtype=torch.float64 if t.dtype == torch.float64 else torch.float32)
                .to(self.rt.device, torch.float64) for t in tensors]
        return torch.stack(sums).sum() if sums else torch.zeros((), device=self.rt.device)

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
    noise: tuple[float, ...] | None = None
    """The mean over every process's micro-batches of |g_micro|², |g_step|², and where pairs
    are measured ⟨g_step, g_previous step⟩."""
    state_nonfinite: bool = False
    """The weights or optimizer state the step would build on are not finite (the previous
    update made them so); ``nonfinite`` is set too."""
    loss: float | None = None
    """The step's loss averaged over the processes (asked for by the spike guard)."""
    grad_norm: float | None = None


def agree(rt: Runtime, loss: Tensor, stop_requested: bool, save_due: bool,
          noise: Tensor | None = None, grad_norm: Tensor | None = None,
          state_sum: Tensor | None = None, watch: bool = False) -> Verdict:
    """The one host synchronisation per step: the flags of every process, OR-ed together, and
    the noise sample (:meth:`StepRunner.noise_sample`) averaged over them. The step is
    non-finite when the loss is, or the gradient norm where it was taken: a huge LR can overflow
    the gradients while the loss still reads finite. ``state_sum``
    (:meth:`StepRunner.state_sum`) not finite: the state the step would build on is not.

    Rank 0's clock alone decides ``save_due``, so every process saves the same step. ``watch``:
    the loss and gradient norm come back too, averaged (the spike guard's reading)."""
    bad = ~torch.isfinite(loss)
    if grad_norm is not None:
        bad = bad | ~torch.isfinite(grad_norm.to(bad.device))
    bad_state = torch.zeros((), dtype=torch.bool, device=bad.device) if state_sum is None \
        else ~torch.isfinite(state_sum.to(bad.device))
    parts = [
        bad.float().view(1),
        bad_state.float().view(1),
        torch.tensor([float(stop_requested), float(save_due)], device=rt.device),
    ]
    if watch:
        norm = grad_norm if grad_norm is not None else torch.zeros(())
        parts.append(torch.stack([loss.detach().float().reshape(()).to(rt.device),
                                  norm.detach().float().reshape(()).to(rt.device)]))
    if noise is not None:
        parts.append(noise.float())
    values = torch.cat(parts)
    flags = 4
    if rt.distributed:
        dist.all_reduce(values)  # a sum: a flag is set if any process set it
        values[flags:] /= rt.world_size
    nonfinite, state_nonfinite, stop, save, *rest = values.tolist()
    watched, sample = (rest[:2], rest[2:]) if watch else (None, rest)
    measured = tuple(sample) if sample else None
    return Verdict(nonfinite > 0 or state_nonfinite > 0, stop > 0, save > 0, measured,
                   state_nonfinite > 0, *(watched or (None, None)))


def to_device(batch: Any, device: torch.device) -> Any:
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: to_device(v, device) for k, v in batch.items()}
    return batch
