"""What a training run shows while it trains and when it ends: the progress bar (or a plain line
per logged step when output is not a terminal) and the summary table."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from date_engine.plan import Plan
from date_engine.runfolder import RunSummary
from date_engine.runplan import BatchSplit, RunPlan
from date_engine.view.console import note_line

__all__ = ["ProgressView", "end_notes", "render_summary", "run_notes"]


class ProgressView:
    """A rich progress bar on a terminal (step, epoch, loss, lr, samples/s, ETA); elsewhere (logs,
    CI) one plain line per logged step."""

    def __init__(self, console: Console, total_steps: int, start_step: int,
                 expect_until: int | None = None) -> None:
        self.console = console
        self.live = console.is_terminal
        self.expect_until = expect_until
        """Say once, at the first logged step, how long the steps up to this one should take."""
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
        until, step = self.expect_until, record["step"]
        if until is not None and until > step and record["time_s"] > 0:
            from date_engine.view.timing import seconds

            left = record["time_s"] / step * (until - step)
            self.console.print(f"expected: about {seconds(left)} more for the {until:,} steps, "
                               f"at the speed of the first {step:,}", highlight=False)
            self.expect_until = None
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


def run_notes(config, recipe: str, run: RunPlan, stop_at: int, folder, data_note: str, noise,
              backend: str | None, width: int, parameters: int | None = None) -> list:
    """What ``date scale`` shows before its first step: the plan of ``run`` (or, brief, one
    line), then notes on the data, the noise scale, a dry run and a measured ramp.
    ``parameters``: the model's, for the bytes each process holds under fsdp."""
    from date_engine.view.plan import describe_split, render_plan

    plan, lines = run.plan, []
    if config.brief:
        lines.append(Text(f"training the first {stop_at:,} of the baseline's "
                          f"{plan.total_iterations:,} optimizer steps ({recipe}, batch "
                          f"{describe_split(run.split)}) into {folder}"))
    else:
        lines.append(render_plan(plan, run.split, f"date scale {config.spec_path} — recipe "
                                 f"{recipe}", chart_width=min(width - 14, 72),
                                 sharding=run.sharding(parameters)))
    if config.threads and not config.brief:
        lines.append(Text(f"threads: {config.threads} per process ({config.threads_why})"))
    if data_note:
        lines.append(note_line(data_note))
    if noise is None and config.measure_noise and not config.dry_run and not plan.ramp \
            and not config.brief and not run.split.sharded:
        lines.append(note_line(
            "the gradient noise scale is not measured: each step sees one gradient (one "
            "process, no accumulation); a --micro-batch below the batch measures it."))
    if config.dry_run:
        lines.append(Text.from_markup(
            f"[bold]dry run:[/] the plan above is valid; now {run.last_step} optimizer "
            f"steps of {describe_split(run.step_split)} on the CPU "
            f"({backend or 'one process'}), writing only to a temporary folder."))
    if run.follows_noise:
        lines.append(note_line(
            "the batch ramp follows the noise scale this run measures; plan.json is rewritten "
            "at each move up."))
    return lines


def end_notes(summary: RunSummary, plan: Plan, split: BatchSplit, config) -> list:
    """What ``date scale`` shows at its end: the summary table (not for a brief run), and how to
    continue a run that stopped early (not a dry run's)."""
    lines: list = [] if config.brief else [render_summary(summary, plan, split, config.dry_run)]
    for r in summary.rollbacks:
        lines.append(Text(f"spike guard: at step {r['at_step']} {r['why']}; rolled back to step "
                          f"{r['back_to']} and trained on at ×{r['lr_scale']:g} the LR.",
                          style="yellow"))
    if summary.stopped_by and config.rerun_command and not config.dry_run:
        lines.append(Text(f"continue with: {config.rerun_command} --resume"))
    return lines
