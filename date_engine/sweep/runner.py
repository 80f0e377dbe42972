"""Run a sweep's cells through ``date scale``, one process tree per cell, and show them live.

Each cell is a ``date scale`` of its own spec into its own folder (``cells/<name>/``), with its
output in ``log.txt``; so a cell trains exactly as a user's run would, checkpoints included.
Re-running the sweep skips finished cells and resumes interrupted ones from their checkpoints.

Signals: the cells run in sessions of their own, and the sweep passes SIGINT (Ctrl-C) and SIGTERM
on to them once: each cell finishes its step, writes a checkpoint and exits; the sweep waits for
them and exits 130 or 143. While a cell trains, its ``date scale`` holds the run folder's lock, so
that a second sweep over the same folder is refused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from date_engine.errors import DateError
from date_engine.runfolder import RunFolder
from date_engine.sweep.grid import Cell, PlannedCell
from date_engine.sweep.results import CellResult, read_cell

__all__ = ["CellRun", "cell_command", "cell_folder", "prepare_cell", "run_cells"]



@dataclass
class CellRun:
    planned: PlannedCell
    folder: RunFolder
    process: subprocess.Popen | None = None


def cell_folder(root: Path, cell: Cell) -> Path:
    """The run folder of ``cell`` in the sweep folder ``root``."""
    return root / "cells" / cell.name


def prepare_cell(root: Path, planned: PlannedCell) -> RunFolder:
    """Write the cell's spec into its folder; refuse a folder written for other settings."""
    folder = cell_folder(root, planned.cell)
    run = RunFolder(folder)
    text = yaml.safe_dump(planned.spec, sort_keys=False)
    path = run.cell_spec_path
    if path.exists() and path.read_text() != text and not _same_spec(path.read_text(), planned):
        raise DateError(f"{folder} was trained with other settings than this sweep asks for (see "
                        f"its {path.name}); use another --output-dir, or delete that folder to "
                        "run the cell again.")
    if holder := run.lock_holder():
        raise DateError(f"{folder} is being trained by {holder} (another sweep?); wait for it or "
                        "stop it first.")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return run


def _same_spec(written: str, planned: PlannedCell) -> bool:
    """Whether a cell.yaml written by another version asks for the same training as ``planned``:
    both read with this version's defaults (a field added since, at its default, is no change;
    a baseline cell's settings that are moot at k = 1, which older versions wrote, are none; nor
    is ``date.second_moment: scaled``, which versions before branches wrote as the default)."""
    from date_engine.spec import parse_spec
    from date_engine.sweep.schemes import BASELINE, baseline

    try:
        raw = yaml.safe_load(written)
        if planned.cell.scheme == BASELINE and isinstance(raw, dict):
            raw = baseline(raw)
        date = raw.get("date") if isinstance(raw, dict) else None
        if isinstance(date, dict) and date.get("second_moment") == "scaled":
            del date["second_moment"]  # the default before it could be measured (none now)
        old = parse_spec(raw, source="cell.yaml")
    except (DateError, yaml.YAMLError):
        return False
    return old == parse_spec(planned.spec, source="cell.yaml")


def cell_command(planned: PlannedCell, folder: RunFolder, nproc: int, resume: bool) -> list[str]:
    """The ``date scale`` command line that trains the cell."""
    cmd = [
        sys.executable,
        "-m",
        "date_engine",
        "scale",
        str(folder.cell_spec_path),
        "--batch",
        str(planned.cell.batch),
        "--output-dir",
        str(folder.root),
        "--nproc",
        str(nproc),
    ]
    return cmd + (["--resume"] if resume else [])


