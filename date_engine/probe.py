"""``date probe``: measure the gradient noise scale over the first part of the baseline's own
training, and keep what the plan's forecast needs in probe.json.

The probe trains the baseline exactly (its batch, LR schedule and optimizer) through ``date
scale``, with the batch split into micro-batches so that every step measures the noise scale
(docs/noise.md), and stops after a share of the baseline's steps or a time budget. From the
smoothed estimates it keeps ``points`` (epoch, B_noise) measurements, one per equal stretch of the
probed epochs (the ratio of the stretch's mean tr(Σ) and |G|²), and fits the noise curve
(:class:`~date_engine.forecast.NoiseCurve`) that :mod:`date_engine.plan` forecasts from. The
|G|² is that of pairs of consecutive steps (:mod:`date_engine.noise`): B_simple, kept beside it,
reads the oscillation of an optimizer at the edge of stability as signal and forecast 3–5× the
epochs lenet-mnist took (docs/noise.md, "Where the forecast failed").

This module is probe.json's format and reading, without torch (the plan reads it);
:func:`probe_points` turns a run's metrics.jsonl records into points. The probe's training is
:mod:`date_engine.train.probe`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from date_engine.branches import (
    Branch,
    BranchCost,
    CriticalBatch,
    Measurement,
    TargetSettings,
)
from date_engine.errors import DateError
from date_engine.files import read_small_text
from date_engine.forecast import NoiseCurve

__all__ = ["DEFAULT_BRANCH_POINTS", "DEFAULT_POINTS", "DEFAULT_SHARE", "LR_CHECK_FACTOR",
           "PROBE_FORMAT", "LRCheck", "NoisePoint", "Probe", "baseline_identity", "probe_points",
           "second_half_loss"]

PROBE_FORMAT = 3
READS_FORMATS = (2, 3)
"""2: before branches (a probe of that format reads as one without them)."""
DEFAULT_SHARE = 0.08
"""The share of the baseline's optimizer steps a probe trains (docs/noise.md: how much it must
see)."""
DEFAULT_POINTS = 8
DEFAULT_BRANCH_POINTS = 3
"""Checkpoints ``date probe --batch`` branches from, spread over its steps."""
LR_CHECK_FACTOR = 2.0
"""The LR check trains the probe's steps again at this multiple of the baseline's LR."""


@dataclass(frozen=True)
class NoisePoint:
    """The noise scale over one stretch of the probe."""

    epoch: float
    """The stretch's middle, in the baseline's epochs."""
    noise_scale: float | None
    """tr(Σ)/|G_pair|² of the stretch's means, what the forecast fits; None when the mean |G|²
    is not positive."""
    grad_sq: float
    """|G_pair|²: the signal of pairs of consecutive steps."""
    grad_trace: float
    loss: float | None
    """The mean training loss the stretch logged (None where the trainer logged none there)."""
    simple_scale: float | None = None
    """B_simple = tr(Σ)/|G|² of single steps, for comparison (docs/noise.md)."""


@dataclass(frozen=True)
class LRCheck:
    """The probe's LR check: its steps trained again at ``factor`` times the baseline's LR, from
    the same initialisation and data order. Where the larger LR does not lower the loss, the
    baseline is at or past the LR its steps can use, and a larger batch's larger LR is not
    expected to buy steps back (docs/noise.md, "The LR check")."""

    factor: float
    loss: float | None
    """Mean training loss over the second half of the probe's steps at ``factor`` × the LR; None
    where that run stopped on a non-finite loss."""
    baseline_loss: float
    """The same mean for the probe's own run, at the baseline's LR."""

    @property
    def gains(self) -> bool:
        """The larger LR lowered the loss (a run it made diverge did not)."""
        return self.loss is not None and self.loss < self.baseline_loss


def second_half_loss(records: Sequence[dict[str, Any]], steps: int) -> float | None:
    """The mean logged training loss of a run's metrics.jsonl records over steps (steps/2,
    steps]; None without a record there."""
    losses = [r["loss"] for r in records
              if "loss" in r and steps / 2 < r.get("step", 0) <= steps]
    return sum(losses) / len(losses) if losses else None


def baseline_identity(spec: Any, dataset_size: int) -> dict[str, Any]:
    """What a probe's noise curve depends on: the baseline's batch, LR, warmup, length, data set
    size and optimizer. A plan may use a probe only of the same baseline."""
    base = spec.baseline
    return {"batch_size": base.batch_size, "lr": base.lr, "warmup_epochs": base.warmup_epochs,
            "iterations": base.iterations, "epochs": base.epochs, "dataset_size": dataset_size,
            "optimizer": base.optimizer.options() | {"name": base.optimizer.name},
            "recipe": spec.recipe}


@dataclass(frozen=True)
class Probe:
    """probe.json: the baseline probed, how, and what was measured."""

    baseline: dict[str, Any]
    """:func:`baseline_identity` of the probed spec."""
    baseline_epochs: float
    """E0, the baseline's whole length in epochs."""
    steps: int
    """Optimizer steps the probe trained."""
    baseline_steps: int
    epochs: float
    """Epochs the probe trained."""
    micro_batch: int
    world_size: int
    accumulation_steps: int
    wall_seconds: float
    """The probe's training time."""
    points: tuple[NoisePoint, ...]
    command: str = ""
    run_dir: str = ""
    lr_check: LRCheck | None = None
    """The LR check (``date probe`` runs it unless --no-lr-check; None in probes without it)."""
    target_batch: int | None = None
    """The batch ``date probe --batch`` branched up to (None: a probe without branches)."""
    branches: tuple[Branch, ...] = ()
    """Every branch run (:mod:`date_engine.branches`), judged."""
    critical_batch: tuple[CriticalBatch, ...] = ()
    """Per checkpoint branched from, the largest batch that kept up."""
    settings: TargetSettings | None = None
    """The settings at ``target_batch`` the branches measured best (the plan takes them)."""
    branch_cost: BranchCost | None = None
    format: int = PROBE_FORMAT
    curve: NoiseCurve = field(init=False)
    path: str = field(default="", compare=False)
    """The file it was read from (not written)."""

    def __post_init__(self) -> None:
        for name in ("steps", "baseline_steps", "micro_batch", "world_size",
                     "accumulation_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be a positive whole number")
        if self.steps > self.baseline_steps:
            raise ValueError("steps is larger than baseline_steps")
        for name in ("baseline_epochs", "epochs", "wall_seconds"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0) or (value == 0 and name != "wall_seconds"):
                raise ValueError(f"{name} must be a finite positive number")
        for i, point in enumerate(self.points):
            values = (point.epoch, point.noise_scale, point.grad_sq, point.grad_trace, point.loss,
                      point.simple_scale)
            if not all(v is None or math.isfinite(v) for v in values) or point.epoch <= 0:
                raise ValueError(f"points.{i}: every value must be a finite number, the epoch "
                                 "positive")
        check = self.lr_check
        if check is not None and not (
                check.factor > 1 and all(v is None or (math.isfinite(v) and v >= 0)
                                         for v in (check.loss, check.baseline_loss))):
            raise ValueError("lr_check: factor must be above 1 and the losses finite, not "
                             "negative")
        # the forecast reads the curve from the start of training to the baseline's end
        reach = (self.baseline_epochs / 4000, self.baseline_epochs)
        try:
            curve = NoiseCurve.fit([(p.epoch, p.noise_scale) for p in self.points])
            usable = all(math.isfinite(value := curve(e)) and value < 1e30 for e in reach)
        except (OverflowError, ZeroDivisionError):
            usable = False
        if not usable:
            raise ValueError("points: their noise scales fit no usable noise curve (it exceeds "
                             "1e30 samples within the baseline's epochs)")
        if check is not None:
            curve = replace(curve, lr_checked=True, steps_limited=not check.gains)
        object.__setattr__(self, "curve", curve)

    @property
    def measurement(self) -> Measurement | None:
        """What the branches measured, for the plan (None: a probe without branches)."""
        if self.target_batch is None or not self.critical_batch:
            return None
        return Measurement(self.target_batch, self.critical_batch, self.settings)

    @property
    def share(self) -> float:
        return self.steps / self.baseline_steps

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["curve"] = asdict(self.curve)
        del data["path"]
        return data

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: str | Path) -> Probe:
        """probe.json as ``date probe`` wrote it, or a DateError naming the file, the field and
        the fix. Only a regular file is opened (a FIFO or a device would block the read)."""
        path = Path(path)
        again = "run date probe SPEC again"
        if not path.exists():
            raise DateError(f"probe {path}: no such file; run date probe SPEC first (it writes "
                            "probe.json) and pass that file to --probe.")
        text = read_small_text(path, "probe", "pass the probe.json that date probe wrote")
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise DateError(f"probe {path}: not a probe written by date probe ({exc}); "
                            f"{again}.") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def from_dict(cls, data: Any, path: str) -> Probe:
        """A probe from probe.json's object; ``path`` names where it came from (in errors)."""
        from pydantic import TypeAdapter, ValidationError

        again = "run date probe SPEC again"
        if not isinstance(data, dict) or data.get("format") not in READS_FORMATS:
            raise DateError(f"probe {path}: not a probe.json of this version of date_engine "
                            f"(format {PROBE_FORMAT}); {again}.")
        data = {k: v for k, v in data.items() if k not in ("curve", "path")}
        data["format"] = PROBE_FORMAT  # an older format's probe: the same, without branches
        try:
            probe = TypeAdapter(cls).validate_json(json.dumps(data), strict=True)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"]) or "the top level"
            raise DateError(f"probe {path}: {where}: {err['msg'][0].lower()}{err['msg'][1:]}; "
                            f"{again}.") from None
        except ValueError as exc:  # the checks of __post_init__
            raise DateError(f"probe {path}: {exc}; {again}.") from None
        object.__setattr__(probe, "path", path)
        return probe

    def matching(self, identity: dict[str, Any]) -> Probe:
        """This probe, if it measured the baseline ``identity`` describes
        (:func:`baseline_identity`); else a DateError: its noise curve says nothing about
        another baseline."""
        differing = [k for k in identity if _json(self.baseline.get(k)) != _json(identity[k])]
        if differing:
            key = differing[0]
            raise DateError(f"{self.path or 'the probe'} was measured for another baseline "
                            f"({key}: {self.baseline.get(key)!r} there, {identity[key]!r} here); "
                            "run date probe on this spec.")
        return self


