"""A sweep, shown: the live table of its cells while it trains, and its report.md."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.console import Group as RenderGroup
from rich.live import Live
from rich.table import Table

from date_engine.sweep.results import CellResult, Group, Paired, SideBySide, SweepSummary
from date_engine.sweep.schemes import BASELINE, BUDGETS, SCHEMES, split_label
from date_engine.view.plots import FIGURES

if TYPE_CHECKING:
    from date_engine.sweep.grid import PlannedCell

__all__ = ["SweepProgress", "print_verdicts", "report_markdown",
           "side_by_side_lines"]


def report_markdown(summary: SweepSummary, settings: dict[str, Any], schemes: list[str],
                    figures: dict[str, bool | str]) -> str:
    """report.md of a sweep: verdicts, the results table, the schemes, the figures."""
    lines = [f"# date sweep: {settings.get('recipe') or ''} ({settings['spec']})", "",
             f"Command: `{settings['command']}`", "",
             f"Machine: {settings.get('machine', 'not recorded')}. Cells ran {settings['jobs']} "
             f"at a time, {settings['nproc']} process(es) each, {settings.get('threads', '?')} "
             "thread(s) per process. Times are training seconds (evaluations left out), measured "
             "on this machine.", ""]
    lines += _verdicts(summary, schemes) + _results(summary) + _side_by_side(summary)
    lines += _forecast(summary, settings)
    lines += _time_forecast(summary, settings)
    lines += _schemes(summary, settings, schemes)
    lines += ["", "## Figures", ""]
    for name, caption in FIGURES.items():
        state = figures.get(name)
        if state is True:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
        elif state:
            lines += [f"- {name}: {state}", ""]
    return "\n".join(lines).rstrip() + "\n"


def _verdicts(summary: SweepSummary, schemes: list[str]) -> list[str]:
    base = summary.baseline
    if base is None or base.mean is None:
        return ["The baseline cells have not finished; no comparison yet.", ""]
    better = "higher" if summary.higher_is_better else "lower"
    lines = [f"Baseline: batch {base.batch}, {summary.metric_name} {_ms(base)} over "
             f"{len(base.results)} seed(s), {base.steps} steps. Metric: {summary.metric_name}, "
             f"{better} is better. Tolerance: {summary.tolerance}, so the target is "
             f"{summary.metric_name} {'≥' if summary.higher_is_better else '≤'} "
             f"{summary.target:.4g}.", "", "## Verdict", ""]
    return lines + [f"- **{s}**: {v}." for s, v in summary.verdicts(schemes).items()] + [""]


def _forecast(summary: SweepSummary, settings: dict[str, Any]) -> list[str]:
    """With ``date sweep --probe``: each batch's forecast beside what its cells measured."""
    forecast = settings.get("forecast")
    if not forecast:
        return []
    rows = forecast["batches"]
    # sweeps before B_hold recorded McCandlish's critical batch (f = 2) instead
    edge = (f"the largest batch expected to hold at the baseline's epochs (f = 4/3) is "
            f"{rows[0]['holding_batch']:,}" if "holding_batch" in rows[0] else
            f"the critical batch (f = 2) is {rows[0]['critical_batch']:,}")
    lines = ["## Forecast against the result", "",
             f"From `{forecast['probe']}` (docs/noise.md): {edge}; f is the forecast's factor on "
             "the baseline's epochs to reach its loss.", "",
             "| batch | f | forecast epochs | forecast at the baseline's epochs "
             "| measured: holds |",
             "|---:|---:|---:|---|---|"]
    for row in rows:
        measured = ", ".join(
            f"{g.scheme} {'✓' if g.holds else '✗'}" for g in summary.groups
            if g.batch == row["batch"] and g.scheme != BASELINE and g.holds is not None)
        expected = "holds" if row["expected"] == "holds" else "expected to lose accuracy"
        lines.append(f"| {row['batch']} | {row['factor']:.3g} | {row['epochs']:.3g} | {expected} "
                     f"| {measured or 'not finished'} |")
    return lines + [""]


