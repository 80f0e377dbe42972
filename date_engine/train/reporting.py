"""What a run shows and records while it trains: the progress bar, metrics.jsonl, TensorBoard."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn

__all__ = ["MetricsLog", "ProgressView"]


class MetricsLog:
    """``metrics.jsonl``: one JSON object per logged step or evaluation, and the same scalars in
    TensorBoard event files when the ``tensorboard`` package is installed.

    On resume, lines after the checkpoint's step (written by the interrupted run after it saved)
    are dropped, so the file reads as one uninterrupted run.
    """

    def __init__(self, output_dir: str | Path, resume_step: int | None = None) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is None:
            self.path.write_text("")
        elif self.path.exists():
            kept = [line for line in self.path.read_text().splitlines()
                    if line.strip() and json.loads(line).get("step", 0) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in kept))
        self._file = open(self.path, "a")
        self._tb = _tensorboard(Path(output_dir) / "tensorboard")

    @property
    def tensorboard(self) -> bool:
        return self._tb is not None

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            step = record["step"]
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            for key, value in (record.get("eval") or {}).items():
                self._tb.add_scalar(f"eval/{key}", value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _tensorboard(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(folder))


class ProgressView:
    """A rich progress bar on a terminal (step, epoch, loss, lr, samples/s, ETA); elsewhere (logs,
    CI) one plain line per logged step."""

    def __init__(self, console: Console, total_steps: int, start_step: int) -> None:
        self.console = console
        self.live = console.is_terminal
        self._last_line = time.monotonic()
        self.fields = {"epoch": 0.0, "loss": float("nan"), "lr": 0.0, "rate": 0.0}
        if self.live:
            self.progress = Progress(
                TextColumn("step {task.completed}/{task.total}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("epoch {task.fields[epoch]:.2f}  loss {task.fields[loss]:.4g}  "
                           "lr {task.fields[lr]:.3g}  {task.fields[rate]:.0f} samples/s"),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.progress.add_task("train", total=total_steps, completed=start_step,
                                               **self.fields)
            self.progress.start()

    def step(self, step: int, **fields: float) -> None:
        self.fields.update(fields)
        if self.live:
            self.progress.update(self.task, completed=step, **self.fields)

    def logged(self, record: dict[str, Any]) -> None:
        if not self.live:
            self.console.print(
                f"step {record['step']}  epoch {record['epoch']:.2f}  loss {record['loss']:.4g}  "
                f"lr {record['lr']:.3g}  {record['samples_per_s']:.0f} samples/s", highlight=False)

    def close(self) -> None:
        if self.live:
            self.progress.stop()
