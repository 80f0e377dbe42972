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

Everything but :func:`optimizer_for` and :func:`scheduler_for` is torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from date_engine.errors import ArgumentError, DateError, PlanError, SpecError, expect, named
from date_engine.runplan import RunPlan, resolve_plan
from date_engine.spec import DateSpec, Spec, load_spec, parse_spec

if TYPE_CHECKING:
    import torch

    from date_engine.plan import Plan
    from date_engine.recipes import Recipe

__all__ = ["baseline", "config_spec", "forecast_times", "memory_fit", "optimizer_for", "plan_for",
           "scheduler_for", "spec_with"]


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


def spec_with(spec: Spec | str | Path, overrides: Iterable[str] = (), *,
              probe: str | Path | None = None, budget: str | None = None,
              parallel: str | None = None) -> Spec:
    """``spec`` (a Spec, a YAML path or a shipped baseline's name) with ``key=value`` overrides,
    then ``probe``, ``budget`` and ``parallel`` set (date.probe, date.budget, train.parallel)."""
    import json

    overrides = [overrides] if isinstance(overrides, str) else list(_iterable(
        overrides, "overrides", "key=value strings"))
    for override in overrides:
        expect(override, str, "overrides", "a list of key=value strings (e.g. 'baseline.lr=0.1')")
    if parallel is not None:
        overrides.append(f"train.parallel={json.dumps(parallel)}")
    if probe is not None:  # absolute, so that every process and sweep cell finds it
        overrides.append(f"date.probe={json.dumps(str(Path(probe).absolute()))}")
    if budget is not None:
        budgets = get_args(DateSpec.model_fields["budget"].annotation)
        if budget not in budgets:
            raise SpecError(f"{named('budget', '--budget')}: must be one of "
                            f"{', '.join(budgets)}; got {budget!r}.")
        overrides.append(f"date.budget={json.dumps(budget)}")
    expect(spec, (Spec, str, Path), "spec", "a Spec (baseline(...), load_spec(...)), a YAML "
           "path or a shipped baseline's name")
    if isinstance(spec, Spec):
        if not overrides:
            return spec
        return parse_spec(spec.model_dump(mode="json", exclude_none=True), overrides)
    return load_spec(spec, overrides)


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


def _iterable(value: Any, parameter: str, what: str) -> Iterable[Any]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        expect(value, list, parameter, f"a list of {what}")
    return value


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


def _plan(run: RunPlan | Plan, caller: str) -> Plan:
    from date_engine.plan import Plan

    expect(run, (RunPlan, Plan), f"{caller}: run", "a RunPlan (plan_for(...))")
    return run.plan if isinstance(run, RunPlan) else run


def optimizer_for(model: torch.nn.Module | Iterable[Any], run: RunPlan | Plan, *,
                  date: bool = True) -> torch.optim.Optimizer:
    """The optimizer the plan derived, at its peak LR: DATE's per-layer ratios over the base
    optimizer with the plan's options (β2, ε, λ, ...); with ``date=False`` the base alone (the
    same options, no ratios). ``model``: a module, or its ``named_parameters()``."""
    import torch

    from date_engine.optim.build import build_base_optimizer, build_optimizer

    plan = _plan(run, "optimizer_for")
    expect(date, bool, "optimizer_for: date", "True (DATE's ratios) or False (the base alone)")
    if isinstance(model, torch.nn.Module):
        params = list(model.named_parameters())
    else:
        params = list(_iterable(model, "optimizer_for: model",
                                "parameters: a torch module, or its named_parameters()"))
    if not any(getattr(p, "requires_grad", False) for p in _tensors(params)):
        raise ArgumentError("optimizer_for: model has no parameters to train (none requires "
                            "grad); pass the model after its layers are built.")
    if date:
        return build_optimizer(params, plan.optimizer, plan.peak_lr)
    return build_base_optimizer(params, plan.optimizer.name, plan.optimizer.options,
                                plan.peak_lr, plan.optimizer.decay_exempt)


def scheduler_for(optimizer: torch.optim.Optimizer, run: RunPlan | Plan, *, replan: bool = False
                  ) -> torch.optim.lr_scheduler.LRScheduler:
    """The plan's LR schedule over ``optimizer``: step it once per optimizer step (not per
    micro-batch, not per process); optimizer step s (from 1) runs at ``plan.lr(s)``. Its state
    carries the plan's id: loading a state saved under another plan is refused, unless
    ``replan`` (continue at the step of this plan that has trained on as many samples)."""
    import torch

    from date_engine.schedule import plan_scheduler

    plan = _plan(run, "scheduler_for")
    expect(optimizer, torch.optim.Optimizer, "scheduler_for: optimizer",
           "the torch optimizer to schedule (optimizer_for(model, run))")
    expect(replan, bool, "scheduler_for: replan", "True or False")
    return plan_scheduler(optimizer, plan, replan)


def _tensors(params: list[Any]) -> Iterable[Any]:
    """The parameters of ``params``: bare, (name, parameter) pairs, or param groups of either."""
    for item in params:
        if isinstance(item, dict):
            yield from _tensors(list(item.get("params", ())))
        else:
            yield item[1] if isinstance(item, tuple) and len(item) == 2 else item


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