def _results(summary: SweepSummary) -> list[str]:
    base = summary.baseline
    lines = ["## Results", "",
             "| batch | k | scheme | peak LR | warmup epochs | epochs | steps | "
             f"{summary.metric_name} (mean ± sd, n) | Δ vs baseline | holds | steps to target | "
             "time to target (s) | speedup | training time (s) |",
             "|---:|---:|---|---:|---:|---:|---:|---|---:|:-:|---:|---:|---:|---:|"]
    lines += [_row(g, base) for g in ([base] if base else []) + summary.groups]
    grids = [g for g in summary.groups if g.tried]
    if grids:
        lines += ["", "LR grid (mean final metric per LR; — where a seed diverged or did not "
                  "finish):", ""]
        for g in grids:
            tried = ", ".join(f"{lr:g}: {'—' if v is None else f'{v:.4g}'}"
                              for lr, v in g.tried.items())
            lines.append(f"- {g.scheme} at {g.batch}: {tried}; kept {g.grid_lr:g}")
    return lines


def _side_by_side(summary: SweepSummary) -> list[str]:
    """The reference scheme against each other one, seed by seed
    (:meth:`SweepSummary.side_by_side`)."""
    pairs = summary.side_by_side()
    if not pairs:
        return []
    lines = ["", "## Side by side, seed by seed", "",
             f"{pairs[0].scheme} against each other scheme on the seeds both finished (one seed's "
             "cells start from the same weights and see the data in the same order): the "
             "difference per seed, its mean and the mean's 95% Student-t interval. Where the "
             "interval holds 0, these seeds do not tell the two apart; more seeds (`--repeats`) "
             "narrow it. Where the interval lies inside ± the tolerance, the two are level "
             "to within it. The last column: how many paired seeds would narrow the interval "
             "to ± the tolerance at these seeds' spread.", "",
             f"| batch | difference | seeds | per seed | mean | 95% interval | reads | "
             f"seeds for {_tolerance(pairs[0])} |",
             "|---:|---|---|---|---:|---|---|---:|"]
    for c in pairs:
        p = c.paired
        needed = "" if c.seeds_for_tolerance is None else f"{c.seeds_for_tolerance:,}"
        lines.append(
            f"| {c.batch} | {c.scheme} − {c.other} | {', '.join(map(str, p.seeds))} | "
            f"{', '.join(f'{d:+.3g}' for d in p.differences)} | {p.mean:+.3g} | {_interval(p)} | "
            f"{_reads(c, c.reading(summary.higher_is_better))} | {needed} |")
    return lines + [""]


def _tolerance(c: SideBySide) -> str:
    return "the tolerance" if c.tolerance is None else f"±{c.tolerance:.3g}"


def side_by_side_lines(summary: SweepSummary) -> list[str]:
    """One sentence per comparison of :meth:`SweepSummary.side_by_side`, for the terminal."""
    out = []
    for c in summary.side_by_side():
        p, n = c.paired, len(c.paired.seeds)
        interval = "" if p.half_width is None else f" (95% interval {_interval(p)})"
        reading = c.reading(summary.higher_is_better)
        needed = ("" if reading != "level" or c.seeds_for_tolerance is None
                  or c.seeds_for_tolerance <= n else
                  f"; about {c.seeds_for_tolerance:,} paired seeds would narrow the interval to "
                  f"±{c.tolerance:.3g}, the tolerance")
        out.append(f"{c.scheme} − {c.other} at {c.batch}: {p.mean:+.3g} over {n} seed"
                   f"{'s' if n > 1 else ''}{interval}: {_reads(c, reading)}{needed}")
    return out


def print_verdicts(console: Console, summary: SweepSummary, schemes: list[str],
                   report: Path) -> None:
    """What ``date sweep`` ends with: each scheme's verdict, the side-by-side readings, the
    report's path."""
    from rich.text import Text

    for scheme, verdict in summary.verdicts(schemes).items():
        console.print(Text.assemble((scheme, "bold"), f": {verdict}."), soft_wrap=True)
    for line in side_by_side_lines(summary):
        console.print(f"{line}.", soft_wrap=True, markup=False, highlight=False)
    console.print(f"report: {report}", soft_wrap=True, markup=False)


