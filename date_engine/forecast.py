"""What holding accuracy costs at a larger batch, forecast from the measured gradient noise scale.

McCandlish et al. (2018) model the samples E and optimizer steps S a run needs to reach a given
loss at batch B as E = E_min·(1 + B/B_noise) and S = S_min·(1 + B_noise/B). B_noise grows as
training goes on, so the model is applied to each stretch of training: a stretch that costs the
baseline (batch B0) de epochs costs a run at batch B de·(B_noise + B)/(B_noise + B0) epochs.
Summed over the baseline's E0 epochs, with B_noise(e) the curve ``date probe`` measured::

    E_B = ∫₀^E0 (B_noise(e) + B) / (B_noise(e) + B0) de        epochs to the baseline's loss
    f   = E_B / E0                                              the forecast's epoch factor

The largest batch expected to hold accuracy at the baseline's epochs, B_hold, is where f = 4/3:
same-epoch training there reaches the baseline's loss given a third more epochs. This threshold is
a calibration, not part of the model; the studies it was chosen on and how far it misses on those
it was not are in docs/noise.md ("B_hold is a calibration", "Held out").

B_noise(e) is a power law a·e^β fitted to the probe's points in log-log space, from its lowest
point on: the noise scale can start high and fall while the model leaves its initialisation, a
transient a power law of training progress does not describe (docs/results.md, "The noise-scale
forecast against the sweeps"). Beyond the probed epochs the curve is extrapolated.

Where the probe's LR check found that a doubled LR does not lower the baseline's loss
(:class:`~date_engine.probe.LRCheck`), the curve is marked ``steps_limited`` and the forecast
takes B_noise as 0, McCandlish's limit where every step is needed whatever the batch: f = B/B0,
the baseline's steps at any batch, and B_hold = 4/3·B0. The one study where a baseline reads so,
a masked LM whose accuracy waits on leaving a plateau, held no larger batch in its epochs, where
the noise scale alone put B_hold at 7.41× its batch (docs/noise.md, "The LR check"). Plain
Python: ``date plan`` imports no torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["HELD_OUT_MISS", "HOLDING_FACTOR", "PLATEAU_MISS", "STEPS_LIMITED_MISSES",
           "CriticalCurve", "Forecast", "NoiseCurve", "batch_at_factor", "batch_slope",
           "epochs_factor", "forecast", "holding_batch", "mean_cost"]

HOLDING_FACTOR = 4 / 3
"""f at the largest batch expected to hold accuracy at the baseline's epochs (a calibration:
docs/noise.md)."""
HELD_OUT_MISS = 4.43
"""How far B_hold missed the largest batch that held on a study left out of the choice of its
constant, at worst over three probe seeds a study (docs/noise.md, "Held out"; a test recomputes it
from lab/holdout.py)."""
STEPS_LIMITED_MISSES = (("bert-mlm", 1.31), ("lenet-mnist", 12.05), ("vit-mnist", 1.51))
"""How far the LR check's forecast, B_hold = ⌊4/3·B0⌋, was off the largest batch that held in the
baseline's epochs on each study whose probes it found steps-limited, at worst over three probe
seeds (docs/noise.md, "The LR check"; a test recomputes it)."""
PLATEAU_MISS = 7.41
"""How many times the baseline's batch B_hold was on bert-mlm from the noise scale alone, where
no larger batch held in the baseline's epochs: what a probe without the LR check forecasts for a
model whose accuracy waits on leaving a plateau (docs/noise.md, "Held out"; a test recomputes
it)."""
_GRID = 2000  # midpoints of the integral; the integrand is smooth and bounded by B/B0


@dataclass(frozen=True)
class NoiseCurve:
    """B_noise(e) = a·e^β, fitted to (epoch, B_noise) points measured from ``first`` to ``last``
    epoch; with the fit's statistics, the standard error of log B_noise at any epoch."""

    a: float
    beta: float
    first: float
    last: float
    points: int = 0
    """Measurements the fit used (0: not recorded, as in plans written before it was)."""
    spread: float = 0.0
    """s, the standard deviation of the fit's residuals in log B_noise (n − 2 degrees of
    freedom; 0 for two points, which a line always fits)."""
    center: float = 0.0
    """x̄, the mean log epoch of the fit's points."""
    sxx: float = 0.0
    """Σ (log e − x̄)² over the fit's points."""
    lr_checked: bool = False
    """The probe ran the LR check (:class:`~date_engine.probe.LRCheck`)."""
    steps_limited: bool = False
    """The LR check found a doubled LR no better: the forecast takes B_noise as 0 (every step
    needed at any batch) instead of this curve."""
    symbol: ClassVar[str] = "B_noise"
    """How the plan's ledger names the curve."""

    def __call__(self, epoch: float) -> float:
        return self.a * max(epoch, 1e-9) ** self.beta

    def log_error(self, epoch: float) -> float:
        """The standard error of the fitted log B_noise at ``epoch``: s·√(1/n + (log e − x̄)²/Sxx),
        the least-squares line's own (it grows with the distance from the probed epochs); NaN
        where the fit has fewer than three points to measure s from."""
        if self.points < 3 or self.sxx <= 0:
            return math.nan
        x = math.log(max(epoch, 1e-9))
        return self.spread * math.sqrt(1 / self.points + (x - self.center) ** 2 / self.sxx)

    def progress_at(self, noise: float) -> float:
        """The first epoch e with a·e^β ≥ ``noise`` (β > 0: the noise scale grows); infinity if it
        never does."""
        if self.beta <= 0:
            return math.inf if noise > self.a else 0.0
        try:
            return (noise / self.a) ** (1.0 / self.beta)
        except OverflowError:  # a curve so flat the noise reaches this only past any run's end
            return math.inf

    def shifted(self, z: float) -> Callable[[float], float]:
        """The curve ``z`` standard errors above (z > 0) or below the fit at every epoch (a fit
        too wide to say gives inf or 0, not an overflow)."""
        return lambda epoch: self(epoch) * math.exp(min(z * self.log_error(epoch), 700.0))

    @classmethod
    def fit(cls, points: Sequence[tuple[float, float]]) -> NoiseCurve:
        """Least squares of log B_noise on log e over the points from the lowest B_noise on (all
        of them when that is the last: a noise scale that only fell); needs two points at
        different epochs with positive values."""
        usable = sorted((e, b) for e, b in points if e > 0 and b is not None and b > 0)
        if len({e for e, _ in usable}) < 2:
            raise ValueError("a noise curve needs measurements at two or more epochs")
        lowest = min(range(len(usable)), key=lambda i: usable[i][1])
        if len({e for e, _ in usable[lowest:]}) >= 2:
            usable = usable[lowest:]
        xs, ys = [math.log(e) for e, _ in usable], [math.log(b) for _, b in usable]
        n = len(xs)
        mx, my = sum(xs) / n, sum(ys) / n
        sxx = sum((x - mx) ** 2 for x in xs)
        beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
        residuals = [y - my - beta * (x - mx) for x, y in zip(xs, ys)]
        spread = math.sqrt(sum(r * r for r in residuals) / (n - 2)) if n > 2 else 0.0
        return cls(math.exp(my - beta * mx), beta, min(e for e, _ in usable),
                   max(e for e, _ in usable), points=n, spread=spread, center=mx, sxx=sxx)


