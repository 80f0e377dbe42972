"""The spike guard of ``date scale`` (``train.spike_guard``, on by default): a step that spikes
(:mod:`date_engine.spikes`) sends the run back to its newest checkpoint, which predates the
spike (no checkpoint is written while the loss stands above its margin), to train on from there
with the LR multiplied by ``train.spike_lr_factor``; at most ROLLBACKS times, after which the
next spike stops the run with its checkpoints intact. Each rollback is a record in
metrics.jsonl, summary.json and the run's report; the guard's state (its watch, the LR's factor
and the rollbacks so far) rides in every checkpoint, so a resumed run goes on as the
uninterrupted one would."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from date_engine.spikes import ROLLBACKS, SpikeWatch

__all__ = ["SpikeGuard"]


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
