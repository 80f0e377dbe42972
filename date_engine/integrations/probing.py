"""``date probe`` inside a training loop the user already runs: the in-run measurement of the
gradient noise scale, written as the same probe.json.

The bundled trainer measures the noise scale (:mod:`date_engine.noise`) from each step's
micro-batch gradients and their mean. Here a gradient hook on every trainable parameter does the
same for HF's Trainer and Lightning (:class:`date_engine.integrations.hf.DateProbe`,
:class:`date_engine.integrations.lightning.DateProbe`): each micro-batch's squared gradient norm
before it is accumulated and, at the step's last micro-batch, the squared norm of the process's
accumulated gradient and its product with the previous step's — all read before clipping and
before DDP's all-reduce, which is why the last micro-batch is measured in the hook and not after
the backward. Each process measures its own micro-batches (b samples) against its own
accumulated gradient (n·b), so a step needs ``n >= 2`` micro-batches per process; the processes'
numbers are averaged. The noise scale is a ratio, so the loss's normalisation over the
accumulation (HF divides by n, or by the step's tokens) cancels, as does fp16's loss scale.

Cost: two copies of the gradient in float32 (this step's and the previous step's, for the pair
noise scale the forecast fits) and a norm per parameter and micro-batch. Under FSDP or DeepSpeed
each process holds a shard of the gradient: probe the baseline under DDP or on one process.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from date_engine.errors import DateError
from date_engine.noise import NoiseScale
from date_engine.probe import DEFAULT_POINTS, Probe, baseline_identity, probe_points
from date_engine.runplan import RunPlan
from date_engine.spec import Spec

__all__ = ["InRunProbe", "check_probe_args"]


def check_probe_args(path: Any, share: Any) -> None:
    """DateProbe's own arguments, checked when it is made (before the run it measures): ``path``
    a file that can be written at the end, ``share`` None or a fraction in (0, 1]."""
    from date_engine.checks import writable_file
    from date_engine.errors import expect

    expect(path, str, "DateProbe: path", "where to write probe.json (str)")
    writable_file(path, "DateProbe: path")
    expect(share, (float, int, type(None)), "DateProbe: share",
           "the share of the baseline's steps to measure, a number in (0, 1], or None")
    if share is not None and not (math.isfinite(share) and 0 < share <= 1):
        raise DateError(f"DateProbe: share must be a fraction of the baseline's steps in (0, 1], "
                        f"got {share!r}.")


class InRunProbe:
    """The noise scale of a baseline measured during its own training, then probe.json.

    ``run`` is the plan of ``spec`` (the baseline) at its own batch (k = 1), with the split it
    trains with. The
    adapter calls :meth:`attach` once, :meth:`end_step` after each optimizer step's backward
    passes (with the number of micro-batches it ran), :meth:`loss` when the trainer reports one,
    and :meth:`write` at the end. ``last`` says, inside a backward, whether it is the step's last
    micro-batch. ``share``: stop measuring (and ask the trainer to stop) after that share of the
    baseline's steps, as ``date probe`` does; None measures the whole run."""

    def __init__(self, spec: Spec, run: RunPlan, path: str | Path, last: Callable[[], bool], *,
                 share: float | None = None, points: int = DEFAULT_POINTS,
                 where: str = "DateProbe", run_dir: str = "") -> None:
        split, plan = run.split, run.plan
        if split.accumulation_steps < 2:
            per = split.micro_batch
            raise DateError(
                f"{where} needs two or more micro-batch gradients per step in each process to "
                f"measure the noise scale; this run has one of {per} samples. Keep the batch and "
                f"split it: accumulation 2 of {max(per // 2, 1)} samples per device.")
        if share is not None and not 0 < share <= 1:
            raise DateError(f"{where}: share must be a fraction of the baseline's steps in "
                            f"(0, 1], got {share!r}.")
        self.spec, self.run, self.path, self.last, self.points = spec, run, Path(path), last, points
        self.where, self.run_dir = where, run_dir
        self.stop_at = math.ceil(share * plan.total_iterations) if share else None
        self.noise = NoiseScale(NoiseScale.half_life_for(plan.total_epochs * plan.dataset_size))
        self.records: list[dict[str, Any]] = []
        self.steps, self._loss, self._began = 0, None, None
        self._hooks: list[Any] = []

    def attach(self, model: torch.nn.Module) -> None:
        """A gradient hook on every trainable parameter of ``model``."""
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            raise DateError(f"{self.where}: the model has no trainable parameters to measure.")
        device = params[0].device
        wide = torch.promote_types(params[0].dtype, torch.float32)
        self._micro_sq, self._step_sq, self._pair = (torch.zeros((), device=device, dtype=wide)
                                                     for _ in range(3))
        self._previous: dict[int, torch.Tensor] = {}
        self._current: dict[int, torch.Tensor] = {}
        self._hooks = [p.register_hook(self._hook(i, p)) for i, p in enumerate(params)]
        self._began = time.perf_counter()

    def _hook(self, index: int, param: torch.Tensor) -> Callable[[torch.Tensor], None]:
        def measure(grad: torch.Tensor) -> None:
            wide = torch.promote_types(grad.dtype, torch.float32)  # bf16/fp16 summed in fp32
            norm = torch.linalg.vector_norm(grad, dtype=wide)
            self._micro_sq.add_(norm * norm)
            if not self.last():
                return
            # this process's whole step: what accumulated so far plus this micro-batch, read
            # before clipping and before the all-reduce of the last backward
            total = (grad if param.grad is None else param.grad + grad).to(wide).flatten().clone()
            self._step_sq.add_(torch.dot(total, total))
            previous = self._previous.get(index)
            if previous is not None:
                self._pair.add_(torch.dot(total, previous))
            self._current[index] = total

        return measure

    def detach(self) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

    def loss(self, value: float | torch.Tensor) -> None:
        """The training loss the trainer last reported (kept beside the points; a tensor is
        read at the step's end, with the step's other numbers)."""
        self._loss = value

    def end_step(self, micro_batches: int) -> bool:
        """Fold in the step whose ``micro_batches`` backward passes just ran; True once the
        share to measure is done (the trainer may stop)."""
        paired = bool(self._previous) and len(self._current) == len(self._previous)
        sums = torch.stack([self._micro_sq, self._step_sq, self._pair]).double()
        world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if world > 1:
            dist.all_reduce(sums)
            sums /= world
        micro_sq, step_sq, pair = sums.tolist()
        for total in (self._micro_sq, self._step_sq, self._pair):
            total.zero_()
        self._previous, self._current = self._current, {}
        self.steps += 1
        done = self.stop_at is not None and self.steps >= self.stop_at
        if micro_batches < 2 or not self._previous:  # an epoch's last, partial step
            self._previous = {}
            return done
        # n² times the mean micro-batch |h|² over n·b, as the gradients of the mean losses
        m, b = micro_batches, self.run.split.micro_batch
        self.noise.update(m * micro_sq, step_sq, b, m * b, pair if paired else math.nan)
        estimate = self.noise.estimate
        if estimate is not None and estimate.pair_grad_sq is not None:
            self.records.append({"step": self.steps, "epoch": self.run.plan.epoch(self.steps),
                                 "grad_sq": estimate.grad_sq, "grad_trace": estimate.trace,
                                 "grad_sq_pair": estimate.pair_grad_sq,
                                 "loss": None if self._loss is None else float(self._loss)})
        return done

    def probe(self) -> Probe | None:
        """The probe of the steps measured so far; None before two stretches measured a noise
        scale."""
        points = probe_points(self.records, self.points)
        if len({p.epoch for p in points if p.noise_scale is not None}) < 2:
            return None
        plan, split = self.run.plan, self.run.split
        return Probe(
            baseline=baseline_identity(self.spec, plan.dataset_size),
            baseline_epochs=plan.total_epochs, steps=min(self.steps, plan.total_iterations),
            baseline_steps=plan.total_iterations, epochs=plan.epoch(self.steps),
            micro_batch=split.micro_batch, world_size=split.world_size,
            accumulation_steps=split.accumulation_steps,
            wall_seconds=round(time.perf_counter() - (self._began or time.perf_counter()), 3),
            points=points, command=self.where, run_dir=self.run_dir)

    def write(self) -> Probe | None:
        """Write probe.json (on the first process only); the probe, or None where too few steps
        were measured for a noise curve (nothing is written then)."""
        probe = self.probe()
        if probe is not None and not (dist.is_available() and dist.is_initialized()
                                      and dist.get_rank() != 0):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            probe.write(self.path)
        return probe
