"""What a run does with a step gone bad: stop on a non-finite one, or — the spike guard of
``date scale`` (``train.spike_guard``, on by default) — roll back. A step that spikes
(:mod:`date_engine.spikes`) sends the run back to its newest checkpoint, which predates the
spike (no checkpoint is written while the loss stands above its margin), to train on from there
with the LR multiplied by ``train.spike_lr_factor``; at most ROLLBACKS times, after which the
next spike stops the run with its checkpoints intact; a finite spike before the run's first
checkpoint is said and trained through. Each rollback is a record in
metrics.jsonl, summary.json and the run's report; the guard's state (its watch, the LR's factor
and the rollbacks so far) rides in every checkpoint, so a resumed run goes on as the
uninterrupted one would."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from date_engine.spikes import ROLLBACKS, SpikeWatch
from date_engine.train import checkpoint as ckpt
from date_engine.train import resume
from date_engine.view.console import note_line

__all__ = ["SpikeGuard", "after_verdict", "guard_for", "roll_back", "spiking_message",
           "stop_nonfinite"]


@dataclass
class SpikeGuard:
    factor: float
    """What each rollback multiplies the LR by."""
    watch: SpikeWatch = field(default_factory=SpikeWatch)
    lr_scale: float = 1.0
    """The product of the factors of the rollbacks so far: the schedule is multiplied by it."""
    rollbacks: list[dict[str, Any]] = field(default_factory=list)

    def reading(self, loss: float | None, grad_norm: float | None, nonfinite: bool) -> str | None:
        """Why this step spikes, or None."""
        if nonfinite:
            return "the loss or gradients turned non-finite"
        return self.watch.observe(loss, grad_norm or None)

    @property
    def suspicious(self) -> bool:
        """The loss stands above its margin: no checkpoint of this state."""
        return self.watch.above > 0

    @property
    def exhausted(self) -> bool:
        return len(self.rollbacks) >= ROLLBACKS

    def rolled_back(self, step: int, back_to: int, why: str) -> dict[str, Any]:
        """Record a rollback from ``step`` to ``back_to`` and lower the LR; returns the record."""
        self.lr_scale *= self.factor
        record = {"at_step": step, "back_to": back_to, "why": why, "lr_scale": self.lr_scale}
        self.rollbacks.append(record)
        return record

    def state_dict(self) -> dict[str, Any]:
        return {"watch": self.watch.state_dict(), "lr_scale": self.lr_scale,
                "rollbacks": list(self.rollbacks)}

    def load_state_dict(self, state: dict[str, Any], keep_rollbacks: bool = False) -> None:
        """The checkpoint's guard; ``keep_rollbacks``: a rollback within this run keeps the
        ones it has made (and the LR they lowered), the checkpoint's watch aside."""
        self.watch = SpikeWatch()
        self.watch.load_state_dict(state["watch"])
        if not keep_rollbacks:
            self.lr_scale = float(state["lr_scale"])
            self.rollbacks = list(state["rollbacks"])


def guard_for(train: Any, dry_run: bool, found: Any, mismatch: str | None) -> SpikeGuard | None:
    """The run's guard (None when ``train.spike_guard`` is off, or for a dry run); a run resumed
    from a checkpoint of its own plan watches on as it was."""
    if not train.spike_guard or dry_run:
        return None
    guard = SpikeGuard(train.spike_lr_factor)
    if found is not None and not mismatch and found.payload.get("guard"):
        guard.load_state_dict(found.payload["guard"])
    return guard


def roll_back(guard: SpikeGuard, folder: Any, step: int, why: str, steps: Any, noise: Any,
              run: Any, seed: int, rt: Any, console: Any, log: Any, mismatch: Any) -> int | None:
    """Back to the newest checkpoint of this run (its state, random streams and data position),
    the LR lowered from then on; the spiked steps' records give way to one record of the
    rollback. Returns the checkpoint's step (None: nothing of this run's plan to go back to).
    The caller reopens its data at that step."""
    found = ckpt.newest_valid(folder)
    if found is None or found.payload["step"] >= step or mismatch(found):
        return None
    back = found.payload["step"]
    steps.optimizer.zero_grad(set_to_none=True)  # the spiked step's gradients, never taken
    point = resume.restore(found, steps.model, steps.optimizer, steps.scaler, noise, run, None,
                           seed, rt.rank, console)
    if found.payload.get("guard"):
        guard.load_state_dict(found.payload["guard"], keep_rollbacks=True)
    record = guard.rolled_back(step, back, why)
    resume.continue_pairs(point, steps, noise, found)
    log.rewind(point, record)
    if rt.is_main:
        console.print(note_line(
            f"step {step}: {why}; rolled back to step {back} (its checkpoint), the LR "
            f"×{guard.lr_scale:g} from here (rollback {len(guard.rollbacks)} of {ROLLBACKS}; "
            "train.spike_guard)."), soft_wrap=True)
    return back


def spiking_message(guard: SpikeGuard, step: int, why: str, newest: Any) -> str:
    """The one sentence a run stopped by a spike ends with (its rollbacks spent); ``newest``:
    its newest valid checkpoint, if any."""
    kept = "; its checkpoints are intact" if newest else ""
    return (f"the loss spiked at step {step} ({why}) after {len(guard.rollbacks)} rollbacks, "
            f"each lowering the LR ×{guard.factor:g}{kept}. Lower the LR or the batch (date "
            "probe --batch B measures which hold), or set train.spike_guard=false.")


def after_verdict(trainer: Any, step: int, loss: Any, verdict: Any, steps: Any, data: Any,
                  log: Any) -> int | str | None:
    """Before step ``step``'s update, with the processes' verdict on it: the step a spike rolled
    the run back to (its data reopened there), why the run stops (a non-finite step; a spike
    with the rollbacks spent or none possible: its checkpoints as they are), or None: go on."""
    t, watch = trainer, trainer.guard
    spike = watch and watch.reading(verdict.loss, verdict.grad_norm, verdict.nonfinite)
    if spike and not watch.exhausted and (back := roll_back(
            watch, t.folder, step, spike, steps, t.noise, t.run, t.seed, t.rt, t.console, log,
            t._mismatch)) is not None:
        del t.batches
        t.batches = iter(t._loader(data, back))
        t.done = t.saved = back
        return back
    if verdict.state_nonfinite or verdict.nonfinite:
        return stop_nonfinite(t, step, loss, verdict, steps, log)
    if spike and watch.exhausted:
        return t._fail(spiking_message(watch, step, spike, ckpt.newest_valid(t.folder)), step)
    if spike:  # finite, with no checkpoint of this run to go back to: said, trained through
        watch.watch.rebase()
        if t.rt.is_main:
            t.console.print(note_line(f"step {step}: {spike}; no checkpoint of this run to roll "
                                      "back to yet, so it trains on (train.spike_guard)."),
                            soft_wrap=True)
    return None


def stop_nonfinite(trainer: Any, step: int, loss: Any, verdict: Any, steps: Any,
                   log: Any) -> str:
    """A non-finite loss or gradients at ``step`` (kept: the work since the last checkpoint, if
    its state is finite), or a non-finite state after step - 1 (nothing to keep)."""
    t = trainer
    if verdict.state_nonfinite:
        return t._nonfinite(step - 1, None)
    if t.done > t.saved:
        with contextlib.suppress(ckpt.NonFiniteState):
            t._save(t.done, steps, log, rng=t.rng_before)
    return t._nonfinite(step, loss)
