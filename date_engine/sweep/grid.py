"""The cells of a sweep: one training run per (batch, scheme, grid LR, seed), each with its spec.

Every cell's spec is validated and its plan derived before anything trains, so that a batch the
scheme cannot reach (LEGW's warmup outlasting training, a batch larger than the data set) is
reported at once, not hours into the sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from date_engine.checks import parse_size
from date_engine.errors import DateError, PlanError
from date_engine.planning import plan_for
from date_engine.recipes import Recipe
from date_engine.runplan import RunPlan
from date_engine.spec import DateSpec, Spec, parse_spec
from date_engine.sweep.schemes import BASELINE, BUDGETS, Scheme, baseline, budget_label

__all__ = ["Cell", "build_cells", "parse_batches", "parse_lr_grid"]

LOG_LINES = 100
"""About how many training-loss lines each cell writes (its loss curve)."""


@dataclass(frozen=True)
class Cell:
    scheme: str
    """A scheme's name (with ``+budget`` under ``--budgets``), or 'baseline' for the cells at the
    baseline batch."""
    batch: int
    seed: int
    lr: float | None = None
    """The grid LR of schemes that search one (lars, lamb, adam); None for the others."""

    @property
    def name(self) -> str:
        lr = f"-lr{self.lr:g}" if self.lr is not None else ""
        return f"{self.scheme}-B{self.batch}{lr}-s{self.seed}"


@dataclass(frozen=True)
class PlannedCell:
    cell: Cell
    spec: dict[str, Any]
    """The cell's spec as a plain mapping, as written to its folder."""
    run: RunPlan
    """What the cell's ``date scale`` trains with (the same :func:`plan_for`)."""


def parse_batches(text: str) -> list[int]:
    """``"1024,4096"`` (also with ``k``/``K`` for 1024: ``"8k"``) -> sorted distinct batches."""

    return _parse_list(text, "--batches", lambda part: parse_size(part, "--batches"),
                       "a whole number", "1024,4096,16k")


def parse_lr_grid(text: str) -> list[float]:
    """``"1e-3,3e-3"`` -> the grid of peak LRs for lars, lamb and adam, sorted."""

    def lr(part: str) -> float:
        value = float(part)
        if not value > 0 or math.isinf(value):
            raise DateError(f"--lr-grid: {part} is not a positive learning rate.")
        return value

    return _parse_list(text, "--lr-grid", lr, "a number", "1e-3,3e-3,1e-2")


def _parse_list(text: str, option: str, convert, kind: str, example: str) -> list:
    """Comma-separated values of ``option``, each through ``convert``, sorted and distinct."""
    values = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            values.append(convert(part))
        except ValueError:
            raise DateError(
                f"{option}: '{part}' is not {kind}; write e.g. {option} {example}."
            ) from None
    if not values:
        raise DateError(f"{option}: nothing given; write e.g. {option} {example}.")
    return sorted(set(values))


def build_cells(
    spec: Spec,
    batches: list[int],
    schemes: list[Scheme],
    seeds: list[int],
    lr_grid: list[float],
    world_size: int = 1,
    evals: int = 10,
    recipe: Recipe | None = None,
    budgets: list[str] | None = None,
    probe: str | None = None,
    grid_options: dict[str, Any] | None = None,
) -> list[PlannedCell]:
    """Every cell of the sweep, baseline cells first, each with a validated spec and its plan.

    The cells at the baseline batch B0 are the baseline (the spec with ratios off); the schemes run
    at every other batch. ``evals`` evaluations per cell are spread evenly over its steps, so that
    time-to-accuracy can be read off; about ``LOG_LINES`` training-loss lines are logged.
    With ``budgets`` each scheme runs once per budget (``date.budget``), as ``scheme+budget``;
    hold and ramp read the probe.json at ``probe``, and so does every cell of the ``date`` scheme
    (the default rule's exponent reads the probe's LR check). A ramp's evaluations are spread over
    the fewest steps it can take (all of it at the batch), as a measured ramp may end early.
    """
    probe = probe or spec.date.probe
    if budgets and probe is None and set(budgets) - {"same-epochs"}:
        raise DateError("--budgets hold and ramp take their epochs from a probe; pass --probe "
                        "<probe.json of the baseline> (date probe SPEC writes one).")
    raw = spec.model_dump(mode="json", exclude_none=True)
    b0 = spec.baseline.batch_size
    wanted: list[tuple[Cell, dict[str, Any]]] = [
        (Cell(BASELINE, b0, seed), baseline(raw)) for seed in seeds
    ]
    for batch in batches:
        if batch == b0:
            continue
        for scheme in schemes:
            for budget in budgets or [None]:
                for lr in lr_grid if scheme.uses_grid else [None]:
                    for seed in seeds:
                        cell_raw = scheme.apply(raw, lr)
                        if scheme.uses_grid and grid_options:  # --grid-set: its own options
                            cell_raw["baseline"]["optimizer"].update(grid_options)
                        if budget is not None:
                            cell_raw.setdefault("date", {}).update(BUDGETS[budget][0])
                        if probe is not None and (scheme.name == "date" or budget not in
                                                  (None, "same-epochs")):
                            # hold and ramp read it; the default rule reads its LR check
                            cell_raw.setdefault("date", {})["probe"] = probe
                        wanted.append((Cell(budget_label(scheme.name, budget), batch, seed, lr),
                                       cell_raw))
    planned = []
    for cell, cell_raw in wanted:
        cell_raw.setdefault("train", {})["seed"] = cell.seed
        date = cell_raw.setdefault("date", {})
        if date.get("budget") != "ramp":
            for key in RAMP_ONLY:  # unused: sweeps that differ only there share the cell
                date.pop(key, None)
        cell_spec = parse_spec(cell_raw, source=f"sweep cell {cell.name}")
        try:
            run = plan_for(cell_spec, cell.batch, devices=world_size, recipe=recipe)
        except PlanError as exc:
            raise DateError(f"cell {cell.name} ({_what(cell)}): {exc}") from None
        plan = run.plan
        steps = plan.total_iterations
        if plan.ramp and plan.ramp_mode == "measured":
            steps = math.ceil(plan.total_epochs * plan.dataset_size / plan.target_batch)
        train = cell_raw["train"]
        train["eval_every"] = max(1, math.ceil(steps / max(evals, 1)))
        train["log_every"] = max(1, round(steps / LOG_LINES))
        planned.append(PlannedCell(cell, cell_raw, run))
    return planned


RAMP_ONLY = tuple(name for name in DateSpec.model_fields if name.startswith("ramp"))
"""date settings only a ramp reads (``date.ramp*``): left out of other cells' specs, so that a
sweep that varies them (--set date.ramp_reach=2) finds the baseline's cells of one that did not
as finished."""


def _what(cell: Cell) -> str:
    if cell.scheme == BASELINE:
        return f"the baseline at batch {cell.batch}"
    lr = f" at lr {cell.lr:g}" if cell.lr is not None else ""
    return f"scheme {cell.scheme}{lr}, batch {cell.batch}"
