"""``date bench``: time what a step is made of on this machine, for :mod:`date_engine.timing`.

Every process of the job (``--nproc P``, started by torch's elastic agent as ``date scale``'s are,
with the threads a run at P processes gets) times, at the same moment:

- the recipe's forward and backward pass on micro-batches of several sizes (median of repeats
  after a warm-up), each pass on the loader's next micro-batch (read and collated, as the trainer
  does), on the model the run builds (plain: the all-reduce is timed on its own);
- the optimizer step the plan builds (DATE over the baseline's optimizer), over the whole model;
- the whole step as the trainer takes it (the LR set, the pass with the noise-scale hooks, the
  gradient norm, the state check, the agreement, the update), on a copy of the model: what it
  takes beyond the plain pass and the optimizer step is the step's host work;
- with P ≥ 2, an all-reduce of several sizes up to the gradient's, on the run's backend, and that
  whole step under DDP with the agreement's all-reduce: what it takes beyond the local whole step
  and the modelled all-reduce is the step's synchronisation;
- with P ≥ 2, that whole step again on a copy sharded over the P processes with FSDP2 (as
  ``train.parallel: fsdp`` shards it), and its optimizer step alone: what the sharded step takes
  beyond the plain pass, the modelled gathers and reduce-scatter, that optimizer step and the host
  work is fsdp's sharding overhead.

Rank 0 fits T_c(b) = a + c·b (averaged over the processes) and the ring all-reduce's α and β, and
writes bench.json. ``python -m date_engine.train.bench --config <bench config>.json``.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from date_engine.errors import DateError
from date_engine.machine import choose_threads, describe
from date_engine.optim.build import build_optimizer, state_bytes
from date_engine.planning import plan_for
from date_engine.recipes import DataOptions, get_recipe
from date_engine.schedule import set_lr
from date_engine.spec import parse_spec
from date_engine.timing import (
    Bench,
    Link,
    allreduce_seconds,
    fit_line,
    link_from_points,
    sharded_comm_seconds,
)
from date_engine.train.runtime import die_with_parent, setup, shard_units, teardown
from date_engine.train.step import StepRunner, agree, to_device

__all__ = ["bench_job", "main", "measure", "micro_batch_sizes", "run"]

WARMUP, REPEATS = 3, 15
ALLREDUCE_SIZES = (1 << 12, 1 << 16, 1 << 18, 1 << 20, 1 << 21, 1 << 22, 1 << 23)
"""Bytes of the timed all-reduces, besides the gradient's own size."""


def _median_seconds(works: dict[Any, Callable[[], object]], repeats: int,
                    sync: Callable[[], None],
                    align: Callable[[], object] = lambda: None) -> dict[Any, float]:
    """The median seconds of each of ``works``, timed round after round (one of each per round),
    so that a machine that slows down for a while slows them all alike; each started after
    ``align`` (in a job, a barrier: the processes time the same work at the same moment, and a
    collective does not count the time another process spent on the work before)."""
    for work in works.values():
        for _ in range(WARMUP):
            work()
    sync()
    times: dict[Any, list[float]] = {key: [] for key in works}
    for _ in range(repeats):
        for key, work in works.items():
            align()
            start = time.perf_counter()
            work()
            sync()
            times[key].append(time.perf_counter() - start)
    return {key: statistics.median(t) for key, t in times.items()}


def _cycle(loader: torch.utils.data.DataLoader) -> Iterator[Any]:
    """The loader's batches, epoch after epoch."""
    while True:
        yield from loader


def _batches(data, micro: int) -> Iterator[Any]:
    """Micro-batches of ``micro`` training samples, read and collated as the trainer's loader
    does it (a pass that reused one batch would time warm caches and no loading)."""
    return _cycle(torch.utils.data.DataLoader(
        data.train, batch_size=micro, shuffle=True, drop_last=micro <= len(data.train),
        collate_fn=data.collate, generator=torch.Generator().manual_seed(micro)))


def _pass(module: torch.nn.Module, micro: int, recipe, data, rt) -> Callable[[], None]:
    """One forward and backward pass of ``module`` on the next micro-batch (:func:`_batches`)."""
    batches = _batches(data, micro)

    def work() -> None:
        batch = to_device(next(batches), rt.device)
        module.zero_grad(set_to_none=False)
        with rt.autocast():
            loss = recipe.loss(module, batch, data)
        loss.backward()

    return work


