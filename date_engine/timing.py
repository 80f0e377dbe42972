"""What a run costs in wall-clock time: the step-time model ``date plan --devices N --bench`` reads.

``date bench`` measures, on the machine it runs on (bench.json, :class:`Bench`):

- the recipe's forward and backward pass of one micro-batch of b samples, fitted as
  T_c(b) = a + c·b over 2–3 micro-batch sizes;
- the optimizer's step over the whole model;
- an all-reduce of several sizes at P processes on the run's backend, fitted as a ring all-reduce
  T(N, bytes) = 2(N−1)·α + 2(N−1)/N · bytes/β (α the latency of one message, β the link's bytes
  per second), unless ``--link`` gives the fabric's numbers.

One optimizer step of a global batch B = micro × N × accumulation on N devices then takes

    T_step = accumulation · T_c(micro) + T_comm(N) + T_opt        (no overlap: the upper bound)
    T_step = max(accumulation · T_c(micro), T_comm(N)) + T_opt    (full overlap: the lower bound)

with T_comm the all-reduce of the gradient's bytes (DDP overlaps it with the backward pass). A run
is its steps' sum (a ramp's stages each at their own split); the baseline runs its I0 steps of B0
on B0/micro devices; the speedup is the baseline's time over the run's. Torch-free: ``date plan``
reads bench.json without importing torch.

Left out: data loading, evaluation and checkpoints, stragglers and contention, the collectives of
a sharded model (fsdp), and a compute time that changes with the device (the bench's is the
one device it ran on).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from date_engine.errors import DateError

if TYPE_CHECKING:
    from date_engine.runplan import BatchSplit, RunPlan

__all__ = ["FORMAT", "Bench", "Link", "StepTime", "TimeForecast", "allreduce_seconds",
           "fit_line", "forecast", "parse_link", "step_time"]

FORMAT = 1


@dataclass(frozen=True)
class Link:
    """A ring all-reduce's two numbers."""

    alpha: float
    """Seconds per message (latency)."""
    beta: float
    """Bytes per second (bandwidth)."""
    source: str = "measured"
    """``measured`` by ``date bench``, or ``--link`` (given by the user)."""


@dataclass(frozen=True)
class Bench:
    """bench.json: what ``date bench`` measured on one machine for one recipe."""

    recipe: str
    machine: str
    torch: str
    device: str
    backend: str
    processes: int
    """P: the processes the compute and the all-reduce were measured with."""
    threads: int
    """Threads each process computed with (the run's, at P processes)."""
    parameters: int
    gradient_bytes: int
    compute_fixed: float
    """a of T_c(b) = a + c·b: seconds of one micro-batch's forward and backward, the part that
    does not grow with b."""
    compute_per_sample: float
    """c: seconds per sample."""
    optimizer_seconds: float
    """One optimizer step over the whole model."""
    link: Link
    compute_points: tuple[tuple[int, float], ...] = ()
    """(micro-batch, median seconds) measured."""
    allreduce_points: tuple[tuple[int, float], ...] = ()
    """(bytes, median seconds) measured at P processes."""
    notes: tuple[str, ...] = field(default_factory=tuple)

    def check(self, path: Path, recipe: str | None, devices: int, link: Link | None) -> None:
        """Refuse, in one sentence, to forecast ``recipe`` on ``devices`` from this bench: one of
        another recipe, or (without ``link``) one that timed no all-reduce for several devices."""
        if recipe is not None and self.recipe != recipe:
            raise DateError(f"--bench {path}: it timed recipe {self.recipe}, not {recipe}; run "
                            "date bench on this spec.")
        if devices > 1 and link is None and self.link.source == "none":
            raise DateError(f"--bench {path}: date bench --nproc 1 timed no all-reduce, which "
                            f"{devices} devices need; run date bench --nproc 2, or give --link "
                            "BANDWIDTH,LATENCY.")

    def compute_seconds(self, micro: int) -> float:
        return self.compute_fixed + self.compute_per_sample * micro

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["format"] = FORMAT
        return data

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")

    @classmethod
    def read(cls, path: Path) -> Bench:
        """bench.json, or one sentence saying what is wrong with it."""
        try:
            data = json.loads(Path(path).read_text())
        except OSError as exc:
            raise DateError(f"{path}: cannot be read ({exc.strerror}); give the bench.json "
                            "`date bench SPEC -o FOLDER` wrote.") from None
        except ValueError:
            raise DateError(f"{path}: not JSON; give the bench.json `date bench SPEC -o FOLDER` "
                            "wrote.") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise DateError(f"{path}: not a bench.json of this version (format {FORMAT}); run "
                            "date bench again.")
        try:
            link = Link(**data.pop("link"))
            data.pop("format")
            bench = cls(link=link, **{k: tuple(map(tuple, v)) if k.endswith("_points") else
                                      tuple(v) if k == "notes" else v for k, v in data.items()})
        except (TypeError, KeyError, AttributeError) as exc:
            raise DateError(f"{path}: a field is missing or unknown ({exc}); run date bench "
                            "again.") from None
        numbers = (bench.compute_fixed, bench.compute_per_sample, bench.optimizer_seconds,
                   bench.link.alpha, bench.link.beta)
        if not all(isinstance(x, (int, float)) and math.isfinite(x) and x >= 0 for x in numbers) \
                or bench.link.beta <= 0:
            raise DateError(f"{path}: its times must be finite, non-negative numbers and β "
                            "positive; run date bench again.")
        return bench


