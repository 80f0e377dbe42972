"""``date sweep``: train a baseline at several batch sizes under several schemes and compare.

Data flows as everywhere else: spec → one spec and plan per cell (:mod:`.grid`, with the schemes of
:mod:`.schemes`) → ``date scale`` per cell (:mod:`.runner`) → results read back from the cells'
folders (:mod:`.results`) → results.csv/json, report.md and figures, written by the display the
caller passes in (:class:`SweepDisplay`; ``date sweep``'s is :class:`date_engine.view.sweep.
SweepDisplay`): nothing here imports the view.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from date_engine.errors import DateError, PlanError
from date_engine.files import read_small_text
from date_engine.machine import choose_threads, describe
from date_engine.recipes import Recipe
from date_engine.spec import Spec
from date_engine.sweep.grid import Cell, PlannedCell, build_cells, parse_batches, parse_lr_grid
from date_engine.sweep.results import CellResult, SweepSummary, Tolerance, read_cell, summarize
from date_engine.sweep.schemes import (
    BASELINE,
    DEFAULT_LR_GRID,
    SCHEMES,
    Scheme,
    budget_label,
    parse_budgets,
    parse_schemes,
)

__all__ = [
    "BASELINE",
    "DEFAULT_LR_GRID",
    "FIGURES_EVERY_S",
    "SCHEMES",
    "Cell",
    "SweepDisplay",
    "SweepOptions",
    "Tolerance",
    "parse_batches",
    "parse_budgets",
    "parse_grid_options",
    "parse_lr_grid",
    "parse_schemes",
    "plan_sweep",
    "run_sweep",
    "sweep_forecast",
    "sweep_settings",
    "sweep_time_forecast",
]


@dataclass(frozen=True)
class SweepOptions:
    batches: list[int]
    schemes: list[Scheme]
    repeats: int = 1
    lr_grid: tuple[float, ...] = ()
    tolerance: Tolerance = field(default_factory=lambda: Tolerance(0.01, True))
    evals: int = 10
    nproc: int = 1
    jobs: int = 1
    budgets: tuple[str, ...] = ()
    """``--budgets``: each scheme once per budget (``scheme+budget``); empty: the spec's."""
    probe: str | None = None
    """probe.json for the hold and ramp budgets (absolute: every cell runs elsewhere)."""
    grid_options: dict[str, Any] = field(default_factory=dict)
    """``--grid-set``: options of the optimizer the grid schemes (lars, lamb, adam) tune, e.g.
    LAMB's phi_bounds."""

    @property
    def labels(self) -> list[str]:
        """The names the cells' groups go by: each scheme, or each scheme+budget."""
        return [budget_label(s.name, b) for s in self.schemes for b in self.budgets or [None]]


def plan_sweep(
    spec: Spec, options: SweepOptions, recipe: Recipe | None = None
) -> list[PlannedCell]:
    """Every cell of the sweep, validated, with the plan its ``date scale`` will train with."""
    seeds = [spec.train.seed + i for i in range(options.repeats)]
    return build_cells(
        spec,
        options.batches,
        options.schemes,
        seeds,
        list(options.lr_grid),
        world_size=options.nproc,
        evals=options.evals,
        recipe=recipe,
        budgets=list(options.budgets) or None,
        probe=options.probe,
        grid_options=options.grid_options,
    )


def sweep_settings(spec_path: Path, spec: Spec, recipe: Recipe, options: SweepOptions,
                   cells: list[PlannedCell], overrides: list[str], command: str,
                   probed: Spec | None = None, bench: Path | None = None) -> dict[str, Any]:
    """What results.json records of how the sweep was asked for: the spec, recipe, command,
    batches, schemes, seeds, budgets, tolerance; with ``probed`` (the spec with its probe) each
    batch's forecast; with ``bench`` each cell's forecast time; the default rule's settings the
    spec gives."""
    from date_engine.sweep.schemes import DATE_SETTABLE, given_settings

    settings: dict[str, Any] = {
        "spec": str(spec_path), "recipe": recipe.name, "overrides": overrides,
        "command": command, "batches": options.batches,
        "schemes": [s.name for s in options.schemes], "repeats": options.repeats,
        "budgets": list(options.budgets), "tolerance": str(options.tolerance)}
    if probed is not None:
        settings["forecast"] = sweep_forecast(probed, options.batches, options.nproc, recipe)
    if bench is not None:
        settings["time_forecast"] = sweep_time_forecast(bench, cells, recipe.name)
    names = [s.name for s in options.schemes]
    if "date" in names and (taken := given_settings(spec, DATE_SETTABLE)):
        settings["date_settings"] = taken
    return settings


FIGURES_EVERY_S = 60.0
"""While cells train, the figures are redrawn after a cell ends at most this often (drawing them
takes seconds, during which no cell is started); the tables and report.md after every cell, and
everything when the sweep ends."""


class SweepDisplay(Protocol):
    """What a sweep shows and writes, given by its caller."""

    def progress(self, cells: list[PlannedCell], results: dict[Cell, CellResult]) -> Any:
        """A context manager over the cells' training whose ``update()`` redraws them."""

    def error(self, sentence: str) -> None:
        """Say that a cell failed."""

    def write(self, root: Path, summary: SweepSummary, results: list[CellResult],
              settings: dict[str, Any], schemes: list[str], draw_figures: bool) -> None:
        """Write results.csv/json, report.md and (with ``draw_figures``) the figures."""