def _json(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples as lists), for comparing with probe.json."""
    return json.loads(json.dumps(value))


def probe_points(records: Sequence[dict[str, Any]], count: int) -> tuple[NoisePoint, ...]:
    """``count`` points from a run's metrics.jsonl records: the probed epochs cut into equal
    stretches, each the ratio of its records' mean tr(Σ) and mean |G_pair|² (and of mean |G|²:
    B_simple). Stretches without a record are left out."""
    measured = [r for r in records if r.get("grad_sq_pair") is not None]
    if not measured:
        return ()
    last = measured[-1]["epoch"]
    width = last / count
    points = []
    for i in range(count):
        inside = [r for r in measured if i * width < r["epoch"] <= (i + 1) * width]
        if not inside:
            continue
        pair_sq, simple_sq, trace = (sum(r[key] for r in inside) / len(inside) for key in
                                     ("grad_sq_pair", "grad_sq", "grad_trace"))
        losses = [r["loss"] for r in inside if r.get("loss") is not None]
        loss = sum(losses) / len(losses) if losses else None
        points.append(NoisePoint((i + 0.5) * width, _ratio(trace, pair_sq), pair_sq, trace, loss,
                                 _ratio(trace, simple_sq)))
    return tuple(points)


def _ratio(trace: float, grad_sq: float) -> float | None:
    return trace / grad_sq if grad_sq > 0 and trace > 0 else None