def _interval(p: Paired) -> str:
    if p.half_width is None:
        return ""
    return f"{p.mean - p.half_width:+.3g} to {p.mean + p.half_width:+.3g}"


def _reads(c: SideBySide, reading: str) -> str:
    return {"ahead": f"{c.scheme} ahead", "behind": f"{c.scheme} behind",
            "within": f"level within {_tolerance(c)}", "level": "not told apart",
            "one seed": "one seed, no interval"}[reading]


def _time_forecast(summary: SweepSummary, settings: dict[str, Any]) -> list[str]:
    """With ``date sweep --bench``: each cell group's forecast training time (the time model of
    docs/performance.md, no overlap) beside the measured one."""
    timed = settings.get("time_forecast")
    if not timed:
        return []
    lines = ["## Training time: forecast against measured", "",
             f"The time model's forecast from `{timed['bench']}` ({timed['machine']}; no "
             "overlap, evaluations left out as in the measured time) and each group's measured "
             "training seconds (mean over its seeds).", "",
             "| batch | scheme | forecast (s) | measured (s) | forecast ÷ measured |",
             "|---:|---|---:|---:|---:|"]
    for g in summary.groups:
        forecasts = [timed["cells"].get(r.cell.name) for r in g.results]
        if not forecasts or None in forecasts:
            continue
        forecast = sum(forecasts) / len(forecasts)
        name = g.scheme + (f" (lr {g.grid_lr:g})" if g.grid_lr is not None else "")
        measured = "" if g.train_s is None else f"{g.train_s:.0f}"
        ratio = "" if not g.train_s else f"{forecast / g.train_s:.2f}"
        lines.append(f"| {g.batch} | {name} | {forecast:.0f} | {measured} | {ratio} |")
    return lines + [""]


def _schemes(summary: SweepSummary, settings: dict[str, Any], schemes: list[str]) -> list[str]:
    base = summary.baseline
    lines = ["", "## Schemes", "",
             f"- **baseline**: the spec as written at batch {base.batch if base else '?'}, "
             "per-layer ratios off (the small-batch run the user already has)."]
    named = [split_label(s) for s in schemes]
    given = settings.get("date_settings") or []
    lines += [f"- **{n}**: {SCHEMES[n].summary}"
              + (f"; here with {', '.join(given)} from the spec" if n == "date" and given else "")
              + "." for n in dict.fromkeys(n for n, _ in named)]
    budgets = [b for b in dict.fromkeys(b for _, b in named) if b is not None]
    lines += [f"- **+{b}**: the budget {b}: {BUDGETS[b][1]}." for b in budgets]
    if settings.get("lr_grid") and any(SCHEMES[n].uses_grid for n, _ in named):
        lines.append(f"- LR grid: {', '.join(f'{v:g}' for v in settings['lr_grid'])}.")
    length = ("Each cell trains for its budget's epochs (the epochs column; steps: the optimizer "
              "steps it took)" if budgets else "Every cell trains for the baseline's epochs")
    lines += ["", f"{length}; each is evaluated "
              f"{settings['evals']} times, evenly spaced, and time-to-target is read at the first "
              "evaluation that reaches the target (so it is resolved to a tenth of a run at the "
              "default 10 evaluations). Speedup = the baseline's time to the target / the cell's. "
              "Training time: the whole run's. Per-cell numbers: "
              "`results.csv`; everything: `results.json`."]
    return lines


def _ms(g: Group) -> str:
    if g.mean is None:
        return "—"
    if len(g.results) == 1:
        return f"{g.mean:.4g} (1)"
    return f"{g.mean:.4g} ± {g.std:.2g} ({len(g.results)})"