def measure(config: dict) -> Bench | None:
    """Time this process's share; returns the bench on rank 0 (collective in a job)."""
    rt = setup(force_cpu=config.get("cpu", False))
    try:
        built = _Built.make(config, rt)
        timed = _time_compute(built, rt, config)
        reduced = _time_allreduce(built, rt, config.get("repeats", REPEATS)) \
            if rt.distributed else []
        if not rt.is_main:
            return None
        return _bench(built, rt, config, timed, reduced)
    finally:
        teardown(rt)


class _Timed(NamedTuple):
    """What :func:`_time_compute` measured, averaged over the processes."""

    passes: dict[Any, float]
    """Median seconds of each pass, by (kind, micro-batch): plain, whole, synchronised, sharded."""
    step: float
    """The optimizer step over the whole model."""
    sharded_step: float
    """The shards' optimizer step (0 on one process)."""
    peaks: list[tuple[int, float, str]]
    """(micro-batch, peak bytes, what measured it) of a plain pass, smallest first."""


class _Built:
    """What a bench times, built once: the recipe, its data, the plan at the baseline's batch,
    the model and the plan's optimizer over it."""

    def __init__(self, recipe, data, plan, model, optimizer) -> None:
        self.recipe, self.data, self.plan = recipe, data, plan
        self.model, self.optimizer = model, optimizer
        self.gradient_bytes = sum(p.numel() * p.element_size() for p in model.parameters()
                                  if p.requires_grad)

    @classmethod
    def make(cls, config: dict, rt) -> _Built:
        spec = parse_spec(config["spec"], source=config["spec_path"])
        recipe = get_recipe(config["recipe"])
        options = recipe.parse_options(spec.model)
        data = recipe.load_data(DataOptions(data_dir=spec.train.data_dir, seed=spec.train.seed),
                                options, dry_run=True)
        plan = plan_for(spec, spec.baseline.batch_size, recipe=recipe,
                        dataset_size=len(data.train)).plan
        torch.manual_seed(spec.train.seed)
        model = recipe.build_model(options).to(rt.device)
        return cls(recipe, data, plan, model,
                   build_optimizer(model.named_parameters(), plan.optimizer, plan.peak_lr))


def _time_compute(built: _Built, rt, config: dict) -> _Timed:
    """The median seconds of each pass at each micro-batch, averaged over the processes: the
    plain pass; the whole step as the trainer takes it (the LR set, the pass with the noise-scale
    hooks, the gradient norm, the state check, the agreement, the update clearing the gradients)
    on a copy of its own; in a job that step under DDP with the agreement's all-reduce on another
    copy, and on a copy sharded with FSDP2 in rounds of its own (its gathers and hooks would slow
    the plain pass and the step timed beside it). Also the optimizer step (and the shards'), and
    the peak memory of a plain pass. The runners go with this call: a DDP reducer and FSDP2's
    shards hold the process group, which must outlive them."""
    model, recipe, data, plan = built.model, built.recipe, built.data, built.plan
    sync, repeats, micro_batches = rt.synchronize, config.get("repeats", REPEATS), \
        config["micro_batches"]
    align = dist.barrier if rt.distributed else (lambda: None)
    runners = {"whole": _runner(model, recipe, data, replace(rt, backend=None), plan, None)}
    sharded = None
    if rt.distributed:
        runners["synchronised"] = _runner(model, recipe, data, rt, plan, rt.wrap)
        sharded = _sharded_runner(model, recipe, data, rt, plan)
    passes = {}
    for micro in micro_batches:
        passes["plain", micro] = _pass(model, micro, recipe, data, rt)
        for kind, runner in runners.items():
            passes[kind, micro] = runner.step_at(micro)
    try:
        medians = _median_seconds(passes, repeats, sync, align)
        if sharded is not None:
            medians.update(_median_seconds({("sharded", m): sharded.step_at(m)
                                            for m in micro_batches}, repeats, sync, align))
    finally:
        for runner in [*runners.values(), *([sharded] if sharded else [])]:
            runner.close()
    steps = _median_seconds({"step": built.optimizer.step}, repeats, sync, align)
    if sharded is not None:  # on one more pass's gradients (its timed steps cleared theirs)
        sharded.steps.forward_backward(_batches(data, micro_batches[0]))
        steps.update(_median_seconds({"sharded": sharded.steps.optimizer.step}, repeats,
                                     sync, align))
    keys = list(medians)
    mine = torch.tensor([medians[k] for k in keys] + [steps["step"], steps.get("sharded", 0)],
                        dtype=torch.float64)
    if rt.distributed:  # the mean over the processes that computed side by side
        dist.all_reduce(mine)
        mine /= rt.world_size
    # the peak of a pass at each size, smallest first, with the gradients and the optimizer's
    # state (made by the timed steps) in memory
    peaks = [(m, *rt.peak_memory(passes["plain", m])) for m in sorted(micro_batches)]
    return _Timed(dict(zip(keys, mine[:-2].tolist())), float(mine[-2]), float(mine[-1]), peaks)


