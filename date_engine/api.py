"""The one way in: a baseline and a target batch (or devices × micro-batch) → the run's plan and
its split; the optimizer and the LR scheduler that train with it.

``date plan``, ``date scale``, ``date sweep`` and the adapters for other trainers
(:mod:`date_engine.integrations`) all come through :func:`plan_for`::

    from date_engine import baseline, plan_for, optimizer_for, scheduler_for

    spec = baseline(batch_size=256, lr=1e-3, warmup_epochs=1, epochs=10, dataset_size=60_000,
                    optimizer="adamw", weight_decay=0.01)
    run = plan_for(spec, batch=8192, devices=8)       # or plan_for("lenet-mnist", devices=8, ...)
    run.plan.peak_lr, run.split.micro_batch, run.split.accumulation_steps
    opt = optimizer_for(model, run)                    # DATE over AdamW with the plan's β2, ε, λ
    sched = scheduler_for(opt, run)                    # step it once per optimizer step

Everything but :func:`optimizer_for` and :func:`scheduler_for` is torch-free: they live where they
are built (:mod:`date_engine.optim.build`, :mod:`date_engine.schedule`), re-exported here and loaded
on first use; :func:`spec_with` lives in :mod:`date_engine.spec`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from date_engine.errors import DateError, PlanError, expect
from date_engine.runplan import RunPlan, resolve_plan
from date_engine.spec import Spec, parse_spec, spec_with

if TYPE_CHECKING:
    from date_engine.optim.build import optimizer_for
    from date_engine.recipes import Recipe
    from date_engine.schedule import scheduler_for

__all__ = ["baseline", "config_spec", "forecast_times", "memory_fit", "optimizer_for", "plan_for",
           "scheduler_for", "spec_with"]

_BUILT_ELSEWHERE = {"optimizer_for": "date_engine.optim.build",
                    "scheduler_for": "date_engine.schedule"}
"""The torch-based builders this module re-exports, imported on first use."""


def __getattr__(name: str) -> Any:
    if name in _BUILT_ELSEWHERE:
        import importlib

        return getattr(importlib.import_module(_BUILT_ELSEWHERE[name]), name)
    raise AttributeError(f"module 'date_engine.api' has no attribute {name!r}")


def baseline(*, batch_size: int, lr: float, warmup_epochs: float = 0.0,
             epochs: float | None = None, iterations: int | None = None,
             dataset_size: int | None = None, optimizer: str = "adamw",
             recipe: str | None = None, date: dict[str, Any] | None = None,
             **options: Any) -> Spec:
    """A validated spec from a baseline given in Python: B0, η0, the warmup in epochs, the length
    (``epochs`` or ``iterations``), n, the optimizer by catalog name and its options (``betas``,
    ``eps``, ``weight_decay``, ``momentum``, ...), and optionally the ``date:`` section (e.g.
    ``{"rule": "paper"}``). Bad values raise :class:`~date_engine.errors.SpecError` naming the
    field."""
    raw: dict[str, Any] = {"baseline": {
        "batch_size": batch_size, "lr": lr, "warmup_epochs": warmup_epochs,
        "optimizer": {"name": optimizer, **options}}}
    for key, value in (("epochs", epochs), ("iterations", iterations),
                       ("dataset_size", dataset_size)):
        if value is not None:
            raw["baseline"][key] = value
    if recipe is not None:
        raw["recipe"] = recipe
    if date:
        raw["date"] = date
    return parse_spec(raw, source="baseline()")


def config_spec(arg: str | None, config: Path, samples: int | None, devices: int | None,
                overrides: list[str] | None, probe: Path | None, budget: str | None,
                parallel: str | None) -> tuple[Path, Spec, str]:
    """``date plan --from``: the baseline of a run's own configuration (SPEC not given), with
    the overrides, and the Python expression that gives it."""
    from date_engine.integrations.configs import baseline_from_file

    if arg is not None:
        raise DateError(f"give SPEC ({arg}) or --from {config}, not both.")
    if samples is None:
        raise DateError(f"--from {config} needs --train-samples N: the baseline's training "
                        "samples per epoch (the length of its training set).")
    world = devices or 1
    spec = spec_with(baseline_from_file(config, samples, world), overrides or (), probe=probe,
                     budget=budget, parallel=parallel)
    return config, spec, f"baseline_from_file({str(config)!r}, {samples}, {world})"


def plan_for(spec: Spec | str | Path, batch: int | None = None, *, devices: int = 1,
             micro_batch: int | None = None, recipe: Recipe | None = None,
             dataset_size: int | None = None, overrides: Iterable[str] = (),
             probe: str | Path | None = None, budget: str | None = None) -> RunPlan:
    """The plan of ``spec`` at global ``batch`` over ``devices`` processes and its exact split
    (micro-batch × devices × accumulation). Without ``batch``, the batch is ``devices ×
    micro_batch`` (one pass per step). ``spec`` may be a Spec, a YAML path or a shipped baseline's
    name; n comes from the spec, else ``recipe`` (by default the one the spec names, as ``date
    plan`` takes it), else ``dataset_size``."""
    from date_engine.recipes import spec_recipe

    spec = spec_with(spec, overrides, probe=probe, budget=budget)
    recipe = _recipe(recipe) if recipe is not None else spec_recipe(spec)
    if dataset_size is not None:
        expect(dataset_size, int, "plan_for: dataset_size", "the training samples per epoch (int)")
    if batch is None:
        if micro_batch is None:
            raise PlanError("plan_for: give batch, or devices and micro_batch (the batch is then "
                            "their product).")
        batch = devices * micro_batch
    return resolve_plan(spec, batch, devices, micro_batch, recipe, dataset_size)


def _recipe(recipe: Any) -> Recipe | None:
    """``recipe``: a Recipe, or a registered recipe's name (a string, as ``date recipes`` lists
    them)."""
    from date_engine.recipes import Recipe, get_recipe

    if isinstance(recipe, str):
        return get_recipe(recipe)
    if recipe is not None:
        expect(recipe, Recipe, "plan_for: recipe", "a Recipe or a recipe's name")
    return recipe


def memory_fit(run: RunPlan, bench_path: Path | None, device_memory: str) -> Any:
    """``date plan --device-memory``: the largest micro-batch of ``run``'s split whose pass fits
    a device of ``device_memory`` ("80GiB"), from the peaks bench.json measured
    (:class:`~date_engine.timing.MemoryFit`)."""
    from date_engine.timing import Bench, fit_memory, parse_memory

    if bench_path is None:
        raise PlanError("--device-memory needs --bench bench.json (from date bench on that "
                        "device): the memory of a pass is measured there.")
    return fit_memory(Bench.read(bench_path), run, parse_memory(device_memory))


def forecast_times(spec: Spec, run: RunPlan, bench_path: Path, link: Any = None,
                   baseline_devices: int | None = None, recipe: Recipe | None = None,
                   micro_batch: int | None = None) -> dict[str, Any]:
    """The wall-clock forecast of ``run`` (planned with ``micro_batch``) from bench.json at
    ``bench_path``, for every budget the spec can plan (same-epochs; hold and ramp with a
    probe), the spec's own among them: budget → :class:`~date_engine.timing.TimeForecast`."""
    from date_engine.timing import Bench, forecast

    b0 = run.plan.baseline_batch
    if baseline_devices is not None and b0 % baseline_devices:
        raise PlanError(f"--baseline-devices {baseline_devices}: the baseline's batch {b0} does "
                        "not split evenly over them; give a number that divides it.")
    bench = Bench.read(bench_path)
    bench.check(bench_path, recipe and recipe.name, run.split.world_size, link)
    budgets = ["same-epochs", *(("hold", "ramp") if spec.date.probe is not None else ())]
    times = {}
    for name in budgets:
        each = run if name == spec.date.budget else resolve_plan(
            spec_with(spec, budget=name), run.plan.target_batch, run.split.world_size,
            micro_batch, recipe)
        times[name] = forecast(bench, each, baseline_devices, link, spec.train.precision)
    return times
