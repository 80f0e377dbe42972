"""Checkpoints: written atomically, found again after any kind of stop, refused if they belong to
another plan.

A checkpoint is one file ``checkpoints/step-00000123.pt`` written by rank 0: model, optimizer
(DATE's state included), the step, the samples each process has read, every process's RNG states and
unlogged losses, the plan, and a fingerprint of the spec. It is first written to a temporary file in
the same folder and then renamed, so a crash mid-write leaves the previous checkpoint intact.
Loading uses ``torch.load(weights_only=True)``: a checkpoint holds tensors and plain values only.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Any

import torch

from date_engine.errors import DateError
from date_engine.runfolder import RunFolder

__all__ = [
    "FORMAT",
    "CheckpointPolicy",
    "capture_rng",
    "describe_mismatch",
    "newest_valid",
    "refuse",
    "restore_rng",
    "save_atomic",
]

FORMAT = 1
REQUIRED = ("format", "step", "model", "optimizer", "plan", "spec_fingerprint", "ranks")


def save_atomic(run: RunFolder, step: int, payload: dict[str, Any], keep: int) -> Path:
    """Write ``payload`` as the checkpoint of ``step``; keep only the ``keep`` newest."""
    final = run.checkpoint_path(step)
    folder = final.parent
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{final.name}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save(payload, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, final)
    _fsync_dir(folder)
    for old in run.checkpoints()[keep:]:
        old.unlink(missing_ok=True)
    return final


def newest_valid(run: RunFolder) -> tuple[Path, dict[str, Any]] | None:
    """The newest checkpoint that loads and has every required entry, or None if there is none."""
    for path in run.checkpoints():
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
        except Exception:  # a damaged file: fall back to the one before it
            continue
        if (
            isinstance(payload, dict)
            and all(k in payload for k in REQUIRED)
            and payload["format"] == FORMAT
        ):
            return path, payload
    return None


def capture_rng(numpy: bool = True) -> dict[str, Any]:
    """This process's random states: torch (CPU and CUDA), Python, and numpy's when it is loaded
    (unless ``numpy=False``: the trainer itself draws nothing from numpy, and reading its state
    costs most of this function's time)."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    np = _numpy() if numpy else None
    if np is not None:
        name, keys, pos, has_gauss, gauss = np.random.get_state()
        state["numpy"] = [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss]
    return state


def restore_rng(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    np = _numpy()
    if np is not None and "numpy" in state:
        name, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))


def describe_mismatch(
    saved_plan: dict[str, Any], plan: dict[str, Any], saved_fp: str, fp: str
) -> str | None:
    """Why a checkpoint cannot continue this run, or None if it can."""
    if saved_fp != fp:
        return "it was written for another spec (a baseline, date or training setting differs)"
    keys = ("target_batch", "world_size", "micro_batch", "accumulation_steps")
    if any(saved_plan.get(k) != plan.get(k) for k in keys):
        return (
            f"it was written for batch {saved_plan.get('target_batch')} = "
            f"{saved_plan.get('micro_batch')} × {saved_plan.get('world_size')} processes × "
            f"{saved_plan.get('accumulation_steps')}, not batch {plan['target_batch']} = "
            f"{plan['micro_batch']} × {plan['world_size']} × {plan['accumulation_steps']}"
        )
    if saved_plan != plan:
        return "its plan differs from this run's"
    return None


def refuse(path: Path, reason: str) -> DateError:
    return DateError(
        f"{path}: cannot resume from this checkpoint: {reason}. Resume with the settings it was "
        "written for, choose another --output-dir, or pass --force-replan to continue its weights "
        "under the new plan."
    )


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _numpy():
    import sys

    return sys.modules.get("numpy")


class CheckpointPolicy:
    """When to write a checkpoint besides the end and a stop: every ``every_steps`` optimizer
    steps, or (without it) once ``minutes`` have passed since the last one by rank 0's clock."""

    def __init__(self, every_steps: int | None, minutes: float) -> None:
        self.every_steps, self.seconds = every_steps, minutes * 60
        self._last = time.monotonic()

    def time_due(self, is_main: bool) -> bool:
        """This process's vote for saving by time (only rank 0's clock counts)."""
        return (
            self.every_steps is None and is_main and time.monotonic() - self._last >= self.seconds
        )

    def due(self, step: int, agreed_time_due: bool) -> bool:
        return agreed_time_due or bool(self.every_steps and step % self.every_steps == 0)

    def saved(self) -> None:
        self._last = time.monotonic()
