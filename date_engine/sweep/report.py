"""A sweep's outputs: results.csv, results.json, report.md and the figures.

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

from date_engine.plan import Plan
from date_engine.runfolder import RunFolder
from date_engine.sweep.results import CellResult, SweepSummary
from date_engine.view.plots import sweep_figures
from date_engine.view.sweep import report_markdown

__all__ = ["write_outputs"]


def write_outputs(root: Path, summary: SweepSummary, results: list[CellResult],
                  settings: dict[str, Any], schemes: list[str]) -> list[Path]:
    """Write every output of the sweep into ``root``; returns the paths written."""
    from date_engine.sweep.runner import cell_folder

    def plan_of(result: CellResult) -> Plan | None:
        run_plan = RunFolder(cell_folder(root, result.cell)).read_plan()
        return run_plan.plan if run_plan is not None else None

    written = [_csv(root / "results.csv", results)]
    data = {"settings": settings, "summary": summary.to_dict(),
            "verdicts": summary.verdicts(schemes), "cells": [r.row() for r in results]}
    (root / "results.json").write_text(json.dumps(data, indent=2, default=_plain))
    written.append(root / "results.json")
    figures = sweep_figures(root, summary, schemes, plan_of)
    (root / "report.md").write_text(report_markdown(summary, settings, schemes, figures))
    written.append(root / "report.md")
    return written + [root / name for name in figures if figures[name] is True]


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
