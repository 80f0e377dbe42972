"""What ``date bench`` measured and what ``date plan --devices N --bench`` forecasts, shown."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from date_engine.timing import Bench, Link, MemoryFit, TimeForecast
from date_engine.view.console import bytes_text

__all__ = ["describe_link", "render_bench", "render_time", "seconds"]


def seconds(value: float) -> str:
    """A duration in the unit a person books by: µs, ms, s, min, h or days."""
    if value < 1e-3:
        return f"{value * 1e6:.3g} µs"
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    if value < 120:
        return f"{value:.3g} s"
    if value < 2 * 3600:
        return f"{value / 60:.3g} min"
    if value < 72 * 3600:
        return f"{value / 3600:.3g} h"
    return f"{value / 86400:.3g} days"


def describe_link(link: Link) -> str:
    if link.source == "none":
        return "none timed (one process)"
    return (f"α = {seconds(link.alpha)} per message, β = {link.beta / 1e9:.3g} GB/s "
            f"({'given by --link' if link.source == '--link' else 'measured'})")


def render_bench(bench: Bench, path: Path) -> RenderableType:
    table = Table(title=f"date bench — recipe {bench.recipe}, {bench.processes} process"
                        f"{'es' if bench.processes != 1 else ''} × {bench.threads} thread"
                        f"{'s' if bench.threads != 1 else ''}, {bench.device} ({bench.backend})",
                  title_justify="left")
    table.add_column("what")
    table.add_column("measured")
    table.add_column("fit")
    points = ", ".join(f"{m}: {seconds(s)}" for m, s in bench.compute_points)
    table.add_row("forward + backward, per micro-batch", points,
                  "between two sizes, the line through them; beyond, T_c(b) = "
                  f"{seconds(bench.compute_fixed)} + {seconds(bench.compute_per_sample)} · b")
    table.add_row("optimizer step", seconds(bench.optimizer_seconds), "")
    reduced = ", ".join(f"{bytes_text(b)}: {seconds(s)}" for b, s in bench.allreduce_points)
    table.add_row("all-reduce", reduced or "—",
                  describe_link(bench.link) + ("" if bench.link.source == "none" else
                                               "; T = 2(N−1)α + 2(N−1)/N · bytes/β"))
    if bench.wait_points:
        table.add_row("synchronisation, per step",
                      ", ".join(f"{m}: {seconds(w)}" for m, w in bench.wait_points),
                      "the run's pass (DDP, the step's flags) beyond the plain pass and the "
                      "all-reduce; between sizes, the line through them")
    if bench.shard_points:
        table.add_row("sharded optimizer step (fsdp)", seconds(bench.sharded_optimizer_seconds),
                      "replaces the optimizer step under --parallel fsdp")
        table.add_row("sharding, per micro-batch (fsdp)",
                      ", ".join(f"{m}: {seconds(s)}" for m, s in bench.shard_points),
                      "the sharded step beyond the pass, the modelled gathers and "
                      "reduce-scatter, its optimizer step and host work")
    lines: list[RenderableType] = [table, Text(
        f"{bench.parameters:,} parameters, {bytes_text(bench.gradient_bytes)} of gradient; "
        f"{bench.machine}. Written to {path}.")]
    lines += [Text(f"note: {n}", style="yellow") for n in bench.notes]
    return Group(*lines)


def memory_line(fit: MemoryFit) -> Text:
    """``--device-memory``'s answer in one sentence: the micro-batch that fits, or that none
    does."""
    where = ("the CUDA allocator's peak; the CUDA context comes on top"
             if fit.source == "cuda allocator" else "the process's peak resident memory")
    if fit.micro_batch is None:
        return Text(f"Memory: not even one sample per pass fits {bytes_text(fit.device_bytes)} "
                    f"(a pass of 1 needs about {bytes_text(fit.need_bytes)}, "
                    f"{bytes_text(fit.held_bytes)} of it the model, its gradients and the "
                    "optimizer's state); shard with --parallel fsdp or take devices with more "
                    "memory.", style="yellow")
    return Text(f"Memory: micro-batch {fit.micro_batch} fits {bytes_text(fit.device_bytes)} "
                f"(about {bytes_text(fit.need_bytes)} a device at its peak, {where}), with "
                f"{fit.accumulation_steps} accumulation step"
                f"{'s' if fit.accumulation_steps != 1 else ''}: --micro-batch {fit.micro_batch}.")


def render_time(forecast: TimeForecast, budgets: dict[str, TimeForecast],
                memory: MemoryFit | None = None) -> RenderableType:
    """The forecast table: one step, the whole run per budget, the baseline, the speedup; with
    ``memory``, the micro-batch that fits a device."""
    step = forecast.step
    table = Table(title=f"Time on {forecast.devices} device{'s' if forecast.devices != 1 else ''}"
                        " (a forecast)", title_justify="left")
    table.add_column("what")
    table.add_column("value", justify="right")
    table.add_column("from")
    table.add_row("compute", seconds(step.compute), "accumulation · T_c(micro-batch)")
    n = forecast.devices
    if forecast.parallel == "fsdp":
        table.add_row("gathers + reduce-scatter", seconds(step.communication),
                      "accumulation · 2 · AG(parameters) + RS(gradient), each (N−1)α + "
                      f"(N−1)/N · bytes/β, N = {n}")
    else:
        table.add_row("all-reduce", seconds(step.communication),
                      f"2(N−1)α + 2(N−1)/N · gradient/β, N = {n}")
    if n > 1:
        table.add_row("synchronisation", seconds(step.synchronisation),
                      "bench: the wait of a synchronised step, held constant in N")
    table.add_row("optimizer", seconds(step.optimizer), "bench")
    if step.host:
        table.add_row("host work", seconds(step.host), "bench: the trainer's own work of a step")
    table.add_row("one step", f"{seconds(step.overlap)} – {seconds(step.no_overlap)}",
                  "full overlap – none")
    for name, each in budgets.items():
        table.add_row(f"run, {name}", f"{seconds(each.run_seconds)}",
                      f"{each.steps:,} steps (overlapped: {seconds(each.run_seconds_overlap)})")
    table.add_row("baseline", seconds(forecast.baseline_seconds),
                  f"{forecast.baseline_steps:,} steps on {forecast.baseline_devices} device"
                  f"{'s' if forecast.baseline_devices != 1 else ''}")
    table.add_row("speedup", f"{forecast.speedup:.3g}×", "baseline ÷ run (no overlap)")
    return Group(table, Text(
        f"Link: {describe_link(forecast.link)}. Left out: evaluations and checkpoints, and "
        "stragglers beyond what the bench's processes waited for; compute and that wait are the "
        "bench's machine's.", style="dim"), *([memory_line(memory)] if memory else []))

