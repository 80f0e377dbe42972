"""A batch that grows with the measured gradient noise scale (``date.budget: ramp``).

The global batch climbs a ladder of rungs B/2^j (the target B halved while the result is a whole
multiple of the processes and not below the baseline's B0). Training moves up to the next rung
once the noise scale the probe measured reaches it — a batch no larger than B_noise is one that
costs at most twice the fewest samples of that stretch of training (McCandlish et al. 2018, the
model of :mod:`date_engine.forecast`) — and stays at B once there.

The noise curve B_noise(e) is a function of the baseline's progress e (its epochs). A stretch de
of that progress costs a run at batch b de·(B_noise(e) + b)/(B_noise(e) + B0) epochs; so the
ramp's own epochs are::

    ε(e) = ∫₀^e (B_noise(x) + b(x)) / (B_noise(x) + B0) dx,       b(x) the rung at progress x

and it trains ε(E0) epochs in all. Rung j starts at ε(e_j), rounded to whole optimizer steps of
the rung before it (so every stage is a whole number of steps and samples). Plain Python:
``date plan`` imports no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from date_engine.forecast import NoiseCurve, mean_cost

__all__ = ["Rung", "ladder", "ramp"]


@dataclass(frozen=True)
class Rung:
    """One stretch of a ramp at one global batch, in whole optimizer steps (the plan's
    :class:`~date_engine.plan.BatchStage` adds the values derived at its batch)."""

    batch: int
    first_step: int
    """1-based optimizer step the rung starts at."""
    steps: int
    samples_before: int
    """Samples the run has trained on before the rung's first step."""
    noise_at_start: float
    """B_noise (the probe's curve) at the baseline progress where the rung starts."""

    @property
    def last_step(self) -> int:
        return self.first_step + self.steps - 1

    @property
    def samples_after(self) -> int:
        return self.samples_before + self.steps * self.batch


def ladder(target: int, baseline: int, multiple_of: int = 1) -> list[int]:
    """The rungs from the smallest to ``target``: target/2^j while whole, a multiple of
    ``multiple_of`` and at least ``baseline``."""
    rungs = [target]
    while rungs[-1] % 2 == 0 and (half := rungs[-1] // 2) >= baseline and half % multiple_of == 0:
        rungs.append(half)
    return rungs[::-1]


def ramp(curve: NoiseCurve, target: int, baseline: int, baseline_epochs: float,
         dataset_size: int, multiple_of: int = 1) -> tuple[Rung, ...]:
    """The ramp to ``target`` for a baseline of ``baseline_epochs`` epochs at batch ``baseline``
    on ``dataset_size`` samples per epoch; a rung the noise never reaches within the baseline's
    progress is left out (the ramp then ends below the target)."""
    rungs = ladder(target, baseline, multiple_of)
    # the progress e_j at which each rung becomes useful: B_noise(e_j) = rung (B_noise rises)
    starts = [0.0] + [_progress_at(curve, b) for b in rungs[1:]]
    kept = [(b, e) for b, e in zip(rungs, starts) if e < baseline_epochs]
    # a rung the next one starts with (the noise already past both) is skipped
    kept = [(b, e) for i, (b, e) in enumerate(kept) if i + 1 == len(kept) or kept[i + 1][1] > e]
    # epochs trained by the end of each rung's stretch of progress
    ends = [e for _, e in kept[1:]] + [baseline_epochs]
    epochs, done = [], 0.0
    for (b, e), end in zip(kept, ends):
        done += mean_cost(curve, b, baseline, e, end) * (end - e)
        epochs.append(done)
    stages, samples, step = [], 0, 1
    for (b, e), end_epochs in zip(kept, epochs):
        count = max(1, math.ceil((end_epochs * dataset_size - samples) / b))
        stages.append(Rung(b, step, count, samples, curve(e) if e > 0 else 0.0))
        samples, step = samples + count * b, step + count
    return tuple(stages)


def _progress_at(curve: NoiseCurve, noise: float) -> float:
    """e with a·e^β = noise (β > 0: the noise scale grows); infinity if it never does."""
    if curve.beta <= 0:
        return math.inf if noise > curve.a else 0.0
    return (noise / curve.a) ** (1.0 / curve.beta)
