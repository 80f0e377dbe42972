"""The studies' results as data: readers for docs/results.

- ``sweeps/<name>.jsonl``: one file per `date sweep`. Its first line holds the sweep's settings (the
  command, the machine, the schemes in the order asked for, the tolerance, the metric); every other
  line is one cell: recipe, overrides, scheme, budget, batch, grid LR, seed, status, metric, steps,
  epochs, peak LR, warmup, training and wall seconds, the step and time at which it reached the
  baseline's accuracy, machine and command.
- ``probes.jsonl``: one `date probe`'s probe.json per line, under the name of the folder it was
  written to (``probes/lenet-mnist``, ``probes-lrcheck/vit-mnist-seed0``, ...).
- ``runs.jsonl``: single `date scale` runs outside a sweep (their summary.json), kept as data.

:func:`sweep` rebuilds a sweep's summary (means, deltas, verdicts, seed-by-seed differences) with
the same code `date sweep` uses, so a table generated from it is what the sweep itself reported.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from date_engine.probe import Probe
from date_engine.sweep.grid import Cell
from date_engine.sweep.results import CellResult, SweepSummary, Tolerance, summarize
from date_engine.sweep.schemes import budget_label

RESULTS = Path(__file__).resolve().parent.parent / "docs" / "results"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@cache
def sweep_rows(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A sweep's header (its settings) and its cells, as stored: in sweeps/NAME.jsonl, or among
    a study's sweeps in studies/*.jsonl."""
    path = RESULTS / "sweeps" / f"{name}.jsonl"
    if path.exists():
        header, *cells = _lines(path)
        return header, cells
    rows = [r for study in sorted((RESULTS / "studies").glob("*.jsonl")) for r in _lines(study)
            if r.get("sweep") == name]
    if not rows:
        raise FileNotFoundError(f"no stored sweep {name}")
    header, *cells = rows
    return header, cells


def study_of(name: str) -> str | None:
    """The study file (docs/results/studies/STUDY.jsonl) that holds sweep ``name``, if any."""
    for study in sorted((RESULTS / "studies").glob("*.jsonl")):
        if any(r.get("sweep") == name for r in _lines(study)):
            return study.stem
    return None


def label(row: dict[str, Any]) -> str:
    """The scheme's label in the sweep: ``date``, or ``date+hold`` where it ran several budgets."""
    return budget_label(row["scheme"], row["budget"])


def _result(row: dict[str, Any]) -> CellResult:
    result = CellResult(Cell(label(row), row["batch"], row["seed"], row["grid_lr"]), row["status"],
                        row["metric"], row["steps"], row["total_steps"], row["epochs"],
                        row["peak_lr"], row["warmup_epochs"], row["wall_s"], row["train_s"],
                        row["samples_per_s"])
    result.reached_step, result.reached_s = row["steps_to_target"], row["time_to_target_s"]
    return result


@cache
def sweep(name: str) -> SweepSummary:
    """The sweep's summary, recomputed from its cells as `date sweep` computes it."""
    header, cells = sweep_rows(name)
    settings = header["settings"]
    labels = [budget_label(s, b) for s in settings["schemes"]
              for b in settings.get("budgets") or [None]]
    return summarize([_result(r) for r in cells], header["metric"], header["higher_is_better"],
                     Tolerance.parse(settings["tolerance"]), labels)


def group(name: str, scheme: str, batch: int | None = None):
    """The (scheme, batch) group of a sweep; ``scheme`` 'baseline' gives its baseline."""
    summary = sweep(name)
    if scheme == "baseline":
        return summary.baseline
    return next(g for g in summary.groups
                if g.scheme == scheme and (batch is None or g.batch == batch))


def seed_metrics(names: list[str] | tuple[str, ...], scheme: str,
                 batch: int | None = None) -> dict[int, float]:
    """Seed -> final metric of ``scheme``'s finished cells at ``batch`` over several sweeps."""
    out: dict[int, float] = {}
    for name in names:
        for row in sweep_rows(name)[1]:
            if (label(row) == scheme and (batch is None or row["batch"] == batch)
                    and row["status"] == "done" and row["metric"] is not None):
                out[row["seed"]] = row["metric"]
    return out


@cache
def _probes() -> dict[str, dict[str, Any]]:
    return {row.pop("name"): row for row in _lines(RESULTS / "probes.jsonl")}


def probe(name: str) -> Probe:
    """A stored probe (``probes/lenet-mnist``) as :meth:`Probe.read` gives it."""
    return Probe.from_dict(dict(_probes()[name]), f"docs/results/probes.jsonl:{name}")


def write_probe(name: str, path: Path) -> Path:
    """A stored probe written out as the probe.json `date probe` wrote, for ``--probe``."""
    path.write_text(json.dumps(_probes()[name], indent=2) + "\n")
    return path
