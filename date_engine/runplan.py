"""A run's plan and the split of its batch: what ``date plan`` prints, ``date scale`` trains and
every ``date sweep`` cell runs.

:func:`~date_engine.planning.plan_for` derives a run's plan and splits its global batch with
:func:`split_batch` (micro-batch × processes × accumulation steps). The :class:`RunPlan` it returns
answers every step-dependent question of a run (the split of a step's batch, the samples through a
step, the stream each process reads, the last step), and :meth:`RunPlan.dry_run` steps the same plan
with a tiny split, so the trainer has no dry-run branch in its step logic. Torch-free, like the
plan.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, NamedTuple

from date_engine.catalog import entry, state_tensors, step_path
from date_engine.errors import PlanError, named
from date_engine.plan import BatchStage, Plan, positive_int

__all__ = [
    "BatchSplit",
    "RunPlan",
    "Sharding",
    "halvings",
    "largest_divisor",
    "plan_of",
    "split_batch",
    "stage_split",
]


@dataclass(frozen=True)
class BatchSplit:
    """How a global batch is computed: micro_batch samples per pass, world_size processes,
    accumulation_steps passes per optimizer step, exactly."""

    micro_batch: int
    """Samples per process per forward/backward pass."""
    world_size: int
    """Processes (data-parallel replicas)."""
    accumulation_steps: int
    """Micro-batches accumulated per optimizer step in each process."""
    parallel: str = "ddp"
    """How the processes hold the model (``train.parallel``): ``ddp`` replicas or ``fsdp``
    shards."""

    @property
    def batch(self) -> int:
        """The global batch: micro_batch × world_size × accumulation_steps."""
        return self.micro_batch * self.world_size * self.accumulation_steps

    @property
    def sharded(self) -> bool:
        """The processes shard the model (fsdp) instead of replicating it."""
        return self.parallel == "fsdp"

    @property
    def samples_per_process(self) -> int:
        """Samples each process reads per optimizer step."""
        return self.micro_batch * self.accumulation_steps

    def to_dict(self) -> dict[str, Any]:
        """The split's fields; ``parallel`` only when the model is sharded (absent, it is ddp, as
        in the plans of versions before it)."""
        data = asdict(self)
        if self.parallel == "ddp":
            del data["parallel"]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> BatchSplit:
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Sharding:
    """How the processes hold the model (``train.parallel``): ``ddp`` replicates parameters,
    gradients and optimizer state on every process; ``fsdp`` shards all three over the processes
    (torch's FSDP2), each process holding 1/N of each and gathering a unit's parameters only while
    it computes. Bytes are of fp32 master weights, gradients and optimizer state."""

    mode: str = "ddp"
    world_size: int = 1
    parameters: int | None = None
    """The model's parameter count P, where known (counted on the meta device); else None."""
    state_tensors: int = 0
    """The optimizer's tensors of a parameter's shape per parameter (the catalog's count)."""
    layer_norms: bool = False
    """Whether the step needs every layer's norms (DATE's ratios, LARS, LAMB)."""

    @property
    def sharded(self) -> bool:
        return self.mode == "fsdp"

    def bytes_per_process(self) -> dict[str, int] | None:
        """Bytes each process holds of the parameters, gradients and optimizer state (fp32), or
        None without a parameter count."""
        if self.parameters is None:
            return None
        share = -(-self.parameters // self.world_size) if self.sharded else self.parameters
        return {"parameters": 4 * share, "gradients": 4 * share,
                "optimizer_state": 4 * share * self.state_tensors}

    def collectives(self) -> str:
        """The collectives of one optimizer step, in words."""
        if self.world_size == 1:
            return "none (one process)"
        if not self.sharded:
            return "one all-reduce of the gradients (bucketed by DDP), overlapped with backward"
        norms = ("; one all-reduce of every layer's squared norms (the per-layer ratios)"
                 if self.layer_norms else "")
        return ("per sharding unit, an all-gather of its parameters before forward and again "
                f"before backward, and a reduce-scatter of its gradients{norms}")

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "parameters": self.parameters,
                "bytes_per_process": self.bytes_per_process(), "collectives": self.collectives()}


def largest_divisor(n: int, at_most: int) -> int:
    """The largest d ≤ ``at_most`` that divides ``n`` (1 when n or at_most is below 1): the
    micro-batch that splits a share of ``n`` samples into whole passes of at most ``at_most``."""
    return next((d for d in range(max(min(n, at_most), 1), 0, -1) if n % d == 0), 1)


def split_batch(batch: int, world_size: int, micro_batch: int | None) -> BatchSplit:
    """Split ``batch`` over ``world_size`` processes with ``micro_batch`` samples per pass (by
    default a process's whole share): ``batch == micro × world × accumulation`` exactly, or a
    :class:`PlanError` naming values that would work."""
    world_size = positive_int(named("devices", "--nproc"), world_size)
    if micro_batch is not None:
        micro_batch = positive_int(named("micro_batch", "--micro-batch"), micro_batch)
    if world_size > batch:
        raise PlanError(f"batch {batch} over {world_size} processes leaves processes without a "
                        f"sample; use {named('devices', '--nproc', batch)} or fewer (each "
                        "process trains at least one sample per step).")
    if batch % world_size:
        sizes = [d for d in _divisors(batch) if d <= max(2 * world_size, 8)]
        lower, upper = (batch // world_size) * world_size, -(-batch // world_size) * world_size
        raise PlanError(
            f"batch {batch} does not divide evenly over {world_size} processes; use a batch of "
            f"{_either(lower, upper)}, or {named('devices', '--nproc')} {_list(sizes)}."
        )
    per_process = batch // world_size
    if micro_batch is None:
        return BatchSplit(per_process, world_size, 1)
    if micro_batch > per_process:
        raise PlanError(
            f"micro-batch {micro_batch} is larger than each process's share of the batch "
            f"({batch} / {world_size} = {per_process}); use "
            f"{named('micro_batch', '--micro-batch', per_process)} or less."
        )
    if per_process % micro_batch:
        below = largest_divisor(per_process, micro_batch)
        above = min(d for d in _divisors(per_process) if d >= micro_batch)
        options = sorted({below, above})
        raise PlanError(
            f"batch {batch} cannot be split as micro-batch {micro_batch} × {world_size} "
            f"processes × whole accumulation steps ({per_process} per process is not a multiple "
            f"of {micro_batch}); micro-batches that work: "
            + ", ".join(f"{m} ({per_process // m} accumulation steps)" for m in options)
            + "."
        )
    return BatchSplit(micro_batch, world_size, per_process // micro_batch)


def stage_split(split: BatchSplit, batch: int, gradients: int = 1) -> BatchSplit:
    """The split of a ramp stage's global ``batch`` in a run split as ``split``: the same
    processes, and micro-batches no larger than the run's (the largest divisor of each process's
    share not above it), the rest accumulation; with at least ``gradients`` micro-batch gradients
    per step (processes × accumulation) where the share allows it."""
    share = batch // split.world_size
    most = min(split.micro_batch, max(1, batch // gradients))  # world · share/micro ≥ gradients
    micro = largest_divisor(share, most)
    return BatchSplit(micro, split.world_size, share // micro, split.parallel)


# ------------------------------------------------------------------------------ the one resolver

# A dry run keeps the plan and replaces its batch split: 2 samples per pass, 2 passes per step,
# 2 optimizer steps.
DRY_RUN_MICRO_BATCH, DRY_RUN_ACCUMULATION, DRY_RUN_STEPS = 2, 2, 2


class RunPlan(NamedTuple):
    """What a run trains with: the plan, and beside it the split of its global batch.

    A dry run (:meth:`dry_run`) steps the same plan with a tiny split and records the run's own."""

    plan: Plan
    split: BatchSplit

    dry_steps = None
    """A dry run's length (:meth:`dry_run`): that many steps of ``step_split`` under the same
    plan."""

    @property
    def step_split(self) -> BatchSplit:
        """The split the steps are taken with: ``split``, or a dry run's tiny one (a ramp's stages
        take their own: :meth:`split_at`)."""
        return self.split

    def dry_run(self) -> RunPlan:
        """The dry run of this run: the plan and its record unchanged, DRY_RUN_STEPS optimizer
        steps of DRY_RUN_MICRO_BATCH samples × the same processes × DRY_RUN_ACCUMULATION
        passes."""
        return _DryRun(self.plan, self.split)

    def with_micro_batch(self, micro_batch: int) -> RunPlan:
        """This run with its global batch split into ``micro_batch`` samples per pass (the plan
        unchanged): what ``train.micro_batch: auto`` chose."""
        split = split_batch(self.plan.target_batch, self.split.world_size, micro_batch)
        return RunPlan(self.plan, replace(split, parallel=self.split.parallel))

    def sharding(self, parameters: int | None = None) -> Sharding:
        """How the processes hold the model, with the bytes each holds for a model of
        ``parameters`` parameters (the recipe's count) and the collectives of a step."""
        opt = self.plan.optimizer
        layer_norms = opt.layer_ratio["mode"] != "off" or entry(opt.name).family == "layerwise"
        return Sharding(self.split.parallel, self.split.world_size, parameters,
                        state_tensors(opt.name, opt.options), layer_norms)

    @property
    def last_step(self) -> int:
        """The run's last optimizer step (a measured ramp's moves change it)."""
        return self.plan.total_iterations if self.dry_steps is None else self.dry_steps

    @property
    def follows_noise(self) -> bool:
        """A measured batch ramp: the run moves up as its own noise scale says (a dry run
        steps with its one split)."""
        return bool(self.plan.ramp) and self.plan.ramp_mode == "measured" \
            and self.dry_steps is None

    def split_at(self, step: int) -> BatchSplit:
        """The split of optimizer step ``step``'s batch: ``split``, or its ramp stage's."""
        stage = self.plan.stage_at(step)
        if self.dry_steps is not None or stage is None or stage.batch == self.split.batch:
            return self.step_split
        measured = self.plan.ramp_mode == "measured"  # its stages measure the noise scale
        return stage_split(self.split, stage.batch, 2 if measured else 1)

    def stage_starting(self, step: int) -> BatchStage | None:
        """The ramp stage whose batch optimizer step ``step`` is the first of (none at step 1,
        in a dry run, or without a ramp)."""
        stage = self.plan.stage_at(step)
        if self.dry_steps is None and stage is not None and step == stage.first_step > 1:
            return stage
        return None

    def samples_through(self, step: int) -> int:
        """Global samples trained on by the end of optimizer step ``step``."""
        if self.dry_steps is not None:
            return step * self.step_split.batch
        return int(self.plan.samples_through(step))

    def steps_within(self, samples: int) -> int:
        """The most optimizer steps of this plan that train on no more than ``samples``."""
        if self.dry_steps is not None:
            return min(samples // self.step_split.batch, self.plan.total_iterations)
        return self.plan.steps_within(samples)

    def stream(self, start: int, stop_at: int) -> list[tuple[int, int]]:
        """(micro-batch, how many) a process reads, in order, for steps start+1 .. stop_at: one
        entry, or one per batch ramp stage those steps touch."""
        if self.dry_steps is not None:
            split = self.step_split
            return [(split.micro_batch, (stop_at - start) * split.accumulation_steps)]
        sizes, step = [], start + 1
        while step <= stop_at:
            split, stage = self.split_at(step), self.plan.stage_at(step)
            last = min(stop_at, stage.last_step) if stage is not None else stop_at
            sizes.append((split.micro_batch, (last - step + 1) * split.accumulation_steps))
            step = last + 1
        return sizes

    def to_dict(self) -> dict[str, Any]:
        """The run's plan as one JSON object: what ``date plan --json`` prints and ``plan.json``
        holds (with a ramp, each stage's split as ``stage_splits``); a dry run's is its run's."""
        data = {**self.plan.to_dict(), **self.split.to_dict()}
        if self.plan.ramp:
            whole = RunPlan(self.plan, self.split)  # a dry run's record: the stages' own splits
            data["stage_splits"] = [whole.split_at(st.first_step).to_dict()
                                    for st in self.plan.ramp]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunPlan:
        return cls(Plan.from_dict(data), BatchSplit.from_dict(data))

    def document(self, parameters: int | None = None) -> dict[str, Any]:
        """What ``date plan --json`` and ``date scale --json`` print: :meth:`to_dict`; as
        ``step``, how the optimizer step runs (the catalog's word, not a derived number); as
        ``sharding``, how the processes hold a model of ``parameters`` parameters."""
        opt = self.plan.optimizer
        path, how = step_path(opt.name, opt.options, opt.layer_ratio["mode"])
        return {**self.to_dict(), "step": {"path": path, "how": how},
                "sharding": self.sharding(parameters).to_dict()}


class _DryRun(RunPlan):
    """A run stepped as a dry run: a tiny split at every step, for DRY_RUN_STEPS steps; its
    ``split`` and record stay the run's."""

    __slots__ = ()
    dry_steps = DRY_RUN_STEPS

    @property
    def step_split(self) -> BatchSplit:
        return BatchSplit(DRY_RUN_MICRO_BATCH, self.split.world_size, DRY_RUN_ACCUMULATION,
                          self.split.parallel)


def plan_of(run: Any, caller: str) -> Plan:
    """The Plan of ``run`` (a RunPlan, or a Plan itself), or a DateError naming ``caller``'s
    argument."""
    from date_engine.errors import expect

    expect(run, (RunPlan, Plan), f"{caller}: run", "a RunPlan (plan_for(...))")
    return run.plan if isinstance(run, RunPlan) else run


def halvings(share: int) -> list[int]:
    """The micro-batches ``train.micro_batch: auto`` tries, largest first: ``share`` (a process's
    samples per step), then the largest divisor of it at or below half the last, down to 1; each
    splits the share into whole accumulation steps."""
    sizes = [share]
    while sizes[-1] > 1:
        sizes.append(largest_divisor(share, sizes[-1] // 2))
    return sizes


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _either(a: int, b: int) -> str:
    return str(a) if a == b else (str(b) if a == 0 else f"{a} or {b}")


def _list(values: list[int]) -> str:
    return (
        ", ".join(map(str, values[:-1])) + f" or {values[-1]}"
        if len(values) > 1
        else str(values[0])
    )
