"""The baseline's learning-rate shape, kept at every batch.

A baseline's schedule is a warmup followed by a shape: a multiplier of the peak LR as a function
of how far training has come. DATE changes the peak (the rule's η), the warmup's length (LEGW)
and the number of steps; the shape stays the baseline's, over the same fraction of training, so
that at k = 1 the plan is the baseline's schedule, step for step::

    linear        1 − t, down to date.lr_floor (DATE's; or f + (1 − f)·(1 − t) with an end f)
    cosine        f + (1 − f)·½·(1 + cos πt)
    polynomial    f + (1 − f)·(1 − t)^power
    constant      1
    step          factor^⌊e / every⌋            (e in the baseline's epochs)
    multistep     factor^(milestones passed)   (milestones in the baseline's epochs)
    wsd           1, then over the last ``decay_fraction`` of training f + (1 − f)·d(u), with
                  d = 1 − u (linear), ½·(1 + cos πu) (cosine) or 1 − √u (1-sqrt)
    inverse_sqrt  √(τ / (s − I_w + τ)),  τ = the warmup's steps (HF's timescale)

with t = (s − I_w) / (I − I_w) the fraction of the steps after warmup, s the steps counted (see
``index``) and f the end as a fraction of the peak. Epoch milestones stay at their epochs, and
stretch with the epochs a ``hold`` or ``ramp`` budget trains.

``index`` says which step a value belongs to. ``torch``: the LR of optimizer step i is the
schedule after s = i − 1 steps, as torch's and Hugging Face's schedulers run it (a linear warmup's
first step at 0). ``paper``: after s = i steps, DATE's formula (the first warmup step at η/I_w).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

__all__ = ["DecayShape", "Schedule", "Shape"]

Shape = Literal["linear", "cosine", "polynomial", "constant", "step", "multistep", "wsd",
                "inverse_sqrt"]
"""The shapes a baseline's schedule may take after its warmup."""
DecayShape = Literal["linear", "cosine", "1-sqrt"]
"""wsd: the final decay's shapes (HF's decay_type)."""


@dataclass(frozen=True)
class Schedule:
    """The baseline's schedule after warmup, as the plan keeps it (JSON-able)."""

    name: Shape = "linear"
    index: Literal["paper", "torch"] = "paper"
    """paper: the LR of step i is the schedule after i steps; torch: after i − 1 (module doc)."""
    final: float | None = None
    """The end as a fraction of the peak; None: DATE's linear decay to date.lr_floor."""
    power: float = 1.0
    """polynomial: the exponent."""
    factor: float = 0.1
    """step, multistep: the multiplier at each milestone."""
    milestones: tuple[float, ...] = ()
    """step, multistep: the baseline's epochs at which the LR is multiplied by ``factor`` (step:
    every ``milestones[0]`` epochs)."""
    decay_fraction: float = 0.1
    """wsd: the share of training the final decay takes."""
    decay_shape: DecayShape = "linear"
    """wsd: the decay's own shape."""

    @property
    def is_date_default(self) -> bool:
        """DATE's own schedule: linear to the floor, step i after i steps."""
        return self.name == "linear" and self.index == "paper" and self.final is None

    @property
    def offset(self) -> int:
        """The steps an optimizer step's LR is behind it: 1 under ``torch``, 0 under ``paper``."""
        return 1 if self.index == "torch" else 0

    def lr(self, peak: float, x: float, warm: float, last: float, baseline_epoch: float,
           quadratic: bool = False, floor: float = 0.0) -> float:
        """The LR ``x`` into training at the peak ``peak``: ``peak`` times :meth:`multiplier`, no
        lower than ``floor``. DATE's own schedule is the paper's formula in the paper's order
        (docs/algorithm.md §2): the warmup rises from 0, below the floor, and the decay is
        η·(last − x)/(last − warm) until it meets the floor."""
        if not self.is_date_default:
            return max(peak * self.multiplier(x, warm, last, baseline_epoch, quadratic), floor)
        if x < warm:
            return peak * _rise(x, warm, quadratic)
        return max(peak * (last - x) / (last - warm), floor)

    def multiplier(self, x: float, warm: float, last: float, baseline_epoch: float,
                   quadratic: bool = False) -> float:
        """The multiplier of the peak ``x`` into training whose warmup ends at ``warm`` and which
        ends at ``last`` (steps, or epochs under a ramp: one unit for all three);
        ``baseline_epoch``: the baseline's epoch this point stands for (epoch milestones)."""
        f = self._end()
        if x < warm:
            rise = _rise(x, warm, quadratic)
            return f + (1 - f) * rise if self.name == "wsd" else rise  # HF's WSD rises from f
        t = min(max((x - warm) / (last - warm), 0.0), 1.0) if last > warm else 1.0
        if self.name == "linear":
            return f + (1 - f) * (1 - t)
        if self.name == "cosine":
            return max(0.0, f + (1 - f) * 0.5 * (1 + math.cos(math.pi * t)))
        if self.name == "polynomial":
            return f + (1 - f) * (1 - t) ** self.power
        if self.name == "constant":
            return 1.0
        if self.name in ("step", "multistep"):
            return self.factor ** self.passed(baseline_epoch)
        if self.name == "wsd":
            tail = (last - x) / last  # the share of training still ahead
            if tail >= self.decay_fraction:
                return 1.0
            u = min(1 - tail / self.decay_fraction, 1.0)
            d = {"linear": 1 - u, "cosine": 0.5 * (1 + math.cos(math.pi * u)),
                 "1-sqrt": 1 - math.sqrt(u)}[self.decay_shape]
            return max(0.0, f + (1 - f) * d)
        # inverse_sqrt: HF's 1/√((s + τ − W)/τ) with the timescale τ = W, the warmup's length
        tau = warm if warm > 0 else 1.0
        return 1.0 / math.sqrt((x - warm + tau) / tau)

    def passed(self, baseline_epoch: float) -> int:
        """Milestones at or before ``baseline_epoch`` (a point a trillionth short of one counts:
        epochs computed from steps round)."""
        e = baseline_epoch * (1 + 1e-12)
        if self.name == "step":
            every = self.milestones[0]
            return int(e // every) if every > 0 else 0
        return sum(1 for m in self.milestones if m <= e)

    def _end(self) -> float:
        return 0.0 if self.final is None else self.final

    def formula(self) -> str:
        """The shape after warmup in one line, for ``date plan``."""
        f = self._end()
        end = f"{f:g}·η + (1 − {f:g})·η·" if f else "η·"
        return {
            "linear": f"{end}(1 − t)",
            "cosine": f"{end}½(1 + cos πt)",
            "polynomial": f"{end}(1 − t)^{self.power:g}",
            "constant": "η",
            "step": (f"η·{self.factor:g}^⌊e / {self.milestones[0]:g}⌋" if self.milestones
                     else "η"),
            "multistep": f"η·{self.factor:g}^(milestones passed: "
                         f"{', '.join(f'{m:g}' for m in self.milestones)} epochs)",
            "wsd": f"η, then over the last {self.decay_fraction:.0%} of training "
                   f"{end}{self.decay_shape} decay",
            "inverse_sqrt": "η·√(τ / (i − I_w + τ)), τ = I_w",
        }[self.name]

    @classmethod
    def from_dict(cls, data: dict) -> Schedule:
        values = dict(data)
        values["milestones"] = tuple(values.get("milestones", ()))
        return cls(**values)


def _rise(x: float, warm: float, quadratic: bool) -> float:
    """The warmup's share of the peak ``x`` into a warmup of ``warm``: x/warm, or its square."""
    return (x / warm) ** 2 if quadratic else x / warm
