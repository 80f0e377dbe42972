"""Branch runs: the baseline's own checkpoints continued at larger batches, to measure at the
target batch what the plan would otherwise extrapolate to it (docs/branches.md).

From a checkpoint of the baseline at ``at_samples``, a branch trains the same number of samples
at batch b with the plan's own settings for b: its schedule from the step its samples reach (its
LR there, LEGW's warmup included; a branch that would outrun a short plan holds the LR it starts
at), its β2, ε, λ. The baseline's batch is branched twice, with
two data orders, and their difference is the spread a branch is read against:

* **tolerance** τ = max(|ℓ₁ − ℓ₂|, ``SPREAD_FLOOR``·mean ℓ) of the two baseline branches' losses
  ℓ (the mean training loss over each branch's second half of samples), and the same for the
  recipe's metric at the branch's end;
* a branch **keeps up** when it reaches, with the same samples, at least what the baseline
  branches reached with half of them: its loss at most their halfway loss + τ, and its metric
  (where the recipe has one) no worse than their halfway metric by more than its τ — the batch
  needs at most twice the baseline's samples, McCandlish et al.'s critical batch (B_crit, where
  E = 2·E_min; the same model the noise-scale forecast uses, docs/noise.md). Equal samples, the
  first reading, named only perfect scaling: on Fashion-MNIST every batch above 128 fell behind
  by more than the two data orders' 0.0001;
* a branch is **unstable** when its loss went non-finite, spiked on the way (:mod:`date_engine.
  spikes`), or ended more than τ above where it began (its first tenth's mean loss): it lost
  ground the checkpoint had; a branch that is only behind the baseline's is slow, not unstable;
* the **critical batch** at a checkpoint is the largest batch b of the ladder such that every
  branch at or below b keeps up.

At the target batch the probe also branches the settings the plan could take, each at the peak
LR held constant from the last checkpoint (where a spike would show) — the planned exponent and
the next lower ones (k^p, k^(p−¼), ... down to √k, or √k and k^¼ where the plan
takes √k), each, for an adaptive optimizer, with the second-moment decay as the rule scales it
and as the baseline had it — and :func:`choose_settings` takes the stable one with the lowest
loss. Plain Python: the plan reads these without torch; the training is
:mod:`date_engine.train.branches`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from date_engine.errors import DateError

__all__ = ["MIN_BRANCH_STEPS", "SPREAD_FLOOR", "Branch", "BranchCost",
           "CriticalBatch", "Measurement", "TargetSettings", "branch_cost", "choose_settings",
           "critical_batches", "exponents_below", "ladder", "reference", "setting_count"]

MIN_BRANCH_STEPS = 12
"""Optimizer steps of a branch at the target batch, at least: a branch of a few steps at 64×
says nothing (its loss is still the checkpoint's)."""
SPREAD_FLOOR = 0.005
"""τ is never below this share of the baseline branches' mean loss (or metric): two data orders
can agree by chance."""


@dataclass(frozen=True)
class Branch:
    """One branch: where it started, what it trained, what it reached."""

    at_samples: int
    """Samples the baseline had seen at the checkpoint it continues."""
    batch: int
    lr: float
    """The constant LR it trained at (the plan's at that point, its warmup past)."""
    samples: int
    steps: int
    loss: float | None
    """Mean training loss over the branch's second half of samples; None: it went non-finite."""
    metric: float | None
    """The recipe's metric at the branch's end (None: not evaluated, or non-finite)."""
    stable: bool
    keeps_up: bool
    role: Literal["baseline", "ladder", "setting"] = "ladder"
    """baseline: the baseline's batch (two data orders); ladder: 2×, 4×, ... up to the target at
    the plan's settings; setting: the target batch at another LR exponent or second moment."""
    seed: int = 0
    lr_exponent: float | None = None
    second_moment: Literal["scaled", "fixed"] = "scaled"
    why: str = ""
    """What made it unstable (empty when stable)."""
    start_loss: float | None = None
    """Mean training loss over its first tenth of samples (the checkpoint's level)."""
    half_loss: float | None = None
    """Mean training loss over (¼, ½] of its samples: the second half of a branch half as long,
    what a baseline branch had reached with half the samples."""
    half_metric: float | None = None
    """A baseline branch's metric halfway (None for the others)."""


@dataclass(frozen=True)
class CriticalBatch:
    at_samples: int
    batch: int
    """The largest batch of the ladder that keeps up from this checkpoint, with all below it."""
    tolerance: float
    """τ of the baseline branches' loss there."""


@dataclass(frozen=True)
class TargetSettings:
    """The settings the branches at the target batch measured best: the plan takes these."""

    batch: int
    lr_exponent: float
    second_moment: Literal["scaled", "fixed"]
    loss: float | None
    at_samples: int
    stable: bool
    """False: no setting tried was stable; these are the most cautious tried."""
    tried: int


@dataclass(frozen=True)
class BranchCost:
    points: int
    """Checkpoints branched from."""
    samples: int
    """Samples each branch trains."""
    total: int
    """Samples all branches train."""
    budget: int
    baseline_samples: int = 0
    """One baseline run's samples."""
    target_samples: int = 0
    """The target run's samples, in the baseline's epochs."""
    note: str = ""
    """One line where fewer points than asked fit the budget."""

    def line(self) -> str:
        """What the branches cost, as shares of one baseline run and of the target run."""
        return (f"Branches: {self.total:,} samples ({self.points} checkpoint"
                f"{'s' * (self.points > 1)}, {self.samples:,} samples a branch) — "
                f"{self.total / self.baseline_samples:.2f}× one baseline run, "
                f"{self.total / self.target_samples:.2f}× the target run in its epochs."
                + (f" {self.note}" if self.note else ""))


def ladder(baseline_batch: int, target: int) -> tuple[int, ...]:
    """The batches branched: the baseline's, then the target halved while it stays above the
    baseline's and whole — ..., B/4, B/2, B — smallest first."""
    if target <= baseline_batch:
        raise DateError(f"--batch {target}: branches measure batches above the baseline's "
                        f"{baseline_batch}; give a larger target batch.")
    rungs = [target]
    while rungs[-1] % 2 == 0 and rungs[-1] // 2 > baseline_batch:
        rungs.append(rungs[-1] // 2)
    return (baseline_batch, *reversed(rungs))


def exponents_below(p: float) -> tuple[float, ...]:
    """The LR exponents tried at the target: the plan's p and the lower ones a quarter apart
    down to ½ (√k), or ½ and ¼ where p is ½ or less."""
    if p <= 0.5:
        return (p, 0.25) if p > 0.25 else (p,)
    steps = [p]
    while steps[-1] - 0.25 >= 0.5 - 1e-9:
        steps.append(round(steps[-1] - 0.25, 6))
    return tuple(steps)


def setting_count(p: float, adaptive: bool) -> int:
    """Branches at the target's peak LR: each exponent, and for an adaptive optimizer each
    again under the baseline's second moment."""
    return len(exponents_below(p)) * (2 if adaptive else 1)


def branch_cost(baseline_batch: int, target: int, points: int, settings: int,
                baseline_samples: int, target_samples: int, budget: int | None = None
                ) -> BranchCost:
    """How many checkpoints to branch from and how long each branch is. The budget (samples,
    all branches together) is ``budget``, else the larger of one baseline run and a tenth of the
    target run; each branch trains at least MIN_BRANCH_STEPS steps of the target batch. Fewer
    points than asked where the budget needs it (said in ``note``); a DateError where not even
    one point fits."""
    rungs = ladder(baseline_batch, target)
    limit = budget if budget is not None else max(baseline_samples, target_samples // 10)
    per_point = len(rungs) + 1  # the baseline's batch twice
    least = MIN_BRANCH_STEPS * target
    fits = (limit - settings * least) // (per_point * least)
    if fits < 1:
        need = (per_point + settings) * least
        raise DateError(
            f"branches up to batch {target} need {need:,} samples at least, {need / limit:.1f}× "
            f"the budget of {limit:,}; pass --branch-samples {need} or more, or a "
            "smaller --batch (docs/branches.md).")
    chosen = min(points, fits)
    steps = max(MIN_BRANCH_STEPS, limit // ((chosen * per_point + settings) * target))
    samples = steps * target
    note = "" if chosen == points else (
        f"Branching from {chosen} checkpoint{'s' * (chosen > 1)}, not {points}: {points} would "
        f"cost more than the budget of {limit:,} samples (--branch-samples raises it).")
    return BranchCost(chosen, samples, (chosen * per_point + settings) * samples, limit,
                      baseline_samples, target_samples, note)


def tolerance(values: Sequence[float]) -> float:
    """τ of the baseline branches' values: their spread, at least SPREAD_FLOOR of their mean."""
    mean = sum(values) / len(values)
    return max(max(values) - min(values), SPREAD_FLOOR * abs(mean))


def reference(branches: Sequence[Branch], at_samples: int, field: str = "loss"
              ) -> tuple[float, float] | None:
    """(mean, τ) of the baseline branches' ``field`` (loss, half_loss, half_metric) from the
    checkpoint at ``at_samples``; None where they do not both have it."""
    values = [getattr(b, field) for b in branches
              if b.role == "baseline" and b.at_samples == at_samples]
    if len(values) < 2 or any(v is None for v in values):
        return None
    return sum(values) / len(values), tolerance(values)


def judge(raw: Sequence[Branch], higher_is_better: bool) -> tuple[Branch, ...]:
    """The branches with ``stable`` and ``keeps_up`` set against their checkpoint's baseline
    branches (each raw branch carries its loss, metric and any spike in ``why``)."""
    judged = []
    for b in raw:
        ends = reference(raw, b.at_samples)
        halves = reference(raw, b.at_samples, "half_loss")
        metric = reference(raw, b.at_samples, "half_metric")
        stable = b.loss is not None and not b.why
        why = b.why or ("its loss went non-finite" if b.loss is None else "")
        if stable and ends is not None and b.start_loss is not None and \
                b.loss > b.start_loss + ends[1]:
            stable, why = False, (f"its loss ended at {b.loss:.4g}, above the "
                                  f"{b.start_loss:.4g} it began at")
        keeps = stable and (b.role == "baseline" or (
            halves is not None and b.loss <= halves[0] + halves[1]))
        if keeps and b.role != "baseline" and b.metric is not None and metric is not None:
            behind = (metric[0] - b.metric) if higher_is_better else (b.metric - metric[0])
            keeps = behind <= metric[1]
        judged.append(replace(b, stable=stable, keeps_up=keeps, why=why))
    return tuple(judged)


def critical_batches(branches: Sequence[Branch]) -> tuple[CriticalBatch, ...]:
    """Per checkpoint, the largest ladder batch at and below which every branch keeps up (the
    baseline's batch where none above it does)."""
    found = []
    for at in sorted({b.at_samples for b in branches}):
        ref = reference(branches, at)
        if ref is None:
            continue
        rungs = sorted((b for b in branches if b.at_samples == at and b.role == "ladder"),
                       key=lambda b: b.batch)
        critical = min(b.batch for b in branches if b.at_samples == at and b.role == "baseline")
        for b in rungs:
            if not b.keeps_up:
                break
            critical = b.batch
        found.append(CriticalBatch(at, critical, (reference(branches, at, "half_loss")
                                                  or ref)[1]))
    return tuple(found)


def choose_settings(branches: Sequence[Branch], target: int) -> TargetSettings | None:
    """The settings at the target batch that were stable and reached the lowest loss, from the
    checkpoint the settings were branched at; where none was stable, the one with the lowest loss
    all the same, marked so (at 32× on Fashion-MNIST every setting jumped to its peak LR rose
    above where it began, and the lowest-loss one ended 0.71 against the most cautious one's
    1.82: docs/branches.md); where every one went non-finite, the most cautious tried (the lowest
    exponent, the baseline's second moment). None without settings."""
    tried = [b for b in branches if b.batch == target and b.role == "setting"]
    if not tried:
        return None
    at = max(b.at_samples for b in tried)
    tried = [b for b in tried if b.at_samples == at]
    stable = [b for b in tried if b.stable and b.loss is not None]
    finite = [b for b in tried if b.loss is not None]
    if stable or finite:  # ties: the higher LR, then the rule's second moment
        best = min(stable or finite,
                   key=lambda b: (b.loss, -b.lr_exponent, b.second_moment != "scaled"))
    else:
        best = min(tried, key=lambda b: (b.lr_exponent, b.second_moment != "fixed"))
    return TargetSettings(target, best.lr_exponent, best.second_moment, best.loss, at,
                          bool(stable), len(tried))


@dataclass(frozen=True)
class Measurement:
    """What a probe's branches measured, as a plan carries it (:attr:`Plan.measured`)."""

    branched_to: int
    """The target batch the probe branched up to."""
    critical_batch: tuple[CriticalBatch, ...]
    settings: TargetSettings | None = None

    def keeps_up_from(self, batch: int) -> int | None:
        """The samples from which, on the branches, ``batch`` kept up with the baseline (the
        first checkpoint whose critical batch is at least ``batch``); None where none was."""
        return next((c.at_samples for c in self.critical_batch if c.batch >= batch), None)

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        settings = data.get("settings")
        return cls(data["branched_to"], tuple(CriticalBatch(**c) for c in data["critical_batch"]),
                   TargetSettings(**settings) if settings else None)