def run_sweep(
    recipe: Recipe,
    cells: list[PlannedCell],
    options: SweepOptions,
    root: Path,
    settings: dict[str, Any],
    display: SweepDisplay,
    train: bool = True,
) -> tuple[SweepSummary, int]:
    """Train the cells not yet finished (unless ``train`` is False), then write every output
    through ``display``."""
    from date_engine.sweep.runner import cell_folder, run_cells

    names = options.labels
    # the cores idle as the sweep starts, shared by its jobs × nproc processes (a user's
    # OMP_NUM_THREADS as given): threads beyond the free cores wait on each other
    threads = choose_threads(options.jobs * options.nproc)[0] if train else 1
    settings = {
        **settings,
        "machine": describe(),
        "threads": threads,
        "jobs": options.jobs,
        "nproc": options.nproc,
        "evals": options.evals,
        "lr_grid": list(options.lr_grid),
    }
    root.mkdir(parents=True, exist_ok=True)
    if not train:  # the report describes the run that trained the cells, not this command
        previous = _settings_of(root)
        settings.update(
            {
                k: previous[k]
                for k in ("command", "machine", "threads", "jobs", "nproc")
                if k in previous
            }
        )

    drawn_at = time.monotonic()  # when the figures were last drawn: first a minute in

    def report(results: list[CellResult], final: bool = True) -> SweepSummary:
        nonlocal drawn_at
        summary = summarize(
            results, recipe.metric_name, recipe.higher_is_better, options.tolerance, names
        )
        draw = final or time.monotonic() - drawn_at >= FIGURES_EVERY_S
        display.write(root, summary, results, settings, names, draw_figures=draw)
        if draw:
            drawn_at = time.monotonic()
        return summary

    code = 0
    if train:
        results, code = run_cells(
            root,
            cells,
            nproc=options.nproc,
            jobs=options.jobs,
            threads=threads,
            metric_name=recipe.metric_name,
            display=display,
            on_change=lambda results: report(results, final=False),
        )
    else:
        results = [read_cell(p.cell, cell_folder(root, p.cell), recipe.metric_name) for p in cells]
    return report(results), code


def _settings_of(root: Path) -> dict[str, Any]:
    try:
        return json.loads(read_small_text(root / "results.json", "sweep results",
                                          "not the sweep's"))["settings"]
    except (DateError, ValueError, KeyError, TypeError):
        return {}


def sweep_time_forecast(bench_path: Path, cells: list[PlannedCell], recipe: str) -> dict:
    """The time model's forecast of each cell's training (:func:`date_engine.timing.forecast`,
    no overlap) from ``date bench``'s bench.json, for the report beside the measured time."""
    from date_engine.timing import Bench, forecast

    bench = Bench.read(bench_path)
    bench.check(bench_path, recipe, max(p.run.split.world_size for p in cells), None)
    seconds = {p.cell.name: forecast(bench, p.run, precision=p.spec.get("train", {}).get(
        "precision", "fp32")).run_seconds for p in cells}
    return {"bench": str(bench_path), "machine": bench.machine, "cells": seconds}


def sweep_forecast(spec: Spec, batches: list[int], nproc: int, recipe: Recipe) -> dict:
    """The probe's forecast (``spec.date.probe``) for each batch of the sweep, from the same plans
    ``date plan --probe`` prints (the cells themselves train without it), for its report. The
    forecast does not depend on the budget: a batch the spec's own budget refuses (LEGW's warmup
    outlasting the baseline's epochs) takes it from the plan of budget hold, which a sweep of
    ``--budgets hold`` trains."""
    from date_engine.planning import plan_for
    from date_engine.spec import parse_spec

    held = None
    rows = []
    for batch in batches:
        try:
            ahead = plan_for(spec, batch, devices=nproc, recipe=recipe).plan.forecast
        except PlanError:
            if held is None:
                raw = spec.model_dump(mode="json", exclude_none=True)
                raw.setdefault("date", {})["budget"] = "hold"
                held = parse_spec(raw, source="the sweep's forecast")
            ahead = plan_for(held, batch, devices=nproc, recipe=recipe).plan.forecast
        rows.append({"batch": batch, "factor": ahead.factor, "epochs": ahead.epochs,
                     "steps": ahead.steps, "holding_batch": ahead.holding_batch,
                     "expected": "loses" if ahead.loses_at_same_epochs else "holds"})
    return {"probe": str(spec.date.probe), "batches": rows}


def parse_grid_options(values: list[str] | None) -> dict[str, Any]:
    """``--grid-set KEY=VALUE`` (repeatable) as the options of the grid schemes' optimizer;
    VALUE is YAML, as with --set (phi_bounds=[1,10])."""
    from date_engine.errors import DateError, SpecError
    from date_engine.spec import apply_overrides

    options: dict[str, Any] = {}
    for value in values or ():
        key = value.partition("=")[0].strip()
        if not key or "." in key:
            raise DateError(f"--grid-set {value!r}: expected an option of the tuned optimizer as "
                            "KEY=VALUE, e.g. --grid-set phi_bounds=[1,10].")
        try:
            options.update(apply_overrides({}, [value]))
        except SpecError as exc:
            raise DateError(str(exc).replace("--set", "--grid-set", 1)) from None
    return options
