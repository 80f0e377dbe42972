"""``date probe``: measure the gradient noise scale over the first part of the baseline's own
training, and keep what the plan's forecast needs in probe.json.

The probe trains the baseline exactly (its batch, LR schedule and optimizer) through ``date
scale``, with the batch split into micro-batches so that every step measures the noise scale
(docs/noise.md), and stops after a share of the baseline's steps or a time budget. From the
smoothed estimates it keeps ``points`` (epoch, B_noise) measurements, one per equal stretch of the
probed epochs (the ratio of the stretch's mean |G|² and tr(Σ)), and fits the noise curve
(:class:`~date_engine.forecast.NoiseCurve`) that :mod:`date_engine.plan` forecasts from.

This module reads and writes probe.json without torch; :func:`probe_points` reads a run's
metrics.jsonl.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from date_engine.errors import DateError
from date_engine.forecast import NoiseCurve

__all__ = ["DEFAULT_POINTS", "DEFAULT_SHARE", "PROBE_FORMAT", "NoisePoint", "Probe",
           "baseline_identity", "probe_points"]

PROBE_FORMAT = 1
DEFAULT_SHARE = 0.1
"""The share of the baseline's optimizer steps a probe trains (docs/noise.md: how much it must
see)."""
DEFAULT_POINTS = 8


@dataclass(frozen=True)
class NoisePoint:
    """The noise scale over one stretch of the probe."""

    epoch: float
    """The stretch's middle, in the baseline's epochs."""
    noise_scale: float | None
    """tr(Σ)/|G|² of the stretch's means; None when the mean |G|² is not positive."""
    grad_sq: float
    grad_trace: float
    loss: float


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
    format: int = PROBE_FORMAT
    curve: NoiseCurve = field(init=False)
    path: str = field(default="", compare=False)
    """The file it was read from (not written)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "curve", NoiseCurve.fit(
            [(p.epoch, p.noise_scale) for p in self.points]))

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
        """probe.json as ``date probe`` wrote it, or a DateError naming the file and the fix."""
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            raise DateError(f"probe {path}: no such file; run date probe SPEC first (it writes "
                            "probe.json) and pass that file to --probe.") from None
        except (OSError, ValueError) as exc:
            raise DateError(f"probe {path}: not a probe written by date probe ({exc}); run "
                            "date probe SPEC again.") from None
        if not isinstance(data, dict) or data.get("format") != PROBE_FORMAT:
            raise DateError(f"probe {path}: not a probe.json of this version of date_engine "
                            f"(format {PROBE_FORMAT}); run date probe SPEC again.")
        try:
            data.pop("curve", None)
            data["points"] = tuple(NoisePoint(**p) for p in data["points"])
            return cls(**data, path=str(path))
        except (TypeError, KeyError, ValueError) as exc:
            raise DateError(f"probe {path}: incomplete ({exc}); run date probe SPEC "
                            "again.") from None

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
    stretches, each the ratio of its records' mean tr(Σ) and mean |G|². Stretches without a
    record are left out."""
    measured = [r for r in records if r.get("grad_sq") is not None]
    if not measured:
        return ()
    last = measured[-1]["epoch"]
    width = last / count
    points = []
    for i in range(count):
        inside = [r for r in measured if i * width < r["epoch"] <= (i + 1) * width]
        if not inside:
            continue
        grad_sq = sum(r["grad_sq"] for r in inside) / len(inside)
        trace = sum(r["grad_trace"] for r in inside) / len(inside)
        loss = sum(r["loss"] for r in inside) / len(inside)
        scale = trace / grad_sq if grad_sq > 0 and trace > 0 else None
        points.append(NoisePoint((i + 0.5) * width, scale, grad_sq, trace, loss))
    return tuple(points)


@dataclass(frozen=True)
class ProbeOptions:
    """How ``date probe`` trains: which share of the baseline, within how long, split how."""

    share: float = DEFAULT_SHARE
    points: int = DEFAULT_POINTS
    max_minutes: float | None = None
    nproc: int = 1
    micro_batch: int | None = None


def measuring_micro_batch(batch: int, world_size: int, micro_batch: int | None) -> int:
    """The micro-batch a probe splits the baseline's batch into: ``micro_batch`` if given, else
    a quarter of each process's share (or its largest divisor below that), so that every step
    sees at least 4 micro-batch gradients; refuses a split that sees one."""
    share = batch // world_size if batch % world_size == 0 else 0
    if micro_batch is None:
        micro_batch = next((d for d in range(max(share // 4, 1), 0, -1) if share % d == 0), 1)
    if share and world_size * share // micro_batch < 2:
        raise DateError(f"the probe needs two or more micro-batch gradients per step to measure "
                        f"the noise scale; with {world_size} process(es) and --micro-batch "
                        f"{micro_batch} the baseline's batch {batch} is one. Use a --micro-batch "
                        f"of {max(share // 4, 1)} or so.")
    return micro_batch


def run_probe(spec_path: Path, spec: Any, recipe: Any, options: ProbeOptions, folder: Path,
              command: str = "") -> tuple[Probe | None, int]:
    """Train the probe into ``folder``/run and write ``folder``/probe.json. Returns the probe
    (None if the run stopped before measuring enough) and the training's exit code."""
    import math
    import time

    from date_engine.plan import resolve_plan
    from date_engine.runfolder import RunFolder
    from date_engine.train.config import RunConfig
    from date_engine.train.launch import LaunchOptions, launch

    batch = spec.baseline.batch_size
    micro = measuring_micro_batch(batch, options.nproc, options.micro_batch)
    planned = resolve_plan(spec, batch, options.nproc, micro, recipe)
    plan, split = planned.plan, planned.split
    steps = max(math.ceil(options.share * plan.total_iterations), 2 * options.points)
    run_dir = folder / "run"
    folder.mkdir(parents=True, exist_ok=True)
    config = RunConfig(
        spec=spec.model_dump(mode="json", exclude_none=True), spec_path=str(spec_path),
        recipe=recipe.name if ":" not in (spec.recipe or "") else spec.recipe, batch=batch,
        world_size=options.nproc, micro_batch=micro, output_dir=str(run_dir),
        max_steps=min(steps, plan.total_iterations),
        max_seconds=options.max_minutes * 60 if options.max_minutes else None,
        precision=spec.train.precision)
    began = time.perf_counter()
    code = launch(config, LaunchOptions(nproc=options.nproc))
    run = RunFolder(run_dir)
    summary = run.read_summary()
    points = probe_points(run.read_metrics(), options.points)
    usable = [p for p in points if p.noise_scale is not None]
    if code or summary is None or len({p.epoch for p in usable}) < 2:
        return None, code or 1
    probe = Probe(
        baseline=baseline_identity(spec, plan.dataset_size),
        baseline_epochs=plan.total_epochs, steps=summary.steps,
        baseline_steps=plan.total_iterations, epochs=plan.epoch(summary.steps),
        micro_batch=split.micro_batch, world_size=split.world_size,
        accumulation_steps=split.accumulation_steps,
        wall_seconds=round(summary.wall_time_s or (time.perf_counter() - began), 3),
        points=points, command=command, run_dir=str(run_dir))
    probe.write(folder / "probe.json")
    return probe, 0
