"""What a loss spike is, in one place: the probe's branches (:mod:`date_engine.branches`) call a
branch unstable by it, and the spike guard of ``date scale`` rolls a run back on it.

A step spikes when its loss or gradient norm is not finite, or when, after the first
``settle`` steps and for ``PERSIST`` steps in a row, the loss's fast average (the last few steps)
stands above its slow average (the running level) by more than ``LOSS_MARGIN`` of the larger of
that level and the first loss watched, and ``DEVIATIONS`` times the loss's usual step-to-step
deviation, or the gradient norm's fast
average stands ``GRAD_FACTOR`` times above the larger of its running level and the first norm
watched. Both averages are exponential; the
deviation is the slow average of |loss − level|. One hard batch at a small batch size lifts the
fast average for a step or two (a batch of 32 on digits did, before ``PERSIST``); a run that
diverges (gpt-char at 64× went from 2.5 to 11.8 and stayed, docs/results-transformers.md) stays
above. The first loss sets the margin's scale: a run trained down to 0.008 whose hard batches
read 0.19 for a few steps has not spiked (a lenet-digits run of 10,000 steps did, against a
margin of its level alone). Plain Python, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["DEVIATIONS", "GRAD_FACTOR", "LOSS_MARGIN", "PERSIST", "ROLLBACKS", "SETTLE",
           "SpikeWatch"]

LOSS_MARGIN = 0.3
"""A spike's fast loss stands above the running level by at least this share of the larger of
that level and the first loss watched."""
DEVIATIONS = 6.0
"""... and this many usual deviations above it."""
GRAD_FACTOR = 20.0
"""A gradient norm whose fast average is this many times its running level spikes."""
ROLLBACKS = 3
"""The spike guard rolls a run back at most this many times; the next spike stops it."""
SETTLE = 20
"""Steps watched before any but a non-finite step is called a spike (the level forms)."""
PERSIST = 3
"""Steps in a row the fast average must stand above the margin."""
_FAST, _SLOW = 0.3, 0.05


@dataclass
class SpikeWatch:
    """Watches one run's steps; :meth:`observe` says why a step spikes (None when it does not).
    Its state is six numbers (:meth:`state_dict`), kept in a checkpoint so that a resumed run
    watches on as the uninterrupted one would."""

    settle: int = SETTLE
    seen: int = 0
    level: float = 0.0
    fast: float = 0.0
    deviation: float = 0.0
    grad_level: float = 0.0
    grad_fast: float = 0.0
    above: int = 0
    """Steps in a row above the margin so far."""
    first: float = 0.0
    """The first loss watched: the scale of the margin once the loss has fallen far."""
    grad_first: float = 0.0

    def observe(self, loss: float, grad_norm: float | None = None) -> str | None:
        if not math.isfinite(loss) or (grad_norm is not None and not math.isfinite(grad_norm)):
            return "a non-finite loss or gradient"
        if self.seen == 0:
            self.level = self.fast = self.first = loss
            self.grad_level = self.grad_fast = self.grad_first = grad_norm or 0.0
        self.seen += 1
        self.fast += _FAST * (loss - self.fast)
        if grad_norm is not None:
            self.grad_fast += _FAST * (grad_norm - self.grad_fast)
        why = None
        if self.seen > self.settle:
            excess = self.fast - self.level
            scale = max(abs(self.level), abs(self.first))
            if excess > max(LOSS_MARGIN * scale, DEVIATIONS * self.deviation):
                why = (f"the loss rose to {self.fast:.4g} against its running level "
                       f"{self.level:.4g}")
            elif grad_norm is not None and self.grad_level > 0 and \
                    self.grad_fast > GRAD_FACTOR * max(self.grad_level, self.grad_first):
                why = (f"the gradient norm rose to {self.grad_fast:.4g}, over {GRAD_FACTOR:g}× its "
                       f"running level {self.grad_level:.4g}")
        self.above = self.above + 1 if why else 0
        if why:  # above the margin: not the level it is measured against; a spike once it stays
            return why if self.above >= PERSIST else None
        self.deviation += _SLOW * (abs(loss - self.level) - self.deviation)
        self.level += _SLOW * (loss - self.level)
        if grad_norm is not None:
            self.grad_level += _SLOW * (grad_norm - self.grad_level)
        return None

    def rebase(self) -> None:
        """Take where the loss and gradient norm stand now as their level (a spike the run
        trains through)."""
        self.level, self.grad_level, self.above = self.fast, self.grad_fast, 0

    def state_dict(self) -> dict[str, float]:
        return {"seen": self.seen, "level": self.level, "fast": self.fast,
                "deviation": self.deviation, "grad_level": self.grad_level,
                "grad_fast": self.grad_fast, "above": self.above, "first": self.first,
                "grad_first": self.grad_first}

    def load_state_dict(self, state: dict[str, float]) -> None:
        for key, value in state.items():
            setattr(self, key, int(value) if key in ("seen", "above") else float(value))
