"""Where a run starts: fresh, or from the newest valid checkpoint of its folder.

The refusals come before anything is written: a new run into a folder that holds checkpoints,
``--resume`` without one, a checkpoint of another plan (unless ``--force-replan``). A resumed run
whose checkpoint is its last step has nothing to train (its lost summary.json is written again).
Each process's own random stream is seeded here: fresh, from the checkpoint, or — under another
plan — at the step of the new plan its samples reach.
"""

from __future__ import annotations

import os
import random
import sys
from dataclasses import dataclass, replace
from typing import Any

import torch
from rich.console import Console

from date_engine.errors import DateError
from date_engine.ramp import Change
from date_engine.recipes import Recipe
from date_engine.runfolder import RunFolder, RunSummary
from date_engine.runplan import RunPlan
from date_engine.train import checkpoint as ckpt
from date_engine.train import shards
from date_engine.train.runtime import raise_everywhere
from date_engine.view.console import note_line

__all__ = ["ResumePoint", "already_finished", "earlier_failure", "find", "process_seed",
           "restore", "saved_changes", "seed_everything"]


@dataclass(frozen=True)
class ResumePoint:
    """Where training starts: the step, and what the checkpoint carried besides the weights."""

    step: int = 0
    resumed: bool = False
    window: tuple[float, int] = (0.0, 0)
    """The (loss sum, steps) this process had not logged yet."""
    train_seconds: float = 0.0


def process_seed(seed: int, rank: int, step: int = 0) -> int:
    """The seed of one process's own random stream (dropout, augmentation, loader workers).

    ``seed`` itself seeds the initial weights, the same on every process; each process then
    draws from ``seed + 1 + rank``. A run continued under another plan (``--force-replan``) at
    step s adds 7919·s (a prime stride, so no two (rank, step) pairs of a job share a seed).
    """
    return seed + 1 + rank + 7919 * step


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed % 2**32)


def earlier_failure(folder: RunFolder) -> dict[str, Any] | None:
    """After a restart by torchrun: the record of a deterministic failure (a non-finite loss)
    of this job, which would recur."""
    record = folder.read_failure()
    if not record or record.get("run_id") != os.environ.get("TORCHELASTIC_RUN_ID"):
        return None
    return record


def find(folder: RunFolder, wanted: bool, asked: bool, console: Console,
         is_main: bool) -> ckpt.Found | None:
    """The newest valid checkpoint to continue from, or None for a fresh start. ``wanted``: the
    run continues one (``--resume``, or a restart by torchrun); ``asked``: the user said
    ``--resume`` (a restart finding none starts afresh)."""
    found = ckpt.newest_valid(folder)
    if found is not None and found.skipped and is_main:
        for line in found.skipped:
            console.print(f"[yellow]warning:[/] skipped {line}", soft_wrap=True)
    if not wanted:
        if found is not None:
            raise DateError(
                f"{folder.root} already holds checkpoints ({found.path.name}); pass "
                "--resume to continue that run, or --output-dir to start a new one.")
        return None
    if found is None and asked:
        raise DateError(f"--resume: no checkpoint in {folder.checkpoint_dir}; run without "
                        "--resume to start from the beginning.")
    return found


def saved_changes(saved_plan: dict[str, Any]) -> tuple[Change, ...]:
    """The moves up a measured ramp the run that wrote ``saved_plan`` had made (none if it is not
    a plan this version reads)."""
    try:
        return RunPlan.from_dict(saved_plan).plan.ramp_changes
    except (KeyError, TypeError, ValueError):
        return ()


def already_finished(found: ckpt.Found, run: RunPlan, folder: RunFolder, recipe: Recipe,
                     console: Console, is_main: bool) -> bool:
    """A resumed run whose checkpoint is its plan's last step: nothing to train. Its
    summary.json is written again if it was lost, from the final evaluation in metrics.jsonl;
    without that evaluation the run goes on to evaluate (False)."""
    last = run.plan.total_iterations
    if found.payload["step"] < last:
        return False
    summary = folder.read_summary()
    if summary is not None and summary.finished:
        console.print(f"{folder.root} already finished: {found.path.name} is step "
                      f"{found.payload['step']} of {last}; nothing to do.", soft_wrap=True)
        return True
    evals = [r["eval"] for r in folder.read_metrics() if "eval" in r and r.get("step") == last]
    if not evals:
        console.print(note_line(
            f"{folder.root} trained to its last step ({found.path.name}) but holds no final "
            "evaluation; evaluating that checkpoint."), soft_wrap=True)
        return False
    if is_main:
        seconds = float(found.payload.get("train_seconds", 0.0))
        samples = run.samples_through(last)
        folder.write_summary(RunSummary(
            recipe.name, last, last, None, recipe.metric_name,
            evals[-1].get(recipe.metric_name), seconds,
            samples / seconds if seconds > 0 else 0.0, str(found.path), run.to_dict()))
    console.print(f"{folder.root} already finished: {found.path.name} is step {last} of "
                  f"{last}; its summary.json was missing and is written again from that "
                  "checkpoint and the final evaluation in metrics.jsonl (its wall time is the "
                  "training time).", soft_wrap=True)
    return True


