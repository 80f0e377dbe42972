"""Run a sweep's cells through ``date scale``, one process tree per cell, and show them live.

Each cell is a ``date scale`` of its own spec into its own folder (``cells/<name>/``), with its
output in ``log.txt``; so a cell trains exactly as a user's run would, checkpoints included.
Re-running the sweep skips finished cells and resumes interrupted ones from their checkpoints.

Signals: the cells run in sessions of their own, and the sweep passes SIGINT (Ctrl-C) and SIGTERM
on to them once: each cell finishes its step, writes a checkpoint and exits; the sweep waits for
them and exits 130 or 143. A cell folder holds a RUNNING file with its process id while it trains,
so that a second sweep over the same folder is refused.
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

import yaml
from rich.console import Console, Group
from rich.live import Live
from rich.table import Table

from date_engine.errors import DateError
from date_engine.sweep.grid import PlannedCell
from date_engine.sweep.results import CellResult, read_cell

__all__ = ["CellRun", "run_cells"]

CELL_SPEC = "cell.yaml"
LOCK = "RUNNING"


@dataclass
class CellRun:
    planned: PlannedCell
    folder: Path
    process: subprocess.Popen | None = None


def threads_per_process(jobs: int, nproc: int) -> int:
    """CPU threads each training process gets when ``jobs`` cells of ``nproc`` processes run at once."""
    return max(1, (os.cpu_count() or 1) // max(1, jobs * nproc))


def cell_folder(root: Path, planned: PlannedCell) -> Path:
    return root / "cells" / planned.cell.name


def prepare_cell(root: Path, planned: PlannedCell) -> Path:
    """Write the cell's spec into its folder; refuse a folder written for other settings."""
    folder = cell_folder(root, planned)
    text = yaml.safe_dump(planned.spec, sort_keys=False)
    path = folder / CELL_SPEC
    if path.exists() and path.read_text() != text:
        raise DateError(
            f"{folder} was trained with other settings than this sweep asks for (see its {CELL_SPEC}); "
            "use another --output-dir, or delete that folder to run the cell again.")
    lock = folder / LOCK
    if lock.exists() and _alive(lock.read_text().strip()):
        raise DateError(f"{folder} is being trained by process {lock.read_text().strip()} (another "
                        "sweep?); wait for it or stop it first.")
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return folder


def scale_command(planned: PlannedCell, folder: Path, nproc: int, resume: bool) -> list[str]:
    """The ``date scale`` command line that trains the cell."""
    cmd = [sys.executable, "-m", "date_engine", "scale", str(folder / CELL_SPEC),
           "--batch", str(planned.cell.batch), "--output-dir", str(folder), "--nproc", str(nproc)]
    return cmd + (["--resume"] if resume else [])