@dataclass(frozen=True)
class CriticalCurve:
    """The critical batch over the baseline's progress as a probe's branches measured it
    (:mod:`date_engine.branches`), in place of B_noise in the cost model: McCandlish's B_crit is
    the batch that needs twice the fewest samples, which is what a branch that "keeps up" reads.

    At and between the measured epochs it is the batch measured at the latest of them (the
    critical batch grows, so this never exceeds what was measured); before the first it falls
    with the noise curve's shape and after the last it rises with it (``shape``, the probe's
    fit: extrapolated), and stays flat where the probe has no curve."""

    points: tuple[tuple[float, int], ...]
    """(epoch, critical batch) per checkpoint branched from, in order."""
    shape: NoiseCurve | None = None
    steps_limited: ClassVar[bool] = False
    """Never: the branches measured how the batch costs, whatever the LR check read."""
    symbol: ClassVar[str] = "B_crit"

    @classmethod
    def of(cls, measured: Sequence[tuple[int, int]], samples_per_epoch: int,
           shape: NoiseCurve | None) -> CriticalCurve:
        """From (samples, critical batch) pairs, the baseline's samples at each checkpoint."""
        return cls(tuple(sorted((s / samples_per_epoch, b) for s, b in measured)), shape)

    @classmethod
    def measured(cls, measurement, samples_per_epoch: int, shape: NoiseCurve | None
                 ) -> CriticalCurve | None:
        """The curve of a :class:`~date_engine.branches.Measurement` (its ``critical_batch``);
        None without one, or where it measured no checkpoint."""
        if measurement is None or not measurement.critical_batch:
            return None
        return cls.of([(c.at_samples, c.batch) for c in measurement.critical_batch],
                      samples_per_epoch, shape)

    @property
    def first(self) -> float:
        return self.points[0][0]

    @property
    def last(self) -> float:
        return self.points[-1][0]

    def measured_at(self, epoch: float) -> bool:
        """True where ``epoch`` lies within the measured checkpoints (not extrapolated)."""
        return self.first <= epoch <= self.last

    def _grown(self, epoch: float, anchor: float) -> float:
        return self.shape(epoch) / self.shape(anchor) if self.shape is not None else 1.0

    def __call__(self, epoch: float) -> float:
        (e1, c1), (en, cn) = self.points[0], self.points[-1]
        if epoch < e1:
            return c1 * min(1.0, self._grown(epoch, e1))
        if epoch >= en:
            return cn * max(1.0, self._grown(epoch, en))
        return next(c for e, c in reversed(self.points) if e <= epoch)

    def progress_at(self, batch: float) -> float:
        """The first epoch at which the curve reaches ``batch``; infinity if it never does."""
        (e1, c1), (en, cn) = self.points[0], self.points[-1]
        beta = self.shape.beta if self.shape is not None else 0.0
        if batch <= c1:  # reached by the first checkpoint: where the shape brings it there
            return e1 * (batch / c1) ** (1.0 / beta) if beta > 0 else 0.0
        reached = next((e for e, c in self.points if c >= batch), None)
        if reached is not None:
            return reached
        if beta <= 0:
            return math.inf
        try:
            return en * (batch / cn) ** (1.0 / beta)
        except OverflowError:
            return math.inf

    def log_error(self, epoch: float) -> float:
        """Not a fit: no standard error (the forecast gives no B_hold range)."""
        return math.nan


