"""What a run costs in wall-clock time: the step-time model ``date plan --devices N --bench`` reads.

``date bench`` measures, on the machine it runs on (bench.json, :class:`Bench`):

- the recipe's forward and backward pass of one micro-batch of b samples at several sizes (by
  default the recipe's micro-batch m and m/2 … m/16): T_c(b) between two measured sizes is the
  line through them, beyond them the line T_c(b) = a + c·b fitted to all;
- the optimizer's step over the whole model;
- an all-reduce of several sizes at P processes on the run's backend, fitted as a ring all-reduce
  T(N, bytes) = 2(N−1)·α + 2(N−1)/N · bytes/β (α the latency of one message, β the link's bytes
  per second), unless ``--link`` gives the fabric's numbers.

One optimizer step of a global batch B = micro × N × accumulation on N devices then takes

    T_step = accum · T_c(micro) + T_comm(N) + T_sync + T_opt + T_host        (no overlap)
    T_step = max(accum · T_c(micro), T_comm(N)) + T_sync + T_opt + T_host    (full overlap)

with T_host(micro) the trainer's own work of a step beside its pass and optimizer step (the LR set,
the noise-scale hooks, the gradient norm, the state check, the agreement, clearing the gradients:
the bench's whole step less both), and T_sync(micro) (N > 1) what that whole step under DDP at P
processes took beyond the local one and the modelled all-reduce: the wait for the slower process
and the collectives' host costs, held constant in N (stragglers grow with N: a lower bound there).

with T_comm the all-reduce of the gradient's bytes (DDP overlaps it with the backward pass). A
sharded model (``train.parallel: fsdp``) instead gathers its parameters before every micro-batch's
forward and again before its backward, and reduce-scatters the gradient once a step, each a ring
collective of (N−1)·α + (N−1)/N · bytes/β:

    T_comm = accumulation · 2 · AG(parameter bytes) + RS(gradient bytes) [+ 2(N−1)·α: the layer
             norms' all-reduce where the step needs them]

Under fsdp a bench at P ≥ 2 processes also times the trainer's whole step on the model sharded
over them: T_opt is then the sharded step's (the shards' multi-tensor step, slower than the whole
model's fused one on a CPU), and T_sync the sharding's own cost per micro-batch — what the sharded
step took beyond its plain pass, the modelled collectives, that optimizer step and T_host: FSDP2's
gathers unit by unit (a latency each), its hooks and waits. Both are held constant in N. A bench
without it (one process, or older) falls back to the whole-model step and DDP's T_sync.

A run is its steps' sum (a ramp's stages each at their own split); the baseline runs its I0 steps of
B0 on B0/micro devices; the speedup is the baseline's time over the run's. Torch-free: ``date plan``
reads bench.json without importing torch.

Left out: data loading, evaluation and checkpoints, stragglers and contention, and a compute time
that changes with the device (the bench's is the one device it ran on).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from date_engine.errors import DateError
from date_engine.files import read_small_text

if TYPE_CHECKING:
    from date_engine.runplan import BatchSplit, RunPlan

__all__ = ["FORMAT", "Bench", "Link", "MemoryFit", "StepTime", "TimeForecast", "allreduce_seconds",
           "fit_line", "fit_memory", "forecast", "gather_seconds", "parse_link", "parse_memory",
           "sharded_comm_seconds", "step_time"]

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
    wait_points: tuple[tuple[int, float], ...] = ()
    """(micro-batch, seconds) a synchronised pass at P processes took beyond its compute and the
    modelled all-reduce (waiting for the slower process, the collectives' host costs): the run's
    pass (DDP, then the step's all-reduce of flags) timed beside the plain one."""
    memory_points: tuple[tuple[int, float], ...] = ()
    """(micro-batch, peak bytes) of a forward and backward pass, the model, its gradients and the
    optimizer's state in memory: the CUDA allocator's peak, or on a CPU the process's peak
    resident memory (empty in a bench.json written before 0.9)."""
    model_bytes: int = 0
    """The parameters' bytes (the gradients hold as many)."""
    state_bytes: int = 0
    """The optimizer's state: moments, DATE's per-layer buffers."""
    memory_source: str = ""
    """What ``memory_points`` measured: ``cuda allocator`` or ``cpu resident``."""
    host_points: tuple[tuple[int, float], ...] = ()
    """(micro-batch, seconds) of the host work a step of the run adds to its pass and optimizer
    step (the LR set, the noise-scale hooks, the gradient norm, the state check, the agreement,
    the gradients cleared): the trainer's whole step timed, less both (empty before 0.9)."""
    sharded_optimizer_seconds: float = 0.0
    """One optimizer step of the model sharded over the bench's P processes (fsdp): the shards'
    multi-tensor step and the layer norms' all-reduce (0: not measured, one process)."""
    shard_points: tuple[tuple[int, float], ...] = ()
    """(micro-batch, seconds) the trainer's whole step under fsdp at P processes took beyond the
    plain pass, the modelled gathers and reduce-scatter, the sharded optimizer step and the host
    work: FSDP2's per-unit gathers, hooks and waits (empty at one process, and in a bench.json
    written before the bench timed it)."""

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
        """T_c(micro): between two measured sizes, the straight line through them (a pass's time
        bends where its activations outgrow a cache, and a global line would miss the bend);
        outside the measured sizes, the fitted a + c·b."""
        return _between(self.compute_points, micro,
                        lambda: self.compute_fixed + self.compute_per_sample * micro)

    def wait_seconds(self, micro: int) -> float:
        """T_sync(micro), a synchronised step's wait (0 without a measurement)."""
        return _differences_at(self.wait_points, micro)

    def shard_seconds(self, micro: int) -> float:
        """A pass's sharding overhead under fsdp (0 without a measurement)."""
        return _differences_at(self.shard_points, micro)

    def host_seconds(self, micro: int) -> float:
        """T_host(micro), a step's host work (0 without a measurement)."""
        return _differences_at(self.host_points, micro)

    def memory_bytes(self, micro: int, devices: int = 1, sharded: bool = False) -> float:
        """A process's peak bytes at ``micro`` samples per pass: between two measured sizes the
        line through them, beyond them the line fitted to all; under fsdp on ``devices`` the
        parameters, gradients and optimizer state divided among them (the activations not)."""
        a, c = fit_line([(float(m), b) for m, b in self.memory_points])
        peak = _between(self.memory_points, micro, lambda: a + c * micro)
        if sharded and devices > 1:
            held = 2 * self.model_bytes + self.state_bytes
            peak -= held * (1 - 1 / devices)
        return peak

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
        text = read_small_text(path, "bench", "give the bench.json `date bench SPEC -o FOLDER` "
                               "wrote")
        try:
            data = json.loads(text)
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
        points = (*bench.compute_points, *bench.allreduce_points, *bench.wait_points,
                  *bench.host_points, *bench.shard_points, *bench.memory_points)
        if not all(len(point) == 2 for point in points):
            raise DateError(f"{path}: every measured point must be a pair (size, seconds); run "
                            "date bench again.")
        numbers = (bench.compute_fixed, bench.compute_per_sample, bench.optimizer_seconds,
                   bench.sharded_optimizer_seconds, bench.link.alpha, bench.link.beta,
                   bench.model_bytes, bench.state_bytes, *(x for point in points for x in point))
        seconds = (bench.compute_fixed, bench.compute_per_sample, bench.optimizer_seconds,
                   bench.sharded_optimizer_seconds, bench.link.alpha,
                   *(s for _, s in points[:len(points)
                                                              - len(bench.memory_points)]))
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                   and x >= 0 for x in numbers) or bench.link.beta <= 0 \
                or max(seconds) > MAX_SECONDS:
            raise DateError(f"{path}: its sizes and times must be finite, non-negative numbers, "
                            "no time above a day and β positive; run date bench again.")
        return bench


def _differences_at(points, micro: int) -> float:
    """A time the bench got as a difference of two medians (0 without points): between two
    measured sizes the line through them, beyond them the nearest one's (too noisy to extend a
    slope from)."""
    if not points:
        return 0.0
    first, last = min(points), max(points)
    return _between(points, micro, lambda: first[1] if micro < first[0] else last[1])


def _between(points, x: float, beyond) -> float:
    """The line through the two of ``points`` (x, y) either side of ``x``; ``beyond()`` outside
    them."""
    points = sorted(points)
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return beyond()


def allreduce_seconds(link: Link, devices: int, size: int) -> float:
    """A ring all-reduce of ``size`` bytes over ``devices``: 2(N−1)·α + 2(N−1)/N · size/β (0 on
    one device)."""
    if devices <= 1:
        return 0.0
    return 2 * (devices - 1) * link.alpha + 2 * (devices - 1) / devices * size / link.beta


def _relative(points: list[tuple[float, float]]) -> list[float]:
    """Weights of least relative error: 1/time² per point."""
    return [1.0 / max(y, 1e-300) ** 2 for _, y in points]


def _weighted_line(points: list[tuple[float, float]], ws: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the weighted least-squares line through ``points``, unclamped."""
    total = sum(ws)
    mx = sum(w * x for w, (x, _) in zip(ws, points)) / total
    my = sum(w * y for w, (_, y) in zip(ws, points)) / total
    sxx = sum(w * (x - mx) ** 2 for w, (x, _) in zip(ws, points))
    slope = sum(w * (x - mx) * (y - my) for w, (x, y) in zip(ws, points)) / sxx if sxx > 0 else 0.0
    return my - slope * mx, slope


def fit_line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the line through ``points`` (x, time) with the least relative error
    (each point weighted by 1/time²: a time spans orders of magnitude over the sizes, and a
    busy machine only ever adds to one); both ≥ 0 (a negative one, from noise, is set to 0 and
    the other refitted)."""
    ws = _relative(points)
    intercept, slope = _weighted_line(points, ws)
    if slope < 0:
        return sum(w * y for w, (_, y) in zip(ws, points)) / sum(ws), 0.0
    if intercept < 0:  # through the origin: the slope of least relative error
        return 0.0, sum(w * x * y for w, (x, y) in zip(ws, points)) / max(
            sum(w * x * x for w, (x, _) in zip(ws, points)), 1e-300)
    return intercept, slope


def link_from_points(points: list[tuple[int, float]], processes: int) -> Link:
    """α and β of a ring all-reduce from (bytes, seconds) measured at ``processes``, each from
    the sizes where it is the cost: β from the least-squares slope over every size (absolute
    error, so the large sizes, where the bandwidth is the time, decide it), then α as the
    intercept of least relative error under that slope (the small sizes, where the latency is).
    One line of least relative error for both let the small sizes set the slope too: over four
    benches of the same two processes its β spread over 1.17–1.75 GB/s and its forecast of a 3
    MiB all-reduce over 2.35–3.30 ms, this one's over 1.27–1.38 GB/s and 2.92–3.10 ms
    (docs/performance.md)."""
    pairs = [(float(b), s) for b, s in points]
    slope = max(0.0, _weighted_line(pairs, [1.0] * len(pairs))[1])
    ws = _relative(pairs)
    intercept = max(0.0, sum(w * (s - slope * b) for w, (b, s) in zip(ws, pairs)) / sum(ws))
    hops = 2 * (processes - 1)
    beta = hops / processes / slope if slope > 0 else float("inf")
    return Link(intercept / hops, beta, "measured")


_UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_TIMES = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


@dataclass(frozen=True)
class MemoryFit:
    """``date plan --device-memory``: the largest micro-batch whose pass fits a device."""

    device_bytes: float
    micro_batch: int | None
    """None: not even one sample per pass fits."""
    accumulation_steps: int | None
    need_bytes: float
    """A process's peak at ``micro_batch`` (at 1 sample where nothing fits)."""
    held_bytes: float
    """Of it: the parameters, gradients and optimizer state a process holds (÷ N under fsdp)."""
    source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_memory(bench: Bench, run: RunPlan, device_bytes: float) -> MemoryFit:
    """The largest of the halvings of a device's share of the batch (what ``train.micro_batch:
    auto`` tries) whose pass fits ``device_bytes``, from the bench's measured peaks."""
    from date_engine.runplan import halvings

    split = run.split
    if not bench.memory_points:
        raise DateError("--device-memory: this bench.json measured no memory (written before "
                        "0.9); run date bench again.")
    share, n = split.batch // split.world_size, split.world_size
    held = (2 * bench.model_bytes + bench.state_bytes) / (n if split.sharded else 1)
    for micro in halvings(share):
        need = bench.memory_bytes(micro, n, split.sharded)
        if need <= device_bytes:
            return MemoryFit(device_bytes, micro, share // micro, need, held,
                             bench.memory_source)
    return MemoryFit(device_bytes, None, None, bench.memory_bytes(1, n, split.sharded), held,
                     bench.memory_source)


_BYTES = {"": 1, "b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12, "kib": 2**10,
          "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_memory(text: str) -> float:
    """``--device-memory 80GiB``: bytes (B, kB, MB, GB, TB; KiB, MiB, GiB, TiB)."""
    match = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    if unit not in _BYTES:
        raise DateError(f"--device-memory: {text!r} is not a size; write e.g. 80GiB or 40GB.")
    value = float(match.group(1)) * _BYTES[unit]
    if not 0 < value <= 2**50:
        raise DateError(f"--device-memory: {text!r} is beyond any device (above 0, at most "
                        "1 PiB).")
    return value


MAX_SECONDS = 86_400.0
"""No measured time of a bench (a pass, a step, a message's latency) is above a day."""
MAX_BANDWIDTH = 1e15
"""1 PB/s: above any fabric's bandwidth, in bytes per second."""


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
    if not 0 < beta <= MAX_BANDWIDTH or not alpha <= MAX_SECONDS:
        raise DateError(f"--link: {text!r} is beyond any fabric (bandwidth above 0 and at most "
                        "1 PB/s, latency at most a day); give the link's measured values.")
    return Link(alpha, beta, "--link")


@dataclass(frozen=True)
class StepTime:
    """One optimizer step of a split on its devices, in seconds."""

    compute: float
    """accumulation · T_c(micro)."""
    communication: float
    """The all-reduce of the gradient (fsdp: the gathers and the reduce-scatter)."""
    optimizer: float
    no_overlap: float
    """compute + communication + synchronisation + optimizer: the upper bound."""
    overlap: float
    """max(compute, communication) + synchronisation + optimizer: the lower bound."""
    synchronisation: float = 0.0
    """The bench's wait of a synchronised step at the micro-batch, on more than one device."""
    host: float = 0.0
    """The bench's host work of a step at the micro-batch (the trainer's own, beside the pass)."""


def gather_seconds(link: Link, devices: int, size: int) -> float:
    """A ring all-gather (or reduce-scatter) of ``size`` bytes in all over ``devices``: (N−1)·α +
    (N−1)/N · size/β, half an all-reduce (0 on one device)."""
    return allreduce_seconds(link, devices, size) / 2


def sharded_comm_seconds(link: Link, devices: int, gather_bytes: int, gradient_bytes: int,
                         accumulation: int = 1, layer_norms: bool = False) -> float:
    """fsdp's collectives of a step: every micro-batch gathers the parameters twice (forward and
    backward), the step reduce-scatters the gradient once, and with ``layer_norms`` all-reduces
    every layer's norms (0 on one device)."""
    if devices < 2:
        return 0.0
    return (2 * accumulation * gather_seconds(link, devices, gather_bytes)
            + gather_seconds(link, devices, gradient_bytes)
            + (allreduce_seconds(link, devices, 0) if layer_norms else 0.0))


def step_time(bench: Bench, split: BatchSplit, link: Link | None = None, *,
              gather_bytes: int | None = None, layer_norms: bool = False) -> StepTime:
    """One step of ``split``; sharded (fsdp), with parameters gathered at ``gather_bytes`` (the
    compute dtype's; default the gradient's fp32 bytes) and, with ``layer_norms``, the all-reduce
    of every layer's norms. Under fsdp a bench that timed the sharded step gives its optimizer
    step and, per micro-batch, its sharding overhead (in ``synchronisation``)."""
    link = link or bench.link
    n, accumulation = split.world_size, split.accumulation_steps
    compute = accumulation * bench.compute_seconds(split.micro_batch)
    opt = bench.optimizer_seconds
    wait = bench.wait_seconds(split.micro_batch) if n > 1 else 0.0
    if split.sharded and n > 1:
        gathered = bench.gradient_bytes if gather_bytes is None else gather_bytes
        measured = bool(bench.shard_points)  # its optimizer step holds the norms' all-reduce
        comm = sharded_comm_seconds(link, n, gathered, bench.gradient_bytes, accumulation,
                                    layer_norms and not measured)
        if measured:
            opt = bench.sharded_optimizer_seconds
            wait = accumulation * bench.shard_seconds(split.micro_batch)
    else:
        comm = allreduce_seconds(link, n, bench.gradient_bytes)
    host = bench.host_seconds(split.micro_batch)
    return StepTime(compute, comm, opt, compute + comm + wait + opt + host,
                    max(compute, comm) + wait + opt + host, wait, host)


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
    parallel: str = "ddp"
    """The split's ``train.parallel``: fsdp's communication is gathers and a reduce-scatter."""

    def to_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "parallel": self.parallel,
                "step_seconds": self.step.no_overlap,
                "step_seconds_overlap": self.step.overlap, "step": asdict(self.step),
                "steps": self.steps, "run_seconds": self.run_seconds,
                "run_seconds_overlap": self.run_seconds_overlap,
                "baseline": {"devices": self.baseline_devices, "steps": self.baseline_steps,
                             "step_seconds": self.baseline_step.no_overlap,
                             "seconds": self.baseline_seconds},
                "speedup": self.speedup, "link": asdict(self.link)}


def forecast(bench: Bench, run: RunPlan, baseline_devices: int | None = None,
             link: Link | None = None, precision: str = "fp32") -> TimeForecast:
    """The time of ``run`` (its split's devices) and of its baseline on ``baseline_devices``
    (default: B0 / the run's micro-batch, the baseline's batch on devices as full as the run's),
    the baseline replicated as the run is (a sharded run's baseline sharded too); ``precision``
    the run's (a sharded bf16/fp16 run gathers half the bytes)."""
    from date_engine.runplan import largest_divisor, split_batch

    plan, split = run.plan, run.split
    link = link or bench.link
    sharded = {"gather_bytes": bench.gradient_bytes // 2 if precision in ("bf16", "fp16")
               else bench.gradient_bytes, "layer_norms": run.sharding().layer_norms}
    total = overlap = 0.0
    step = 1
    while step <= plan.total_iterations:  # a ramp: each stage at its own split
        stage = plan.stage_at(step)
        last = stage.last_step if stage is not None else plan.total_iterations
        last = min(last, plan.total_iterations)
        t = step_time(bench, run.split_at(step), link, **sharded)
        total += (last - step + 1) * t.no_overlap
        overlap += (last - step + 1) * t.overlap
        step = last + 1
    b0 = plan.baseline_batch
    micro = min(split.micro_batch, b0)
    n0 = baseline_devices or max(1, b0 // micro)
    base_split = replace(split_batch(b0, n0, largest_divisor(b0 // n0, micro)),
                         parallel=split.parallel)
    base_step = step_time(bench, base_split, link, **sharded)
    base_seconds = plan.baseline_iterations * base_step.no_overlap
    return TimeForecast(split.world_size, step_time(bench, split, link, **sharded),
                        plan.total_iterations,
                        total, overlap, n0, base_step, plan.baseline_iterations, base_seconds,
                        base_seconds / total if total > 0 else float("inf"), link,
                        split.parallel)
