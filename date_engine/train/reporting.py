"""What a run records as it trains: the loss since the last logged step, the training clock, the
lines of metrics.jsonl (rank 0, through :class:`~date_engine.runfolder.MetricsLog`) and the progress
view."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console

from date_engine.noise import NoiseEstimate
from date_engine.runfolder import MetricsLog, RunFolder, eval_record, train_record
from date_engine.train.runtime import Runtime
from date_engine.view.progress import ProgressView

__all__ = ["RunLogger"]


class RunLogger:
    """Per-step bookkeeping of one process; rank 0 also writes and shows it.

    ``window`` is the (loss sum, steps) not yet logged and ``time_before`` the training seconds of
    earlier attempts: both come back from a checkpoint, so a resumed run logs what an uninterrupted
    one would have.
    """

    def __init__(self, rt: Runtime, console: Console, folder: RunFolder, *, total_steps: int,
                 start: int, resumed: bool, log_every: int,
                 samples_through: Callable[[int], int], dataset_size: int,
                 batch_at: Callable[[int], int] | None = None,
                 window: tuple[float, int] = (0.0, 0), time_before: float = 0.0,
                 expect_until: int | None = None) -> None:
        self.rt, self.total_steps, self.log_every = rt, total_steps, log_every
        self.samples_through, self.dataset_size = samples_through, dataset_size
        self.batch_at = batch_at
        """The batch of a step, recorded in metrics.jsonl (a ramp's); None: not recorded."""
        self.metrics = MetricsLog(folder, resume_step=start if (start or resumed) else None) \
            if rt.is_main else None
        self.view = ProgressView(console, total_steps, start, expect_until) if rt.is_main \
            else None
        self._loss_sum = torch.tensor(window[0], device=rt.device)
        self._window_steps, self._window_start = window[1], time.perf_counter()
        # training time (evaluations left out) of earlier attempts, and this attempt's clock
        self._time_before, self._clock_start, self._eval_seconds = (
            time_before,
            time.perf_counter(),
            0.0,
        )

    def retotal(self, total_steps: int) -> None:
        """A measured ramp moved up a rung: the run now ends after ``total_steps``."""
        self.total_steps = total_steps
        if self.view is not None:
            self.view.retotal(total_steps)

    def is_logging(self, step: int) -> bool:
        return step % self.log_every == 0 or step == self.total_steps

    def epoch(self, step: int) -> float:
        return self.samples_through(step) / self.dataset_size

    def after_step(
        self,
        step: int,
        lr: float,
        loss: torch.Tensor,
        grad_norm: torch.Tensor | None,
        optimizer: torch.optim.Optimizer,
        noise: NoiseEstimate | None = None,
    ) -> None:
        """Count the step's loss; on a logged step, write and show the record (all processes
        take part: the loss is averaged over them)."""
        self._loss_sum += loss
        self._window_steps += 1
        if self.is_logging(step):
            record = self._record(step, lr, grad_norm, optimizer, noise)
            if self.metrics is not None:
                self.metrics.write(record)
                self.view.logged(record)
            self._loss_sum.zero_()
            self._window_start, self._window_steps = time.perf_counter(), 0
        if self.view is not None:
            self.view.step(step, epoch=self.epoch(step), lr=lr)

    def _record(self, step: int, lr: float, grad_norm: torch.Tensor | None,
                optimizer: torch.optim.Optimizer, noise: NoiseEstimate | None) -> dict[str, Any]:
        loss = self._loss_sum / max(self._window_steps, 1)
        if self.rt.distributed:
            dist.all_reduce(loss)
            loss = loss / self.rt.world_size
        elapsed = time.perf_counter() - self._window_start
        samples = self.samples_through(step) - self.samples_through(step - self._window_steps)
        rate = samples / elapsed if elapsed > 0 else 0.0
        ratios = getattr(optimizer, "last_ratios", None)
        spread = None
        if ratios is not None and ratios.numel():
            spread = tuple(torch.stack([ratios.min(), ratios.median(), ratios.max()]).tolist())
        return train_record(
            step,
            self.epoch(step),
            lr,
            loss.item(),
            grad_norm.item() if grad_norm is not None else None,
            rate,
            self.train_seconds(),
            spread,
            noise,
            self.batch_at(step) if self.batch_at is not None else None,
        )

    def rewind(self, point: Any, record: dict[str, Any]) -> None:
        """The spike guard went back to ``point`` (a ResumePoint): the records after its step
        give way to one of the rollback (``record``), and the unlogged window is the
        checkpoint's."""
        self._loss_sum.fill_(point.window[0])
        self._window_steps, self._window_start = point.window[1], time.perf_counter()
        if self.metrics is not None:
            self.metrics.rewind(point.step, {"step": point.step, "spike": record})
        if self.view is not None:
            self.view.step(point.step, epoch=self.epoch(point.step), lr=0.0)

    def window_state(self) -> tuple[float, int]:
        """The (loss sum, steps) not yet logged, for a checkpoint (reads the device)."""
        return self._loss_sum.item(), self._window_steps

    def train_seconds(self) -> float:
        """Seconds spent training so far, over every attempt of the run, evaluations left out:
        the clock of time-to-accuracy."""
        return self._time_before + time.perf_counter() - self._clock_start - self._eval_seconds

    @contextmanager
    def evaluating(self, step: int, metric_name: str) -> Iterator[dict[str, float]]:
        """Stop the training clock while the body evaluates; it puts the metric (and any other
        numbers of the evaluation) into the yielded dict, which rank 0 then writes to
        metrics.jsonl."""
        began, train_seconds, result = time.perf_counter(), self.train_seconds(), {}
        yield result
        if self.metrics is not None and metric_name in result:
            self.metrics.write(eval_record(step, dict(result), train_seconds))
        self._eval_seconds += time.perf_counter() - began

    def close_view(self) -> None:
        if self.view is not None:
            self.view.close()
            self.view = None

    def close(self) -> None:
        self.close_view()
        if self.metrics is not None:
            self.metrics.close()