def restore(found: ckpt.Found | None, model, optimizer, scaler, noise, run: RunPlan,
            mismatch: str | None, seed: int, rank: int, console: Console) -> ResumePoint:
    """Load ``found`` into the model, optimizer, loss scaler and noise scale; seed this
    process's own random stream (the checkpoint's, or a fresh one). ``mismatch``: why the
    checkpoint is another plan's (``--force-replan``): its weights go on at the step of
    ``run`` its samples reach."""
    if found is None:
        seed_everything(process_seed(seed, rank))  # dropout etc. differ per process
        return ResumePoint()
    payload = found.payload
    planned = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    if payload.get("sharded"):
        shards.load(found.path, payload, model, optimizer)
    else:
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
    if mismatch:  # the state goes on; the settings (LR, β2, ε, λ) are the new plan's, not the
        for group, settings in zip(optimizer.param_groups, planned):  # checkpoint's groups'
            group.pop("initial_lr", None)
            group.update(settings)
    if scaler is not None and payload.get("scaler"):
        scaler.load_state_dict(payload["scaler"])
    console.print(f"resuming from {found.path} (step {payload['step']})", soft_wrap=True)
    if mismatch:  # --force-replan: as many samples, the new plan
        start = run.steps_within(payload["samples_seen"])
        seed_everything(process_seed(seed, rank, start))
        console.print(note_line(f"--force-replan: {mismatch}; continuing its weights at step "
                                f"{start} of the new plan ({payload['samples_seen']} samples "
                                "seen)."), soft_wrap=True)
        return ResumePoint(start, resumed=True)
    if noise is not None and payload.get("noise"):
        noise.load_state_dict(payload["noise"])
    mine = payload["ranks"][rank]
    ckpt.restore_rng(mine["rng"])
    return ResumePoint(payload["step"], True, tuple(mine["log_window"]),
                       float(payload.get("train_seconds", 0.0)))


def take_lock(rt: Any, folder: RunFolder, command: str | None) -> Any:
    """One writer per run folder: rank 0 takes its lock for the whole run (returned; None on the
    other processes) and clears what killed checkpoint writes left; a refusal is raised on every
    process."""
    error, lock = None, None
    if rt.is_main:
        try:
            lock = folder.lock(command or "date scale")
            ckpt.remove_partial_writes(folder)
        except DateError as exc:
            error = str(exc)
    raise_everywhere(rt, error)
    return lock


def continue_pairs(point: ResumePoint, steps: Any, noise: Any, found: ckpt.Found | None) -> None:
    """A resumed run's pairs of steps go on from the gradient its checkpoint kept (``steps``, a
    :class:`~date_engine.train.step.StepRunner`); without one they start afresh."""
    if point.resumed and noise is not None and not steps.resume_pairs(
            found.payload.get("pair_gradient")):
        noise.drop_pair()


def kept_plan(found: ckpt.Found, run: RunPlan, spec: Any, console: Console | None
              ) -> RunPlan | None:
    """The plan ``found`` was written under, where it differs from ``run``'s only because an
    earlier version's rules derived it (the same spec and split): the run keeps it, and says so
    on ``console``. None otherwise."""
    saved = found.payload["plan"]
    if not ckpt.derived_by_older_rules(saved, run.to_dict(), found.payload["spec_fingerprint"],
                                       spec.fingerprint()):
        return None
    if console is not None:
        console.print(note_line("this run keeps the plan it started with, derived by an earlier "
                                "version's rules; --force-replan trains the rest under today's."),
                      soft_wrap=True)
    kept = RunPlan.from_dict(saved)  # an older plan lacks the spec's clipping: the spec has it
    return kept._replace(plan=replace(kept.plan, grad_clip=spec.train.grad_clip))