def _costed(curve: Callable[[float], float]) -> Callable[[float], float]:
    """The noise scale the forecast costs a batch by: the curve's, or 0 where the probe found the
    baseline steps-limited (:attr:`NoiseCurve.steps_limited`)."""
    return (lambda epoch: 0.0) if getattr(curve, "steps_limited", False) else curve


def epochs_factor(curve: Callable[[float], float], batch: int, baseline_batch: int,
                  baseline_epochs: float) -> float:
    """f = E_B / E0: how many times the baseline's epochs batch ``batch`` needs to reach the
    baseline's loss (1 at the baseline's batch, below 1 for a smaller batch)."""
    return mean_cost(_costed(curve), batch, baseline_batch, 0.0, baseline_epochs)


def mean_cost(curve: Callable[[float], float], batch: int, baseline_batch: int, start: float,
              end: float) -> float:
    """The mean over the baseline's progress ``start``..``end`` (epochs) of what a stretch costs
    at ``batch`` per epoch it costs the baseline: (B_noise(e) + B) / (B_noise(e) + B0), by the
    midpoint rule."""
    step = (end - start) / _GRID
    total = 0.0
    for i in range(_GRID):
        noise = curve(start + (i + 0.5) * step)
        total += (noise + batch) / (noise + baseline_batch)
    return total / _GRID


