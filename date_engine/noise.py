"""The gradient noise scale: how large a batch the problem can use at this point of training.

With G the true gradient and Σ the per-sample covariance of the gradient, a batch of B samples has
E|g_B|² = |G|² + tr(Σ)/B. The simple noise scale B_simple = tr(Σ)/|G|² is the batch at which the
gradient's noise equals its signal; below it a larger batch buys almost proportionally fewer steps,
beyond it almost nothing (McCandlish et al. 2018, *An Empirical Model of Large-Batch Training*).

Every optimizer step of ``date scale`` sees the gradients of n micro-batches of b samples each
(n = processes × accumulation steps) and their mean, the gradient of the whole batch B = n·b. From
the mean squared norm of the micro-batch gradients, s, and the squared norm of the step's
gradient, S, the unbiased estimates are (ibid., Appendix A)::

    |G|²   ≈ (B·S − b·s) / (B − b)   = (n·S − s) / (n − 1)
    tr(Σ)  ≈ (s − S) / (1/b − 1/B)   = (s − S) · b·n / (n − 1)

Each is noisy, |G|² most (it is the small difference of two large numbers while the noise
dominates), so each is smoothed on its own by an exponential moving average with a bias
correction, and B_simple is taken as the ratio of the averages — not the average of ratios,
which a near-zero |G|² estimate would ruin. The averages' half-life is counted in samples, so a
run at 32× the batch averages over as much training as the baseline does.

Where consecutive steps' gradients are anti-correlated — the iterate oscillating across a sharp
direction, as at the edge of stability — the oscillation counts as signal in |G|² and B_simple
reads small (docs/noise.md measures by how much). The mean of two
consecutive step gradients cancels a period-two oscillation, so ``date probe`` also measures
their product c = ⟨g_t, g_t−1⟩ and the signal of the pair,

    |G_pair|² ≈ (|G_t|² + |G_t−1|²)/4 + c/2                      (each |G|² the step's estimate)

unbiased when the two steps' noises are independent; tr(Σ)/|G_pair|² is the pair noise scale the
forecast uses. Where steps do not oscillate it stays near B_simple (docs/noise.md).

This module is plain Python: the trainer (:mod:`date_engine.train.step`) measures s and S in
backward hooks and one all-reduce that the step takes anyway; ``date probe`` and the plan's
forecast read the numbers it records.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["NoiseEstimate", "NoiseScale", "unbiased"]


def unbiased(small_sq: float, big_sq: float, small_batch: int, big_batch: int
             ) -> tuple[float, float]:
    """(|G|², tr(Σ)) from the mean squared norm ``small_sq`` of gradients over ``small_batch``
    samples and the squared norm ``big_sq`` of their mean over ``big_batch`` samples."""
    if not 0 < small_batch < big_batch:
        raise ValueError(f"need 0 < small batch < big batch, got {small_batch}, {big_batch}")
    g2 = (big_batch * big_sq - small_batch * small_sq) / (big_batch - small_batch)
    trace = (small_sq - big_sq) / (1.0 / small_batch - 1.0 / big_batch)
    return g2, trace


@dataclass(frozen=True)
class NoiseEstimate:
    """The smoothed estimates after a step."""

    grad_sq: float
    """|G|², the squared norm of the true gradient."""
    trace: float
    """tr(Σ), the summed per-sample gradient variance."""
    grad_sq_error: float | None = None
    """The standard error of ``grad_sq``, from the spread of the steps' estimates the average
    weighs (None where not tracked)."""
    pair_grad_sq: float | None = None
    """|G_pair|², the squared norm of the mean true gradient of two consecutive steps (None where
    pairs are not measured)."""

    @property
    def significance(self) -> float:
        """|G|² over its standard error: how clearly the averaged steps show a true gradient
        through the noise (infinite where the error is not tracked or is 0)."""
        if self.grad_sq_error is None or self.grad_sq_error <= 0:
            return math.inf
        return self.grad_sq / self.grad_sq_error

    @property
    def scale(self) -> float | None:
        """B_simple = tr(Σ)/|G|²; None while the estimate of |G|² is not positive (the noise
        still hides the signal: too few steps averaged)."""
        if self.grad_sq <= 0 or self.trace <= 0 or not math.isfinite(self.grad_sq):
            return None
        return self.trace / self.grad_sq

    @property
    def pair_scale(self) -> float | None:
        """tr(Σ)/|G_pair|²: the noise scale with a period-two oscillation of the gradient left
        out; None where pairs are not measured or their |G|² is not positive."""
        if self.pair_grad_sq is None or self.pair_grad_sq <= 0 or self.trace <= 0:
            return None
        return self.trace / self.pair_grad_sq


class NoiseScale:
    """Bias-corrected moving averages of |G|² and tr(Σ) over the steps of a run.

    ``half_life`` is in samples: after it, an old step weighs half as much. A step of B samples
    decays the averages by 0.5^(B / half_life), but never by less than ``1 − 1/min_steps`` per
    step, so that the average always spans a few steps.
    """

    HALF_LIFE_SHARE = 0.01
    """The default half-life, as a share of the run's samples."""

    RISE = 2.0
    """:attr:`risen`: how far above its lowest measurable value the noise scale must be."""
    SIGNIFICANCE = 3.0
    """:attr:`measurable`: how many standard errors |G|² must stand above 0."""

    @classmethod
    def half_life_for(cls, run_samples: int) -> float:
        """The half-life of a run of ``run_samples`` samples in all."""
        return max(cls.HALF_LIFE_SHARE * run_samples, 1.0)

    def __init__(self, half_life: float, min_steps: float = 4.0) -> None:
        if half_life <= 0:
            raise ValueError(f"half_life must be positive, got {half_life}")
        self.half_life, self.min_steps = float(half_life), float(min_steps)
        self._sums = [0.0, 0.0]  # the biased averages of |G|² and tr(Σ)
        self._weight = 0.0  # 1 − Π decay: divides the biased averages
        self._square = 0.0  # the biased average of the squared |G|² estimates
        self._weight_sq = 0.0  # Σ of the squared weights: the average's effective sample count
        self.steps = 0
        self.lowest: float | None = None  # the lowest measurable noise scale so far
        self.has_risen = False  # whether it has ever been :attr:`risen`
        self._pair = [0.0, 0.0]  # the biased average of |G_pair|² and its weight
        self._last_g2: float | None = None  # the previous step's |G|², while pairs go on

    def decay(self, batch: int) -> float:
        return max(0.5 ** (batch / self.half_life), 1.0 - 1.0 / self.min_steps)

    def update(self, small_sq: float, big_sq: float, small_batch: int, big_batch: int,
               pair: float | None = None) -> bool:
        """Fold one step's measurement in; a non-finite one (an fp16 overflow) is left out.
        ``pair`` is ⟨g_t, g_t−1⟩, the product of this step's gradient with the previous step's
        (where pairs are measured); it is folded in when the previous step was. Returns whether
        the step was used."""
        g2, trace = unbiased(small_sq, big_sq, small_batch, big_batch)
        if not (math.isfinite(g2) and math.isfinite(trace)):
            self._last_g2 = None
            return False
        beta = self.decay(big_batch)
        if pair is not None:
            if self._last_g2 is not None and math.isfinite(pair):
                self._pair = [beta * self._pair[0] + (1 - beta) * ((g2 + self._last_g2) / 4
                                                                   + pair / 2),
                              beta * self._pair[1] + (1 - beta)]
            self._last_g2 = g2
        self._sums = [beta * self._sums[0] + (1 - beta) * g2,
                      beta * self._sums[1] + (1 - beta) * trace]
        self._weight = beta * self._weight + (1 - beta)
        self._square = beta * self._square + (1 - beta) * g2 * g2
        self._weight_sq = beta * beta * self._weight_sq + (1 - beta) ** 2
        self.steps += 1
        if self.measurable:  # then :attr:`risen` is this comparison with the lowest so far
            scale = self.scale
            self.lowest = scale if self.lowest is None else min(self.lowest, scale)
            self.has_risen = self.has_risen or scale >= self.RISE * self.lowest
        return True


    def observe(self, sample, split) -> NoiseEstimate | None:
        """Fold one step's ``sample`` (small |g|², big |g|² and, with pairs, ⟨g_t, g_t−1⟩, as
        the step's all-reduce returned them) in when the step saw more than one gradient of
        ``split`` (a :class:`~date_engine.runplan.BatchSplit`; a ramp stage may see one); the
        smoothed estimate after it, None if the step measured nothing."""
        if sample is None:
            return None
        if split.world_size * split.accumulation_steps > 1:
            small_sq, big_sq, *pair = sample
            self.update(small_sq, big_sq, split.micro_batch, split.batch,
                        pair[0] if pair else None)
        return self.estimate

    @property
    def estimate(self) -> NoiseEstimate | None:
        if self._weight == 0.0:
            return None
        mean = self._sums[0] / self._weight
        spread = max(self._square / self._weight - mean * mean, 0.0)  # the steps' variance
        # the weighted mean's variance: spread · Σw² / (Σw)²
        error = math.sqrt(spread * self._weight_sq) / self._weight
        pair = self._pair[0] / self._pair[1] if self._pair[1] > 0 else None
        return NoiseEstimate(mean, self._sums[1] / self._weight, error, pair)

    @property
    def settled(self) -> bool:
        """At least a half-life of samples measured: the averages weigh what was measured more
        than their start (a measured batch ramp moves only on a settled estimate)."""
        return self._weight >= 0.5

    @property
    def measurable(self) -> bool:
        """Settled, with |G|² at least :attr:`SIGNIFICANCE` standard errors above 0: the ratio
        means something. While the noise hides the gradient (a model on its initial plateau,
        two micro-batches per step) the ratio is large and erratic, not a batch to move to."""
        estimate = self.estimate
        return (self.settled and estimate is not None and estimate.scale is not None
                and estimate.significance >= self.SIGNIFICANCE)

    @property
    def risen(self) -> bool:
        """Measurable, and at least :attr:`RISE` times the lowest measurable noise scale so far:
        the noise scale is growing, not falling from a high start (a measured ramp moves only
        then)."""
        # measurable implies a scale; a checkpoint from before the lowest was kept has none
        return (self.measurable and self.lowest is not None
                and self.scale >= self.RISE * self.lowest)

    @property
    def trusted(self) -> bool:
        """Risen once, and still a scale to read (|G|² estimated above 0): a measured ramp moves
        on it. Once the gradient has emerged from the noise and the noise scale has grown, a
        later estimate of |G|² that is no longer :attr:`measurable` says that the noise scale is
        large beside the batch, not that it cannot be read (a LeNet's readings at batch 1024 fall
        below 3 standard errors late in training; docs/noise.md)."""
        return self.has_risen and self.settled and self.scale is not None

    @property
    def scale(self) -> float | None:
        estimate = self.estimate
        return estimate.scale if estimate is not None else None

    def state_dict(self) -> dict[str, Any]:
        return {"sums": list(self._sums), "weight": self._weight, "steps": self.steps,
                "half_life": self.half_life, "min_steps": self.min_steps, "lowest": self.lowest,
                "square": self._square, "weight_sq": self._weight_sq, "has_risen": self.has_risen,
                "pair": list(self._pair), "last_g2": self._last_g2}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._sums = [float(v) for v in state["sums"]]
        self._weight, self.steps = float(state["weight"]), int(state["steps"])
        # absent from checkpoints written before them: no lowest value, no error tracked
        self.lowest = state.get("lowest")
        self._square = float(state.get("square", 0.0))
        self._weight_sq = float(state.get("weight_sq", 0.0))
        self.has_risen = bool(state.get("has_risen", False))
        self._pair = [float(v) for v in state.get("pair", (0.0, 0.0))]
        self._last_g2 = state.get("last_g2")

    def drop_pair(self) -> None:
        """Start the pairs afresh: the next step's product has no previous gradient (a run
        resumed from a checkpoint that did not keep it)."""
        self._last_g2 = None
