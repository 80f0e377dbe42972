"""A run folder: the files one ``date scale`` run writes, their names and formats, in one place.

::

    <run>/spec.yaml         the spec as validated, overrides applied      written before training
    <run>/config.json       the command's options (RunConfig)             written before training
    <run>/plan.json         the plan and batch split the run trains with  written before training
    <run>/micro_batch.json  train.micro_batch: auto — the sizes tried and the one that fit
    <run>/metrics.jsonl     one record per logged step or evaluation
    <run>/tensorboard/      the same scalars, when tensorboard is installed
    <run>/checkpoints/step-XXXXXXXX.pt    (step-XXXXXXXX.dcp/, a folder of shards, under fsdp)
    <run>/summary.json      how the run ended
    <run>/curves.png        loss, metric, LR and DATE's ratio spread against steps (matplotlib)
    <run>/FAILED.json       why it stopped, after a non-finite loss
    <run>/LOCK              who writes the folder now (an flock: released when that process dies)

and, when ``date sweep`` started the run as one of its cells:

    <run>/cell.yaml         the cell's spec, as the sweep wrote it
    <run>/log.txt           everything the cell's ``date scale`` printed

The trainer writes and ``date sweep`` reads these only through this module. It imports no torch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import re
import socket
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from date_engine.errors import DateError
from date_engine.files import read_small_text, write_durably
from date_engine.noise import NoiseEstimate
from date_engine.runplan import RunPlan

__all__ = ["MetricsLog", "RunFolder", "RunLock", "RunSummary", "default_run_folder", "eval_record",
           "train_record"]

_CHECKPOINT = re.compile(r"^step-(\d{8})\.(?:pt|dcp)$")


@dataclass(frozen=True)
class RunSummary:
    """``summary.json``: how a run ended."""

    recipe: str
    steps: int
    total_steps: int
    stopped_by: str | None
    """None when the run finished; else what stopped it: 'max-steps', 'time-limit', 'SIGINT',
    'SIGTERM'."""
    metric_name: str
    metric: float | None
    wall_time_s: float
    """Seconds this attempt spent from its first step to its end: steps, checkpoints and
    evaluations; not the start-up (imports, data, model) before it or curves.png after it."""
    samples_per_s: float
    checkpoint: str | None
    plan: dict[str, Any]
    rollbacks: list[dict[str, Any]] = field(default_factory=list)
    """The spike guard's rollbacks over the run (``at_step``, ``back_to``, ``why``,
    ``lr_scale``); empty where it never fired."""

    @property
    def finished(self) -> bool:
        return self.stopped_by is None and self.steps == self.total_steps


def train_record(step: int, epoch: float, lr: float, loss: float, grad_norm: float | None,
                 samples_per_s: float, time_s: float, ratios: tuple[float, float, float] | None,
                 noise: NoiseEstimate | None = None,
                 batch: int | None = None) -> dict[str, Any]:
    """A line of metrics.jsonl after a logged optimizer step. ``time_s`` is the run's training
    time so far (evaluations left out, earlier attempts included); ``ratios`` the (min, median,
    max) of DATE's layer ratios at the step; ``noise`` the smoothed estimates of the gradient
    noise scale (docs/noise.md): |G|², tr(Σ), whose ratio is ``noise_scale`` (null while |G|² ≤
    0), the standard error of |G|², and where pairs are measured |G_pair|²; ``batch`` the step's
    global batch, recorded when it changes during the run (a batch ramp)."""
    record: dict[str, Any] = {"step": step, "epoch": round(epoch, 6), "lr": lr, "loss": loss,
                              "grad_norm": grad_norm, "samples_per_s": samples_per_s,
                              "time_s": round(time_s, 3)}
    if ratios is not None:
        record.update(zip(("ratio_min", "ratio_median", "ratio_max"), ratios))
    if noise is not None:
        record.update(grad_sq=noise.grad_sq, grad_trace=noise.trace, noise_scale=noise.scale)
        if noise.grad_sq_error is not None:
            record["grad_sq_error"] = noise.grad_sq_error
        if noise.pair_grad_sq is not None:
            record["grad_sq_pair"] = noise.pair_grad_sq
    if batch is not None:
        record["batch"] = batch
    return record


def eval_record(step: int, metrics: dict[str, float], time_s: float) -> dict[str, Any]:
    """A line of metrics.jsonl after an evaluation."""
    return {"step": step, "eval": metrics, "time_s": round(time_s, 3)}


class RunFolder:
    """The files of one run, under ``root``."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"RunFolder({str(self.root)!r})"

    # ------------------------------------------------------------------ paths

    @property
    def spec_path(self) -> Path:
        return self.root / "spec.yaml"

    @property
    def config_path(self) -> Path:
        return self.root / "config.json"

    @property
    def plan_path(self) -> Path:
        return self.root / "plan.json"

    @property
    def metrics_path(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def tensorboard_dir(self) -> Path:
        return self.root / "tensorboard"

    @property
    def summary_path(self) -> Path:
        return self.root / "summary.json"

    @property
    def curves_path(self) -> Path:
        return self.root / "curves.png"

    @property
    def failure_path(self) -> Path:
        return self.root / "FAILED.json"

    @property
    def micro_batch_path(self) -> Path:
        return self.root / "micro_batch.json"

    @property
    def checkpoint_dir(self) -> Path:
        return self.root / "checkpoints"

    @property
    def cell_spec_path(self) -> Path:
        return self.root / "cell.yaml"

    @property
    def log_path(self) -> Path:
        return self.root / "log.txt"

    @property
    def lock_path(self) -> Path:
        return self.root / "LOCK"

    def lock(self, command: str = "") -> RunLock:
        """Take the folder's exclusive lock, or raise :class:`DateError` naming its holder.

        The lock is an ``flock`` on ``LOCK``: the kernel releases it when the holder exits or is
        killed, so a lock left by a dead process never blocks (the file's words stay, stale).
        On file systems without ``flock`` across hosts (some NFS setups) it guards one host only.
        A folder the lock made goes again when it is released holding nothing but ``LOCK``.
        """
        made = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self.lock_holder() or "another process"
            os.close(fd)
            raise DateError(f"{self.root} is being written by {holder}; wait for that run to "
                            "end or stop it, or choose another --output-dir.") from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": time.strftime("%Y-%m-%d %H:%M:%S"),
                                 "command": command}).encode())
        return RunLock(fd, self if made else None)

    def lock_holder(self) -> str | None:
        """Who holds the lock now, in words; None when nobody does."""
        try:
            fd = os.open(self.lock_path, os.O_RDONLY)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                info = json.loads(os.pread(fd, 4096, 0) or b"{}")
            except ValueError:
                info = {}
            return (f"process {info.get('pid', '?')} on {info.get('host', '?')} (since "
                    f"{info.get('since', '?')}: {info.get('command') or 'date scale'})")
        finally:
            os.close(fd)
        return None

    def checkpoint_path(self, step: int, sharded: bool = False) -> Path:
        """The checkpoint of ``step``: a file, or a folder of shards (``train.parallel: fsdp``)."""
        return self.checkpoint_dir / f"step-{step:08d}.{'dcp' if sharded else 'pt'}"

    def checkpoints(self) -> list[Path]:
        """The checkpoints (files, and folders of shards), newest step first."""
        if not self.checkpoint_dir.is_dir():
            return []
        found = [(int(m.group(1)), p) for p in self.checkpoint_dir.iterdir()
                 if (m := _CHECKPOINT.match(p.name))]
        return [p for _, p in sorted(found, reverse=True)]

    # ------------------------------------------------------------------ the run's record

    def write_record(self, spec: dict[str, Any], config_json: str, run: RunPlan) -> None:
        """spec.yaml, config.json and plan.json: what the run was asked and what it trains with."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
        self.write_config(config_json)
        self.write_plan(run)

    def write_plan(self, run: RunPlan) -> None:
        """plan.json; rewritten whole (a measured ramp's at each move up), never half-written."""
        write_durably(self.plan_path, json.dumps(run.to_dict(), indent=2))

    def write_config(self, config_json: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(config_json)
        return self.config_path

    def read_threads(self) -> int | None:
        """The threads per process an earlier attempt of this run chose (config.json), or None."""
        data = _json(self.config_path)
        threads = data.get("threads") if isinstance(data, dict) else None
        return threads if isinstance(threads, int) and threads > 0 else None

    def read_plan(self) -> RunPlan | None:
        data = _json(self.plan_path)
        try:
            return RunPlan.from_dict(data) if data else None
        except (KeyError, TypeError):  # a plan.json of another version
            return None

    def write_micro_batch(self, chosen: int, tried: list[int], device: str) -> None:
        """micro_batch.json: what ``train.micro_batch: auto`` chose, from which sizes, on what."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.micro_batch_path.write_text(json.dumps(
            {"micro_batch": chosen, "tried": tried, "device": device}, indent=2))

    def read_micro_batch(self) -> int | None:
        """The micro-batch an earlier attempt of this run chose, or None."""
        data = _json(self.micro_batch_path)
        chosen = data.get("micro_batch") if isinstance(data, dict) else None
        return chosen if isinstance(chosen, int) and chosen > 0 else None

    def write_summary(self, summary: RunSummary) -> None:
        self.summary_path.write_text(json.dumps(asdict(summary), indent=2))

    def read_summary(self) -> RunSummary | None:
        """summary.json, or None when there is none (or one this version cannot read)."""
        data = _json(self.summary_path)
        names = {f.name for f in fields(RunSummary)}
        try:
            return RunSummary(**{k: v for k, v in data.items() if k in names})
        except (AttributeError, TypeError):
            return None

    def write_failure(self, message: str, exit_code: int, step: int, run_id: str | None) -> None:
        self.failure_path.write_text(json.dumps(
            {"message": message, "exit_code": exit_code, "step": step, "run_id": run_id}))

    def read_failure(self) -> dict[str, Any] | None:
        """What FAILED.json says (message, exit_code, step, run_id), or None."""
        return _json(self.failure_path)

    def read_metrics(self) -> list[dict[str, Any]]:
        """Every record of metrics.jsonl; a line cut short by a kill is skipped."""
        try:
            text = self.metrics_path.read_text()
        except OSError:
            return []
        records = []
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and "step" in record:
                records.append(record)
        return records


def folder_versions(base: Path) -> list[Path]:
    """``base``, ``base-2``, ``base-3``, ...: the folders a command that names none may use."""
    return [base] + [base.with_name(f"{base.name}-{i}") for i in range(2, 10_000)]


def run_folder_for(output_dir: Path | None, configured: str | None, default: str, resume: bool,
                   versioned: bool, dry_run: bool, auto: bool = False) -> tuple[Path, bool]:
    """Where ``date scale`` writes, and whether it resumes: ``output_dir`` (--output-dir), else
    ``configured`` (train.output_dir), else a new versioned ``default`` folder (the newest one with
    checkpoints when resuming; one fixed folder where ``versioned`` is off: under a launcher, every
    process must agree on it). With ``auto`` (--auto-resume) it resumes where the folder holds a
    checkpoint and starts otherwise, saying so on stderr: a job script that is requeued runs the
    same command again."""
    if auto and not dry_run:
        run_dir, _ = run_folder_for(output_dir, configured, default, True, versioned, dry_run)
        if RunFolder(run_dir).checkpoints():
            return run_dir, True
        run_dir, _ = run_folder_for(output_dir, configured, default, False, versioned, dry_run)
        print(f"--auto-resume: no checkpoint in {run_dir} yet; starting the run.", file=sys.stderr,
              flush=True)
        return run_dir, False
    return _folder(output_dir, configured, default, resume, versioned, dry_run), resume


def _folder(output_dir: Path | None, configured: str | None, default: str, resume: bool,
            versioned: bool, dry_run: bool) -> Path:
    from date_engine.checks import output_folder

    if output_dir is None and configured is None and versioned:
        run_dir = default_run_folder(Path(default), resume)
        option = "the default run folder (--output-dir)"
    else:
        run_dir = output_dir or Path(configured or default)
        option = "--output-dir" if output_dir else "train.output_dir" \
            if configured else "the default run folder (--output-dir)"
    if not dry_run:
        output_folder(run_dir, option)
    return run_dir


def continue_command(args: list[str] | None, run_dir: Path, output_dir: Path | None) -> str:
    """The command line that continues a run from ``args``, what was typed after ``date scale``
    (None: not typed, so nothing to repeat): without --resume and --max-steps, and naming the run
    folder when it was chosen by default (a new run would take the next one)."""
    import shlex

    if args is None:
        return ""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--max-steps":
            skip = True
        elif arg not in ("--resume", "--auto-resume") and not arg.startswith("--max-steps="):
            kept.append(shlex.quote(arg))
    if output_dir is None:
        kept += ["-o", shlex.quote(str(run_dir))]
    return " ".join(["date", "scale", *kept])


def default_run_folder(base: Path, resume: bool) -> Path:
    """The run folder a command gets when it names none: ``base`` if it holds no run yet, else
    the first free of ``base-2``, ``base-3``, ... (so that running a command again starts a new
    run, as Lightning's versions do); with ``resume``, the newest of them that holds checkpoints
    (``base`` itself when none does, so that --resume says there is nothing to resume)."""
    taken = []
    for folder in (versions := folder_versions(base)):
        run = RunFolder(folder)
        if not (run.plan_path.exists() or run.checkpoints()):
            break
        taken.append(run)
    if resume:
        with_checkpoints = [r.root for r in taken if r.checkpoints()]
        return with_checkpoints[-1] if with_checkpoints else base
    return versions[len(taken)]


class RunLock:
    """A held run-folder lock; ``release()`` (or process exit) lets the next writer in."""

    def __init__(self, fd: int, made: RunFolder | None = None) -> None:
        self._fd: int | None = fd
        self._made = made
        """The folder, when taking the lock made it."""

    def release(self) -> None:
        """Unlock; a folder the lock made and nothing else was written to (a refused --resume,
        say) goes."""
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None
        folder = self._made
        if folder is not None and {p.name for p in folder.root.iterdir()} <= {"LOCK"}:
            with contextlib.suppress(OSError):
                folder.lock_path.unlink(missing_ok=True)
                folder.root.rmdir()


class MetricsLog:
    """Appends records to a run's ``metrics.jsonl``, and the same scalars to TensorBoard event
    files when the ``tensorboard`` package is installed.

    On resume, records after the checkpoint's step (written by the interrupted run after it saved)
    are dropped, so the file reads as one uninterrupted run.
    """

    def __init__(self, folder: RunFolder, resume_step: int | None = None) -> None:
        self.path = folder.metrics_path
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._folder = folder
        if resume_step is None:
            self.path.write_text("")
        elif self.path.exists():
            self._keep_through(resume_step)
        self._file = open(self.path, "a")  # noqa: SIM115 - open for the run, closed by close()
        self._tb = _tensorboard(folder.tensorboard_dir)

    def rewind(self, step: int, record: dict[str, Any]) -> None:
        """Drop the records after ``step`` and append ``record`` (a spike guard's rollback; the
        TensorBoard scalars already written stay)."""
        self._file.close()
        self._keep_through(step, record)
        self._file = open(self.path, "a")  # noqa: SIM115 - open for the run, closed by close()

    def _keep_through(self, step: int, *after: dict[str, Any]) -> None:
        """Rewrite the file with its records up to ``step``, then ``after``."""
        kept = [r for r in self._folder.read_metrics() if r["step"] <= step] + list(after)
        self.path.write_text("".join(json.dumps(r) + "\n" for r in kept))

    @property
    def tensorboard(self) -> bool:
        """True when the scalars also go to TensorBoard."""
        return self._tb is not None

    def write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        if self._tb is not None:
            step = record["step"]
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self._tb.add_scalar(key, value, step)
            for key, value in (record.get("eval") or {}).items():
                self._tb.add_scalar(f"eval/{key}", value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def _tensorboard(folder: Path):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # tensorboard is optional
        return None
    return SummaryWriter(str(folder))


def _json(path: Path) -> Any:
    try:
        return json.loads(read_small_text(path, "run file", "it is not the run's"))
    except (DateError, ValueError):
        return None