def _time_allreduce(built: _Built, rt, repeats: int) -> list[tuple[int, float]]:
    """(bytes, seconds) of an all-reduce of several sizes up to the gradient's, the slowest
    process's median; then the processes leave together."""
    sizes = sorted({*ALLREDUCE_SIZES, built.gradient_bytes})
    buffers = {size: torch.zeros(max(1, size // 4), device=rt.device) for size in sizes}
    medians = _median_seconds({size: (lambda b=b: dist.all_reduce(b))
                               for size, b in buffers.items()}, 4 * repeats, rt.synchronize)
    box = torch.tensor([medians[size] for size in sizes], dtype=torch.float64)
    dist.all_reduce(box, op=dist.ReduceOp.MAX)  # the slowest process's
    dist.barrier()  # leave together: no process tears down while another still talks
    return list(zip(sizes, box.tolist()))


def _bench(built: _Built, rt, config: dict, timed: _Timed,
           reduced: list[tuple[int, float]]) -> Bench:
    """bench.json's record from what was timed: T_c(b) = a + c·b fitted to the plain passes, the
    host work of a step, the link, and in a job what a synchronised and a sharded step took
    beyond their parts."""
    model, micro_batches, step, peaks = built.model, config["micro_batches"], timed.step, \
        timed.peaks
    points = [(m, timed.passes["plain", m]) for m in micro_batches]
    host = tuple((m, max(0.0, timed.passes["whole", m] - t - step)) for m, t in points)
    a, c = fit_line([(float(m), t) for m, t in points])
    given, notes = config.get("link"), []
    measured = link_from_points(reduced, rt.world_size) if reduced else None
    link = Link(**given) if given is not None else measured or Link(0.0, 1.0, "none")
    if measured is None and given is None:
        notes.append("one process: no all-reduce was timed; forecasts for more than one "
                     "device need date bench --nproc 2 or --link.")
    bench = Bench(
        recipe=built.recipe.name, machine=describe(), torch=torch.__version__,
        device=rt.device.type, backend=rt.backend or "none", processes=rt.world_size,
        threads=torch.get_num_threads(), parameters=sum(p.numel() for p in model.parameters()),
        gradient_bytes=built.gradient_bytes, compute_fixed=a, compute_per_sample=c,
        optimizer_seconds=step, link=link, compute_points=tuple(points),
        allreduce_points=tuple(reduced), notes=tuple(notes),
        memory_points=tuple((m, float(b)) for m, b, _ in peaks),
        model_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        state_bytes=state_bytes(built.optimizer), memory_source=peaks[0][2], host_points=host)
    if measured is None:
        return bench
    # what a synchronised pass took beyond its compute and the modelled all-reduce: the wait
    # for the slower process and the collectives' own costs on this machine
    ring = allreduce_seconds(measured, rt.world_size, built.gradient_bytes)
    waits = tuple((m, max(0.0, timed.passes["synchronised", m] - t - ring - step - h))
                  for (m, t), (_, h) in zip(points, host))
    # and what the sharded step took beyond its pass, the modelled gathers and reduce-scatter
    # (the layer norms' all-reduce is inside its optimizer step) and host work
    collectives = sharded_comm_seconds(measured, rt.world_size, built.gradient_bytes,
                                       built.gradient_bytes)
    shards = tuple((m, max(0.0, timed.passes["sharded", m] - t - collectives - timed.sharded_step
                            - h)) for (m, t), (_, h) in zip(points, host))
    return replace(bench, wait_points=waits, shard_points=shards,
                   sharded_optimizer_seconds=timed.sharded_step)


class _Steps:
    """A copy of the model with its own optimizer, stepped as the trainer steps (one micro-batch
    a step), for the bench's whole-step timings."""

    def __init__(self, steps: StepRunner, plan, data, rt) -> None:
        self.steps, self.plan, self.data, self.rt = steps, plan, data, rt

    def step_at(self, micro: int) -> Callable[[], None]:
        batches, steps = _batches(self.data, micro), self.steps

        def work() -> None:
            set_lr(steps.optimizer, self.plan, 1)
            loss = steps.forward_backward(batches)
            norm = steps.unscale_and_clip(None, False)
            agree(self.rt, loss, False, False, steps.noise_sample(norm), norm, steps.state_sum())
            steps.update()

        return work

    def close(self) -> None:
        self.steps.close()


def _runner(model, recipe, data, rt, plan, wrap) -> _Steps:
    """A :class:`_Steps` over a copy of ``model`` (wrapped by ``wrap``: DDP), measuring the noise
    scale as a run whose step sees several gradients does."""
    own = copy.deepcopy(model)
    optimizer = build_optimizer(own.named_parameters(), plan.optimizer, plan.peak_lr)
    wrapped = wrap(own) if wrap is not None else own
    return _Steps(StepRunner(own, wrapped, optimizer, None, recipe, data, rt, 1,
                             measure_noise=True), plan, data, rt)


def _sharded_runner(model, recipe, data, rt, plan) -> _Steps:
    """A :class:`_Steps` over a copy of ``model`` sharded over the job's processes as a run under
    ``train.parallel: fsdp`` shards it (its own units, the optimizer built on the shards)."""
    sharded = replace(rt, parallel="fsdp")
    own = copy.deepcopy(model)
    own = sharded.shard(own, (recipe.shard_units or shard_units)(own))
    optimizer = build_optimizer(own.named_parameters(), plan.optimizer, plan.peak_lr)
    return _Steps(StepRunner(own, sharded.wrap(own), optimizer, None, recipe, data, sharded, 1),
                  plan, data, sharded)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="the bench's config, as JSON")
    args = parser.parse_args(argv)
    die_with_parent()
    return run(json.loads(Path(args.config).read_text()))


def micro_batch_sizes(recipe: Any, given: list[int] | None, samples: int) -> list[int]:
    """The micro-batches to time: ``given``, else the recipe's and its half, quarter, eighth and
    sixteenth (a run's micro-batches lie at or below the recipe's), none above the ``samples``
    of the training set (a pass cannot take more: it would time a smaller one)."""
    if given is not None:
        if max(given) > samples:
            raise DateError(f"--micro-batches: {max(given)} is more than the {samples} samples "
                            f"of the training set; time micro-batches of {samples} or fewer.")
        return sorted(set(given))
    most = recipe.default_micro_batch
    return sorted({min(samples, max(1, most >> k)) for k in range(5)})


def bench_job(spec: Any, spec_path: Path, recipe: Any, sizes: list[int], output: Path,
              link: Link | None, nproc: int) -> int:
    """Time ``recipe`` at each micro-batch of ``sizes`` on ``nproc`` processes (this one when 1,
    else a torchrun job) and write bench.json to ``output``; the exit code."""
    import dataclasses

    config = json.loads(json.dumps({
        "spec": spec.model_dump(mode="json", exclude_none=True), "spec_path": str(spec_path),
        "recipe": spec.recipe or recipe.name, "micro_batches": sizes,
        "output": str(output.absolute()), "link": link and dataclasses.asdict(link)}))
    if nproc == 1:  # in this process, with the threads a one-process date scale takes
        torch.set_num_threads(choose_threads(1)[0])
        return run(config)
    from date_engine.train.launch import LaunchOptions, elastic

    return elastic(json.dumps(config), LaunchOptions(nproc=nproc),
                   module="date_engine.train.bench")


def run(config: dict) -> int:
    """Measure and, on rank 0, write bench.json where ``config`` says."""
    bench = measure(config)
    if bench is not None:
        bench.write(Path(config["output"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
