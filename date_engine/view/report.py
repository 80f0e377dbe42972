"""A sweep's outputs: results.csv, results.json, report.md and the figures (what
:class:`SweepDisplay` writes for :func:`date_engine.sweep.run_sweep`).

The figures are the paper's: the final metric against the batch per scheme (its Fig. 1), and the
time to the baseline's accuracy against the batch (its Fig. 2); besides them the LR schedules and
training-loss curves the cells ran (drawn by :mod:`date_engine.view.plots`; without matplotlib the
report says how to get them).
"""

from __future__ import annotations

import csv
import dataclasses
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from date_engine.plan import Plan
from date_engine.runfolder import RunFolder
from date_engine.sweep import FIGURES_EVERY_S
from date_engine.sweep.grid import PlannedCell
from date_engine.sweep.results import CellResult, SweepSummary
from date_engine.sweep.runner import cell_folder
from date_engine.view.console import error_line
from date_engine.view.plots import FIGURES, sweep_figures
from date_engine.view.sweep import SweepProgress, report_markdown

__all__ = ["SweepDisplay", "write_outputs"]

LATER = (f"they are drawn when the sweep ends, and at most once every {FIGURES_EVERY_S:.0f} s "
         "while it runs")


def write_outputs(root: Path, summary: SweepSummary, results: list[CellResult],
                  settings: dict[str, Any], schemes: list[str],
                  draw_figures: bool = True) -> list[Path]:
    """Write every output of the sweep into ``root``; returns the paths written. Without
    ``draw_figures`` the figures are left as the last draw left them (report.md links those
    there are), the tables and report.md written anew."""
    def plan_of(result: CellResult) -> Plan | None:
        run = RunFolder(cell_folder(root, result.cell)).read_plan()
        return run.plan if run is not None else None

    written = [_csv(root / "results.csv", results)]
    data = {"settings": settings, "summary": summary.to_dict(),
            "verdicts": summary.verdicts(schemes), "cells": [r.row() for r in results]}
    (root / "results.json").write_text(json.dumps(data, indent=2, default=_plain))
    written.append(root / "results.json")
    figures = sweep_figures(root, summary, schemes, plan_of) if draw_figures else \
        {name: True if (root / name).exists() else f"not drawn yet: {LATER}" for name in FIGURES}
    (root / "report.md").write_text(report_markdown(summary, settings, schemes, figures))
    written.append(root / "report.md")
    return written + [root / name for name in figures if figures[name] is True and draw_figures]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return str(value)


def _csv(path: Path, results: list[CellResult]) -> Path:
    rows = [r.row() for r in results]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["scheme"])
        writer.writeheader()
        writer.writerows(rows)
    return path


class SweepDisplay:
    """``date sweep``'s display (:class:`date_engine.sweep.SweepDisplay`): the cells live on
    ``console``, failures on stderr, the outputs by :func:`write_outputs`."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def progress(self, cells: list[PlannedCell], results: dict) -> SweepProgress:
        return SweepProgress(self.console, cells, results)

    def error(self, sentence: str) -> None:
        Console(stderr=True, highlight=False, soft_wrap=True).print(error_line(sentence))

    def write(self, root: Path, summary: SweepSummary, results: list[CellResult],
              settings: dict[str, Any], schemes: list[str], draw_figures: bool) -> None:
        write_outputs(root, summary, results, settings, schemes, draw_figures=draw_figures)