def _row(g: Group, base: Group | None) -> str:
    first = g.results[0]
    k = g.batch / base.batch if base else math.nan
    lr = "" if first.peak_lr is None else f"{first.peak_lr:.4g}"
    warm = "" if first.warmup_epochs is None else f"{first.warmup_epochs:.3g}"
    epochs = f"{first.epochs:.3g}" if first.epochs else ""
    status = {r.status for r in g.results}
    if g.mean is not None:
        metric = _ms(g)
    elif "diverged" in status:
        metric = "diverged"
    else:
        metric = f"({', '.join(sorted(status))})"
    delta = "" if g.delta is None else f"{g.delta:+.3g}"
    holds = {True: "✓", False: "✗", None: ""}[g.holds] if g.scheme != BASELINE else ""
    to_steps = "" if g.steps_to_target is None else f"{g.steps_to_target:.0f}"
    if g.time_to_target_s is None:
        to_time = (
            f"not reached ({g.reached}/{len(g.results)})"
            if g.complete and g.mean is not None
            else ""
        )
    else:
        to_time = f"{g.time_to_target_s:.1f}"
    speed = (
        "1"
        if g.scheme == BASELINE and g.time_to_target_s
        else ("" if g.speedup is None else f"{g.speedup:.2f}×")
    )
    name = g.scheme + (f" (lr {g.grid_lr:g})" if g.grid_lr is not None else "")
    train = "" if g.train_s is None else f"{g.train_s:.0f}"
    return (
        f"| {g.batch} | {k:g} | {name} | {lr} | {warm} | {epochs} | {g.steps} | {metric} | "
        f"{delta} | "
        f"{holds} | {to_steps} | {to_time} | {speed} | {train} |"
    )


class SweepProgress:
    """A table of the cells, redrawn in place on a terminal; elsewhere a line per finished cell."""

    def __init__(self, console: Console, cells: list[PlannedCell], results: dict) -> None:
        self.console, self.cells, self.results = console, cells, results
        self.live = (
            Live(console=console, auto_refresh=False, transient=False)
            if console.is_terminal
            else None
        )
        self._said: set = set()

    def __enter__(self) -> SweepProgress:
        if self.live is not None:
            self.live.__enter__()
            self.update()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.update()
            self.live.__exit__(*exc)

    def update(self) -> None:
        if self.live is not None:
            self.live.update(RenderGroup(self.table()), refresh=True)
            return
        for planned in self.cells:  # plain output: one line per cell as it ends
            result = self.results[planned.cell]
            if result.status in ("done", "diverged", "failed") and planned.cell not in self._said:
                self._said.add(planned.cell)
                self.console.print(_line(result), soft_wrap=True, highlight=False)

    def table(self) -> Table:
        table = Table(title="date sweep", title_justify="left")
        for col in ("cell", "status", "step", "metric", "loss", "train s"):
            table.add_column(col, justify="left" if col in ("cell", "status") else "right")
        for planned in self.cells:
            r = self.results[planned.cell]
            metric = r.metric if r.metric is not None else (r.evals[-1][2] if r.evals else None)
            table.add_row(
                planned.cell.name,
                _status(r.status),
                f"{r.steps}/{r.total_steps or planned.run.plan.total_iterations}",
                "" if metric is None else f"{metric:.4g}",
                f"{r.losses[-1][1]:.4g}" if r.losses else "",
                "" if r.train_s is None else f"{r.train_s:.0f}",
            )
        return table


def _status(status: str) -> str:
    return {
        "done": "[green]done[/]",
        "running": "[cyan]running[/]",
        "diverged": "[red]diverged[/]",
        "failed": "[red]failed[/]",
        "partial": "[yellow]partial[/]",
    }.get(status, status)


def _line(r: CellResult) -> str:
    metric = "—" if r.metric is None else f"{r.metric:.4g}"
    seconds = "" if r.train_s is None else f", {r.train_s:.0f} s"
    return f"{r.cell.name}: {r.status}, metric {metric}, {r.steps} steps{seconds}"