def run_cells(
    root: Path,
    cells: list[PlannedCell],
    *,
    nproc: int = 1,
    jobs: int = 1,
    threads: int = 1,
    metric_name: str,
    display: Any,
    on_change: Callable[[list[CellResult]], None] | None = None,
) -> tuple[list[CellResult], int]:
    """Train every cell not yet finished, ``jobs`` at a time, each process of a new cell with
    ``threads`` CPU threads. Returns every cell's result and the
    sweep's exit code: 0; 130/143 after a signal; 2 when a cell refused its input (no cell is
    started after that: the others would refuse it too); 1 when a cell failed otherwise."""

    runs = [CellRun(p, prepare_cell(root, p)) for p in cells]
    results = {r.planned.cell: read_cell(r.planned.cell, r.folder.root, metric_name) for r in runs}
    todo = [r for r in runs if results[r.planned.cell].status not in ("done", "diverged")]
    env = _cell_environment(threads)
    signals, running, ends = _Signals(), [], set()
    try:
        with display.progress(cells, results) as view:
            while todo or running:
                while todo and len(running) < jobs and not signals.received:
                    run = todo.pop(0)
                    resume = results[run.planned.cell].status == "partial"
                    _start(run, nproc, env.resumed if resume else env.new, resume)
                    running.append(run)
                    results[run.planned.cell].status = "running"
                signals.pass_on(running)
                time.sleep(0.5)
                for run in list(running):
                    code = run.process.poll()
                    result = results[run.planned.cell] = read_cell(
                        run.planned.cell, run.folder.root, metric_name
                    )
                    if code is None:
                        result.status = "running"
                        continue
                    running.remove(run)
                    ends.add(_ended(run, code, result, display.error))
                    if "usage" in ends:  # a mistake every cell would repeat: start no more
                        todo.clear()
                    if on_change is not None:
                        on_change(list(results.values()))
                if signals.received and not running:
                    break
                view.update()
    finally:
        signals.restore()
        for run in running:  # only after an unexpected error in the sweep itself
            run.process.terminate()
    if signals.received:
        return list(results.values()), 128 + signals.received[0]
    return list(results.values()), 2 if "usage" in ends else 1 if "failed" in ends else 0


@dataclass(frozen=True)
class _CellEnvironment:
    new: dict[str, str]
    """A cell started now: the user's OMP_NUM_THREADS, or the threads the sweep chose."""
    resumed: dict[str, str]
    """A cell resumed: the user's OMP_NUM_THREADS, or none, so that ``date scale --resume`` keeps
    the threads it began with (it goes on bit for bit)."""


def _cell_environment(threads: int) -> _CellEnvironment:
    """Every cell's environment: ``threads`` per process for a cell started now."""
    user = os.environ.get("OMP_NUM_THREADS", "").strip()
    resumed = dict(os.environ) if user else \
        {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    return _CellEnvironment({**os.environ, "OMP_NUM_THREADS": str(threads)}, resumed)


def _start(run: CellRun, nproc: int, env: dict[str, str], resume: bool) -> None:
    """Start the cell's ``date scale`` in a session of its own, its output into log.txt."""
    with open(run.folder.log_path, "a") as log:
        run.process = subprocess.Popen(
            cell_command(run.planned, run.folder, nproc, resume),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )


def _ended(run: CellRun, code: int, result: CellResult, say: Callable[[str], None]
           ) -> str | None:
    """Account for a cell that exited with ``code``: 'usage' (it refused its input), 'failed'
    (anything else that is not a finish, a divergence or a signal stop) or None; ``say`` tells
    the user which."""
    if code == 2:
        result.status = "failed"
        say(f"cell {run.planned.cell.name}: {_error_line(run.folder)}")
        return "usage"
    if code not in (0, 3, 130, 143) or (code == 0 and result.status != "done"):
        result.status = "failed"
        say(f"cell {run.planned.cell.name} failed (exit {code}); see {run.folder.log_path}")
        return "failed"
    return None


class _Signals:
    """SIGINT/SIGTERM received by the sweep, passed on once to the running cells (each finishes
    its step, checkpoints and exits)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._passed = False
        self._previous = {
            sig: signal.signal(sig, lambda signum, frame: self.received.append(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)
        }

    def pass_on(self, running: list[CellRun]) -> None:
        if self.received and running and not self._passed:
            for run in running:
                run.process.send_signal(self.received[0])
            self._passed = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _error_line(folder: RunFolder) -> str:
    """The error sentence a cell's ``date scale`` ended with."""
    try:
        lines = folder.log_path.read_text().splitlines()
    except OSError:
        lines = []
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return errors[-1] if errors else f"it stopped with exit code 2; see {folder.log_path}"