def run_cells(
    root: Path,
    cells: list[PlannedCell],
    *,
    nproc: int = 1,
    jobs: int = 1,
    metric_name: str,
    console: Console,
    on_change: Callable[[list[CellResult]], None] | None = None,
) -> tuple[list[CellResult], int]:
    """Train every cell not yet finished, ``jobs`` at a time. Returns every cell's result and the
    sweep's exit code: 0; 130/143 after a signal; 2 when a cell refused its input (no cell is
    started after that: the others would refuse it too); 1 when a cell failed otherwise."""
    runs = [CellRun(p, prepare_cell(root, p)) for p in cells]
    results = {r.planned.cell: read_cell(r.planned.cell, r.folder, metric_name) for r in runs}
    todo = [r for r in runs if results[r.planned.cell].status not in ("done", "diverged")]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads_per_process(jobs, nproc))}
    stop: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: stop.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    running: list[CellRun] = []
    failed = usage = False
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    view = _LiveView(console, runs, results)
    try:
        with view:
            while todo or running:
                while todo and len(running) < jobs and not stop:
                    run = todo.pop(0)
                    resume = results[run.planned.cell].status == "partial"
                    log = open(run.folder / "log.txt", "a")
                    run.process = subprocess.Popen(
                        scale_command(run.planned, run.folder, nproc, resume), stdout=log,
                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                        start_new_session=True)
                    log.close()
                    (run.folder / LOCK).write_text(str(run.process.pid))
                    running.append(run)
                    results[run.planned.cell].status = "running"
                if stop and running and stop[0] != -1:
                    for run in running:  # each cell checkpoints and exits
                        run.process.send_signal(stop[0])
                    stop.insert(0, -1)  # passed on once
                time.sleep(0.5)
                for run in list(running):
                    code = run.process.poll()
                    cell = run.planned.cell
                    if code is None:
                        results[cell] = _live(read_cell(cell, run.folder, metric_name))
                        continue
                    running.remove(run)
                    (run.folder / LOCK).unlink(missing_ok=True)
                    results[cell] = read_cell(cell, run.folder, metric_name)
                    if code == 2:  # a mistake every cell would repeat: say it and start no more
                        results[cell].status, usage = "failed", True
                        todo.clear()
                        err.print(f"[red]error:[/] cell {cell.name}: {_error_line(run.folder)}")
                    elif code not in (0, 3, 130, 143) or (code == 0 and results[cell].status != "done"):
                        results[cell].status, failed = "failed", True
                        err.print(f"[red]cell {cell.name} failed (exit {code}); see "
                                  f"{run.folder / 'log.txt'}[/]")
                    if on_change is not None:
                        on_change(list(results.values()))
                if stop and not running:
                    break
                view.update()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for run in running:  # only after an unexpected error in the sweep itself
            run.process.terminate()
    signals = [s for s in stop if s != -1]
    if signals:
        return list(results.values()), 128 + signals[0]
    return list(results.values()), 2 if usage else 1 if failed else 0


def _error_line(folder: Path) -> str:
    """The error sentence a cell's ``date scale`` ended with."""
    try:
        lines = (folder / "log.txt").read_text().splitlines()
    except OSError:
        lines = []
    errors = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    return errors[-1] if errors else f"it stopped with exit code 2; see {folder / 'log.txt'}"


def _live(result: CellResult) -> CellResult:
    result.status = "running"
    return result


def _alive(pid: str) -> bool:
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True


class _LiveView:
    """A table of the cells, redrawn in place on a terminal; elsewhere a line per finished cell."""

    def __init__(self, console: Console, runs: list[CellRun], results: dict) -> None:
        self.console, self.runs, self.results = console, runs, results
        self.live = Live(console=console, auto_refresh=False, transient=False) if console.is_terminal \
            else None
        self._said: set = set()

    def __enter__(self) -> _LiveView:
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
            self.live.update(Group(self.table()), refresh=True)
            return
        for run in self.runs:  # plain output: one line per cell as it ends
            result = self.results[run.planned.cell]
            if result.status in ("done", "diverged", "failed") and run.planned.cell not in self._said:
                self._said.add(run.planned.cell)
                self.console.print(_line(result), soft_wrap=True, highlight=False)

    def table(self) -> Table:
        table = Table(title="date sweep", title_justify="left")
        for col in ("cell", "status", "step", "metric", "loss", "train s"):
            table.add_column(col, justify="left" if col in ("cell", "status") else "right")
        for run in self.runs:
            r = self.results[run.planned.cell]
            metric = r.metric if r.metric is not None else (r.evals[-1][2] if r.evals else None)
            table.add_row(
                run.planned.cell.name, _status(r.status),
                f"{r.steps}/{r.total_steps or run.planned.plan.total_iterations}",
                "" if metric is None else f"{metric:.4g}",
                f"{r.losses[-1][1]:.4g}" if r.losses else "",
                "" if r.train_s is None else f"{r.train_s:.0f}")
        return table


def _status(status: str) -> str:
    return {"done": "[green]done[/]", "running": "[cyan]running[/]", "diverged": "[red]diverged[/]",
            "failed": "[red]failed[/]", "partial": "[yellow]partial[/]"}.get(status, status)


def _line(r: CellResult) -> str:
    metric = "—" if r.metric is None else f"{r.metric:.4g}"
    seconds = "" if r.train_s is None else f", {r.train_s:.0f} s"
    return f"{r.cell.name}: {r.status}, metric {metric}, {r.steps} steps{seconds}"
