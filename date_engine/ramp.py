"""A batch that grows with the measured gradient noise scale (``date.budget: ramp``).

The global batch climbs a ladder of rungs B/2^j (the target B halved while the result is a whole
multiple of the processes and not below the baseline's B0). Training moves up to rung B_j once
the noise scale reaches B_j/ρ (``date.ramp_reach``) and stays at B once there. A batch b costs a
stretch of training (1 + b/B_noise) times its fewest samples and (1 + B_noise/b) times its fewest
steps (McCandlish et al. 2018, the model of :mod:`date_engine.forecast`): ρ = 1 keeps every
stretch within 2× its fewest samples, ρ = 2 within 3× for at most 1.5× its fewest steps.

The noise curve B_noise(e) is a function of the baseline's progress e (its epochs). A stretch de
of that progress costs a run at batch b de·(B_noise(e) + b)/(B_noise(e) + B0) epochs; so the
planned ramp's own epochs are::

    ε(e) = ∫₀^e (B_noise(x) + b(x)) / (B_noise(x) + B0) dx,       b(x) the rung at progress x

and it trains ε(E0) epochs in all. Rung j starts at ε(e_j), rounded to whole optimizer steps of
the rung before it (so every stage is a whole number of steps and samples).

A probe's curve is fitted to the first part of training and extrapolated; where it undershoots the
noise scale of the full run, the planned rungs come late. ``date.ramp: measured`` (the default)
lets the run decide: after each step the trainer reads the noise scale it measures itself and,
once it has passed a higher rung, moves there (:func:`climb`); the planned start of a rung is the
latest it begins. It moves once the noise scale has been measurable (|G|² three standard errors
above 0) and has risen to twice its lowest measurable value
(:attr:`date_engine.noise.NoiseScale.trusted`): on an initial plateau the ratio reads large at
random, and moves on it put the largest batches at the very start (docs/noise.md). The plan
of such a run is :func:`follow` of the planned rungs and the changes measured so far: the same
samples in all (the LR's shape is a function of samples), fewer steps with every early change.
Plain Python: ``date plan`` imports no torch.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from date_engine.forecast import CriticalCurve, NoiseCurve, mean_cost

__all__ = ["Change", "Follower", "Rung", "climb", "follow", "ladder", "move", "ramp", "run_samples"]


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
    """B_noise at the rung's start: the probe's curve at that baseline progress, or the noise
    scale the run measured when it moved up (``measured``)."""
    measured: bool = False
    """True: the run moved here when its measured noise scale passed the rung (``date.ramp:
    measured``); False: where the plan put it."""

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


def ramp(curve: NoiseCurve | CriticalCurve, target: int, baseline: int, baseline_epochs: float,
         dataset_size: int, multiple_of: int = 1, reach: float = 1.0) -> tuple[Rung, ...]:
    """The ramp to ``target`` for a baseline of ``baseline_epochs`` epochs at batch ``baseline``
    on ``dataset_size`` samples per epoch, each rung from where the noise scale reaches rung /
    ``reach``; a rung the noise never reaches within the baseline's progress is left out (the
    ramp then ends below the target)."""
    rungs = ladder(target, baseline, multiple_of)
    # the progress e_j at which each rung becomes useful: B_noise(e_j) = rung/ρ (B_noise rises)
    kept = [(b, e) for b, e in _starts(curve, rungs, reach) if e < baseline_epochs]
    # a rung the next one starts with (the noise already past both) is skipped
    kept = [(b, e) for i, (b, e) in enumerate(kept) if i + 1 == len(kept) or kept[i + 1][1] > e]
    # epochs trained by the end of each rung's stretch of progress
    epochs = list(itertools.accumulate(_stretches(curve, kept, baseline, baseline_epochs)))
    stages, samples, step = [], 0, 1
    for (b, e), end_epochs in zip(kept, epochs):
        count = max(1, math.ceil((end_epochs * dataset_size - samples) / b))
        stages.append(Rung(b, step, count, samples, curve(e) if e > 0 else 0.0))
        samples, step = samples + count * b, step + count
    return tuple(stages)


@dataclass(frozen=True)
class Change:
    """A move up the ladder a run decided on: from optimizer step ``step`` on, batch ``batch``,
    the measured noise scale having reached ``noise``."""

    step: int
    batch: int
    noise: float


def follow(planned: tuple[Rung, ...], changes: tuple[Change, ...], total_samples: int
           ) -> tuple[Rung, ...]:
    """The ramp of a run that moved up at ``changes`` (in order) besides where ``planned`` puts
    its rungs: a rung starts at the first step whose samples reach its planned start, unless a
    change came first (at the same step, the change's larger batch wins); the last rung trains
    until ``total_samples`` are reached. Raises ValueError for changes no run could have made
    (not upward, or not after a step of the rung before them)."""
    stages: list[Rung] = []
    batch, first, samples, noise, measured = planned[0].batch, 1, 0, 0.0, False
    pending = list(changes)
    while True:
        above = next((r for r in planned if r.batch > batch), None)
        due = (first + max(1, math.ceil((above.samples_before - samples) / batch))
               if above is not None else None)
        if pending and (due is None or pending[0].step <= due):
            change = pending.pop(0)
            if change.batch <= batch or change.step <= first:
                raise ValueError(f"a change to batch {change.batch} at step {change.step} cannot "
                                 f"follow batch {batch} from step {first}")
            end, after = change.step, (change.batch, change.noise, True)
        elif due is not None:
            end, after = due, (above.batch, above.noise_at_start, False)
        else:
            break
        steps = end - first
        stages.append(Rung(batch, first, steps, samples, noise, measured))
        first, samples = end, samples + steps * batch
        batch, noise, measured = after
    steps = max(1, math.ceil((total_samples - samples) / batch))
    stages.append(Rung(batch, first, steps, samples, noise, measured))
    return tuple(stages)


def climb(rungs: list[int], batch: int, noise: float | None, reach: float = 1.0) -> int | None:
    """The rung a run at ``batch`` moves to once its measured noise scale is ``noise``: the
    largest rung above ``batch`` that ``reach`` times the noise has reached; None to stay."""
    if noise is None or not math.isfinite(noise):
        return None
    reached = [r for r in rungs if batch < r <= reach * noise]
    return reached[-1] if reached else None


def move(stages: tuple[Rung, ...], rungs: list[int], step: int, noise: float | None,
         reach: float = 1.0) -> Change | None:
    """The move a measured ramp makes after optimizer step ``step`` of its ``stages`` (the plan
    so far) with the measured noise scale ``noise``: up to the largest rung of ``rungs`` it has
    reached (:func:`climb`), from step + 1 on; None to stay, at the last step, or where the
    plan's next stage already starts at step + 1 with a batch as large."""
    if step >= stages[-1].last_step:
        return None
    current = next(s for s in stages if step <= s.last_step)
    rung = climb(rungs, current.batch, noise, reach)
    following = next(s for s in stages if step + 1 <= s.last_step)
    if rung is None or (following.first_step == step + 1 and following.batch >= rung):
        return None
    return Change(step + 1, rung, noise)


class Follower:
    """A measured ramp's decision after each step (``date.ramp: measured``): the move up to the
    largest rung of the ladder the run's noise scale has passed, from the next step on, or None
    to stay (or where the plan moves there anyway). It moves only once the noise scale has been
    measurable and risen from its lowest (``noise.trusted``). Every process decides alike: the
    noise scale comes from the step's all-reduce. The ladder is the one ``derive_plan`` built:
    rungs of the target batch halved, multiples of the processes. Where the probe's branches
    measured the critical batch (``plan.critical_curve``), the planned ramp follows it and the run
    moves on its own only past the last checkpoint they branched from (never above what they
    measured)."""

    def __init__(self, noise, plan, world_size: int) -> None:
        self.noise = noise
        self.rungs = ladder(plan.target_batch, plan.baseline_batch, world_size)
        critical = plan.critical_curve
        self.measured_until = 0.0 if critical is None else run_samples(
            critical, plan.ramp, plan.baseline_batch, plan.ramp_reach, critical.last,
            plan.dataset_size)
        """Samples the planned ramp has trained when the baseline reaches the last checkpoint
        the probe branched from (0 without branches): before them it follows the branches."""

    def after(self, step: int, stages, reach: float) -> Change | None:
        """The move after optimizer step ``step`` of a ramp planned as ``stages``."""
        current = next((s for s in stages if step <= s.last_step), stages[-1])
        samples = current.samples_before + (step - current.first_step + 1) * current.batch
        if not self.noise.trusted or samples < self.measured_until:
            return None
        return move(stages, self.rungs, step, self.noise.scale, reach)


def run_samples(curve: NoiseCurve | CriticalCurve, stages: tuple[Rung, ...], baseline: int,
                reach: float, progress: float, samples_per_epoch: int) -> float:
    """The samples the ramp :func:`ramp` planned as ``stages`` on ``curve`` has trained by the
    time it has made the baseline's ``progress`` (epochs): ε(progress) · n."""
    kept = _starts(curve, [st.batch for st in stages], reach)
    return sum(_stretches(curve, kept, baseline, progress)) * samples_per_epoch


def _starts(curve: NoiseCurve | CriticalCurve, rungs: list[int], reach: float
            ) -> list[tuple[int, float]]:
    """Each rung with the baseline's progress e_j at which it becomes useful: the curve reaches
    rung / ρ there (the first rung from the start)."""
    return [(b, 0.0 if j == 0 else curve.progress_at(b / reach)) for j, b in enumerate(rungs)]


def _stretches(curve: NoiseCurve | CriticalCurve, kept: list[tuple[int, float]], baseline: int,
               until: float) -> list[float]:
    """The epochs a ramp trains over each rung's stretch of the baseline's progress (a rung's
    start to the next one's), up to progress ``until``: the stretch's width times its mean cost
    (B_noise(e) + b) / (B_noise(e) + B0)."""
    ends = [e for _, e in kept[1:]] + [until]
    out = []
    for (b, start), end in zip(kept, ends):
        upto = min(end, until)
        if upto <= start:
            break
        out.append(mean_cost(curve, b, baseline, start, upto) * (upto - start))
    return out