def batch_slope(curve: Callable[[float], float], baseline_batch: int,
                baseline_epochs: float) -> float:
    """M, the slope of f in the batch: f(B) = 1 + (B − B0)·M, M the mean over the baseline's
    epochs of 1/(B_noise(e) + B0) (the integrand of :func:`epochs_factor` is linear in B)."""
    curve = _costed(curve)
    step = baseline_epochs / _GRID
    return sum(1.0 / (curve((i + 0.5) * step) + baseline_batch) for i in range(_GRID)) / _GRID


def holding_batch(curve: Callable[[float], float], baseline_batch: int,
                  baseline_epochs: float, factor: float = HOLDING_FACTOR) -> int:
    """B_hold, the batch at which f = ``factor`` (HOLDING_FACTOR by default)."""
    return batch_at_factor(batch_slope(curve, baseline_batch, baseline_epochs), baseline_batch,
                           factor)


def batch_at_factor(slope: float, baseline_batch: int, factor: float) -> int:
    """The batch at which f = ``factor`` on a curve of slope M (:func:`batch_slope`):
    B0 + (factor − 1)/M."""
    return int(min(baseline_batch + (factor - 1.0) / slope, 2.0**40))


@dataclass(frozen=True)
class Forecast:
    """The forecast for one target batch."""

    batch: int
    factor: float
    """f = E_B / E0."""
    epochs: float
    """E_B: epochs to the baseline's loss."""
    steps: int
    """Optimizer steps those epochs take at the batch."""
    baseline_steps: int
    holding_batch: int
    """B_hold: the largest batch expected to hold accuracy at the baseline's epochs."""
    noise_at_end: float
    """B_noise at the end of the baseline's epochs (extrapolated past the probe)."""
    holding_low: int | None = None
    holding_high: int | None = None
    """B_hold on the noise curve one standard error of the probe's fit below and above
    (:meth:`NoiseCurve.log_error`); None where the fit has too few points to say."""

    @property
    def loses_at_same_epochs(self) -> bool:
        """Same-epoch training at this batch is expected to lose accuracy (beyond B_hold)."""
        return self.batch > self.holding_batch

    @property
    def speedup(self) -> float:
        """Baseline steps / steps: what k× the devices buys when the epochs are extended."""
        return self.baseline_steps / self.steps


def forecast(curve: NoiseCurve | CriticalCurve, batch: int, baseline_batch: int,
             baseline_epochs: float, dataset_size: int) -> Forecast:
    factor = epochs_factor(curve, batch, baseline_batch, baseline_epochs)
    epochs = factor * baseline_epochs
    return Forecast(
        batch=batch, factor=factor, epochs=epochs,
        steps=math.ceil(epochs * dataset_size / batch),
        baseline_steps=math.ceil(baseline_epochs * dataset_size / baseline_batch),
        holding_batch=holding_batch(curve, baseline_batch, baseline_epochs),
        noise_at_end=curve(baseline_epochs),
        **_holding_range(curve, baseline_batch, baseline_epochs),
    )


def _holding_range(curve: NoiseCurve, baseline_batch: int,
                   baseline_epochs: float) -> dict[str, int | None]:
    """B_hold one standard error of the fit below and above (None without a measured spread, or
    where the forecast does not read the curve: steps-limited)."""
    if curve.steps_limited or math.isnan(curve.log_error(baseline_epochs)):
        return {"holding_low": None, "holding_high": None}
    return {"holding_low": holding_batch(curve.shifted(-1.0), baseline_batch, baseline_epochs),
            "holding_high": holding_batch(curve.shifted(1.0), baseline_batch, baseline_epochs)}
