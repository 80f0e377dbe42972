"""What a training run shows while it trains and when it ends: the progress bar (or a plain line
per logged step when output is not a terminal) and the summary table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table

from date_engine.plan import BatchSplit, Plan
from date_engine.runfolder import RunSummary

__all__ = ["ProgressView", "render_summary"]


class ProgressView:
    """A rich progress bar on a terminal (step, epoch, loss, lr, samples/s, ETA); elsewhere (logs,
    CI) one plain line per logged step."""

    def __init__(self, console: Console, total_steps: int, start_step: int) -> None:
        self.console = console
        self.live = console.is_terminal
        self.fields: dict[str, float | None] = {"epoch": 0.0, "loss": None, "lr": 0.0, "rate": None}
        if self.live:
            self.progress = Progress(
                TextColumn("step {task.completed}/{task.total}"),
                BarColumn(),
                TaskProgressColumn(),
                TextColumn("{task.fields[status]}"),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.progress.add_task("train", total=total_steps, completed=start_step,
                                               status=self._status())
            self.progress.start()

    def _status(self) -> str:
        """Epoch, loss, lr and samples/s; '—' for what no logged step has measured yet."""
        f = self.fields
        loss = "—" if f["loss"] is None else f"{f['loss']:.4g}"
        rate = "—" if f["rate"] is None else f"{f['rate']:.0f}"
        return f"epoch {f['epoch']:.2f}  loss {loss}  lr {f['lr']:.3g}  {rate} samples/s"

    def retotal(self, total_steps: int) -> None:
        if self.live:
            self.progress.update(self.task, total=total_steps)

    def step(self, step: int, **fields: float) -> None:
        self.fields.update(fields)
        if self.live:
            self.progress.update(self.task, completed=step, status=self._status())

    def logged(self, record: dict[str, Any]) -> None:
        self.step(record["step"], loss=record["loss"], rate=record["samples_per_s"])
        if not self.live:
            self.console.print(
                f"step {record['step']}  epoch {record['epoch']:.2f}  loss {record['loss']:.4g}  "
                f"lr {record['lr']:.3g}  {record['samples_per_s']:.0f} samples/s", highlight=False)

    def close(self) -> None:
        if self.live:
            self.progress.stop()


def render_summary(summary: RunSummary, plan: Plan, split: BatchSplit,
                   dry_run: bool = False) -> Table:
    """The table a run prints when it ends."""
    table = Table(title="Summary", title_justify="left", show_header=False)
    metric = "—" if summary.metric is None else f"{summary.metric:.4g}"
    warmup = f"{plan.warmup_epochs:g} epoch{'' if plan.warmup_epochs == 1 else 's'}"
    rows = [
        ("recipe", summary.recipe),
        ("steps", f"{summary.steps} of {summary.total_steps}"
                  + (f" (stopped by {summary.stopped_by})" if summary.stopped_by else "")),
        (summary.metric_name, metric),
        ("wall time", f"{summary.wall_time_s:.1f} s: this attempt's steps, checkpoints and "
                      "evaluations (not start-up or drawing curves.png)"),
        ("samples/s", f"{summary.samples_per_s:.0f}"),
        ("plan", f"batch {split.batch} = {split.micro_batch} × {split.world_size} × "
                 f"{split.accumulation_steps}, peak lr {plan.peak_lr:.4g}, warmup {warmup}"),
        ("checkpoint", "written and read back (a dry run: removed with its temporary folder)"
         if dry_run else summary.checkpoint or "—"),
    ]
    if plan.ramp and not dry_run:  # the batch ramp the run trained: each change and why
        rows.insert(5, ("batch ramp", " → ".join(
            f"{st.batch}" + ("" if st.first_step == 1 else f" (step {st.first_step}"
                             + (", measured)" if st.measured else ")"))
            for st in plan.ramp if st.first_step <= max(summary.steps, 1))))
    for row in rows:
        table.add_row(*row)
    return table