def allreduce_seconds(link: Link, devices: int, size: int) -> float:
    """A ring all-reduce of ``size`` bytes over ``devices``: 2(N−1)·α + 2(N−1)/N · size/β (0 on
    one device)."""
    if devices <= 1:
        return 0.0
    return 2 * (devices - 1) * link.alpha + 2 * (devices - 1) / devices * size / link.beta


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the line through ``points`` (x, time) with the least relative error
    (each point weighted by 1/time²: a time spans orders of magnitude over the sizes, and a
    busy machine only ever adds to one); both ≥ 0 (a negative one, from noise, is set to 0 and
    the other refitted)."""
    ws = [1.0 / max(y, 1e-300) ** 2 for _, y in points]
    total = sum(ws)
    mx = sum(w * x for w, (x, _) in zip(ws, points)) / total
    my = sum(w * y for w, (_, y) in zip(ws, points)) / total
    sxx = sum(w * (x - mx) ** 2 for w, (x, _) in zip(ws, points))
    slope = sum(w * (x - mx) * (y - my) for w, (x, y) in zip(ws, points)) / sxx if sxx > 0 else 0.0
    intercept = my - slope * mx
    if slope < 0:
        return my, 0.0
    if intercept < 0:  # through the origin: the slope of least relative error
        return 0.0, sum(w * x * y for w, (x, y) in zip(ws, points)) / max(
            sum(w * x * x for w, (x, _) in zip(ws, points)), 1e-300)
    return intercept, slope


def link_from_points(points: list[tuple[int, float]], processes: int) -> Link:
    """α and β of a ring all-reduce from (bytes, seconds) measured at ``processes``."""
    intercept, slope = fit_line([(float(b), s) for b, s in points])
    hops = 2 * (processes - 1)
    beta = hops / processes / slope if slope > 0 else float("inf")
    return Link(intercept / hops, beta, "measured")


_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIMES = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def parse_link(text: str) -> Link:
    """``--link 25GB/s,5us``: the fabric's bandwidth (bytes per second, or Gbit/s as ``Gb/s``) and
    latency."""
    parts = [p.strip() for p in text.split(",")]
    match = re.fullmatch(r"([0-9.]+(?:e[-+]?\d+)?)\s*([kKmMgGtT]?)([bB])/s", parts[0]) \
        if len(parts) == 2 else None
    latency = re.fullmatch(r"([0-9.]+(?:e[-+]?\d+)?)\s*(s|ms|us|µs|ns)", parts[1]) \
        if len(parts) == 2 else None
    if not match or not latency:
        raise DateError(f"--link: {text!r} is not BANDWIDTH,LATENCY; write e.g. 25GB/s,5us "
                        "(GB/s bytes, Gb/s bits; latency in s, ms, us or ns).")
    beta = float(match.group(1)) * _UNITS[match.group(2).lower()]
    beta = beta / 8 if match.group(3) == "b" else beta
    alpha = float(latency.group(1)) * _TIMES[latency.group(2)]
    if beta <= 0:
        raise DateError(f"--link: the bandwidth of {text!r} must be positive.")
    return Link(alpha, beta, "--link")


@dataclass(frozen=True)
class StepTime:
    """One optimizer step of a split on its devices, in seconds."""

    compute: float
    """accumulation · T_c(micro)."""
    communication: float
    """The all-reduce of the gradient."""
    optimizer: float
    no_overlap: float
    """compute + communication + optimizer: the upper bound."""
    overlap: float
    """max(compute, communication) + optimizer: the lower bound."""


def step_time(bench: Bench, split: BatchSplit, link: Link | None = None) -> StepTime:
    compute = split.accumulation_steps * bench.compute_seconds(split.micro_batch)
    comm = allreduce_seconds(link or bench.link, split.world_size, bench.gradient_bytes)
    opt = bench.optimizer_seconds
    return StepTime(compute, comm, opt, compute + comm + opt, max(compute, comm) + opt)


@dataclass(frozen=True)
class TimeForecast:
    """The run's time on its devices beside the baseline's on its own."""

    devices: int
    step: StepTime
    """One step at the target batch."""
    steps: int
    run_seconds: float
    """The whole run, no overlap (a ramp: each stage at its own batch)."""
    run_seconds_overlap: float
    baseline_devices: int
    baseline_step: StepTime
    baseline_steps: int
    baseline_seconds: float
    speedup: float
    """baseline_seconds / run_seconds (both without overlap)."""
    link: Link

    def to_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "step_seconds": self.step.no_overlap,
                "step_seconds_overlap": self.step.overlap, "step": asdict(self.step),
                "steps": self.steps, "run_seconds": self.run_seconds,
                "run_seconds_overlap": self.run_seconds_overlap,
                "baseline": {"devices": self.baseline_devices, "steps": self.baseline_steps,
                             "step_seconds": self.baseline_step.no_overlap,
                             "seconds": self.baseline_seconds},
                "speedup": self.speedup, "link": asdict(self.link)}


def forecast(bench: Bench, planned: RunPlan, baseline_devices: int | None = None,
             link: Link | None = None) -> TimeForecast:
    """The time of ``planned`` (its split's devices) and of its baseline on ``baseline_devices``
    (default: B0 / the run's micro-batch, the baseline's batch on devices as full as the run's)."""
    from date_engine.runplan import largest_divisor, split_batch

    plan, split = planned.plan, planned.split
    link = link or bench.link
    total = overlap = 0.0
    step = 1
    while step <= plan.total_iterations:  # a ramp: each stage at its own split
        stage = plan.stage_at(step)
        last = stage.last_step if stage is not None else plan.total_iterations
        last = min(last, plan.total_iterations)
        t = step_time(bench, planned.split_at(step), link)
        total += (last - step + 1) * t.no_overlap
        overlap += (last - step + 1) * t.overlap
        step = last + 1
    b0 = plan.baseline_batch
    micro = min(split.micro_batch, b0)
    n0 = baseline_devices or max(1, b0 // micro)
    base_split = split_batch(b0, n0, largest_divisor(b0 // n0, micro))
    base_step = step_time(bench, base_split, link)
    base_seconds = plan.baseline_iterations * base_step.no_overlap
    return TimeForecast(split.world_size, step_time(bench, split, link), plan.total_iterations,
                        total, overlap, n0, base_step, plan.baseline_iterations, base_seconds,
                        base_seconds / total if total > 0 else float("inf"), link)
