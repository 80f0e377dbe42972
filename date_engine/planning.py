"""The one way in to a run: :func:`plan_for` — a spec, a global batch and the processes it is
split over → the :class:`~date_engine.runplan.RunPlan` every command, the trainer and the adapters
train with.

It reads the probe the spec names, calls :func:`~date_engine.plan.derive_plan` once, and splits the
batch (micro-batch × processes × accumulation steps, :func:`~date_engine.runplan.split_batch`).
It is the only module of the plan's side that looks a recipe up (for n and the default
micro-batch); ``plan.py`` and ``runplan.py`` take what they need as values. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from date_engine.branches import Measurement
from date_engine.errors import PlanError, expect, named
from date_engine.forecast import NoiseCurve
from date_engine.plan import derive_plan, positive_int, require_spec, samples_per_epoch
from date_engine.probe import Probe, baseline_identity
from date_engine.ramp import Change
from date_engine.recipes import Recipe, get_recipe, spec_recipe
from date_engine.runplan import RunPlan, largest_divisor, split_batch
from date_engine.spec import Spec, spec_with

__all__ = ["plan_for"]


def plan_for(spec: Spec | str | Path, batch: int | None = None, *, devices: int = 1,
             micro_batch: int | None = None, recipe: Recipe | str | None = None,
             dataset_size: int | None = None, overrides: Iterable[str] = (),
             probe: str | Path | None = None, budget: str | None = None,
             ramp_changes: tuple[Change, ...] = (),
             noise_curve: NoiseCurve | None = None,
             measured: Measurement | None = None) -> RunPlan:
    """The plan of ``spec`` at global ``batch`` over ``devices`` processes and its exact split
    (micro-batch × devices × accumulation): the one way every command, the trainer and the
    adapters derive a run. Without ``batch``, the batch is ``devices × micro_batch`` (one pass
    per step). ``spec`` may be a Spec, a YAML path or a shipped baseline's name; n comes from the
    spec, else ``recipe`` (by default the one the spec names, as ``date plan`` takes it), else
    ``dataset_size``. ``ramp_changes``: the moves up a measured batch ramp a run made;
    ``noise_curve``, ``measured``: the probe's curve and branch measurements the run's plan
    already holds (the trainer re-derives a moved ramp from them and reads no file)."""
    expect(spec, (Spec, str, Path), "plan_for: spec", "a validated Spec (baseline(...), "
           "load_spec(path)), a YAML path or a shipped baseline's name")
    spec = spec_with(spec, overrides, probe=probe, budget=budget)
    recipe = _recipe(recipe) if recipe is not None else spec_recipe(spec)
    if dataset_size is not None:
        expect(dataset_size, int, "plan_for: dataset_size", "the training samples per epoch (int)")
    if batch is None:
        if micro_batch is None:
            raise PlanError("plan_for: give batch, or devices and micro_batch (the batch is then "
                            "their product).")
        batch = devices * micro_batch
    return _resolve(spec, batch, devices, micro_batch, recipe, dataset_size, ramp_changes,
                    noise_curve, measured)


def _recipe(recipe: Any) -> Recipe | None:
    """``recipe``: a Recipe, or a registered recipe's name (a string, as ``date recipes`` lists
    them)."""
    if isinstance(recipe, str):
        return get_recipe(recipe)
    expect(recipe, Recipe, "plan_for: recipe", "a Recipe or a recipe's name")
    return recipe


def _resolve(
    spec: Spec,
    batch: int,
    world_size: int = 1,
    micro_batch: int | None = None,
    recipe: Recipe | None = None,
    dataset_size: int | None = None,
    ramp_changes: tuple[Change, ...] = (),
    noise_curve: NoiseCurve | None = None,
    measured: Measurement | None = None,
) -> RunPlan:
    """The plan and batch split a run of ``spec`` at global ``batch`` trains with.

    n is ``baseline.dataset_size``, else the recipe's, else ``dataset_size`` (the training data's
    length, known once a process has loaded it). With ``date.probe`` the probe.json it names is
    read, checked to be of this baseline, and its noise curve forecasts. The micro-batch is
    ``micro_batch`` (the command line), else ``train.micro_batch``, else the recipe's default
    fitted to each process's share (the largest divisor of it not above the default), else the
    whole share. ``ramp_changes``: the moves up a measured batch ramp the run made;
    ``noise_curve``, ``measured``: the probe's curve and branch measurements the run's plan
    already holds (a move re-derives the plan from them and reads no file).
    """
    require_spec(spec, "plan_for")
    batch = positive_int(named("batch", "--batch"), batch)
    if recipe is not None and recipe.dataset_size is not None:
        n, source = recipe.dataset_size, f"recipe {recipe.name}"
    else:
        n, source = dataset_size, "the training data"
    world_size = positive_int(named("devices", "--nproc"), world_size)
    curve, measured = noise_curve, measured
    if curve is None and spec.date.probe is not None:
        samples, _ = samples_per_epoch(spec, n, source)
        probe = Probe.read(spec.date.probe).matching(baseline_identity(spec, samples))
        curve, measured = probe.curve, probe.measurement
    plan = derive_plan(spec, batch, dataset_size=n, dataset_size_source=source,
                       multiple_of=world_size, noise_curve=curve, ramp_changes=ramp_changes,
                       measured=measured)
    micro = micro_batch if micro_batch is not None else spec.train.micro_batch
    if micro == "auto":  # the whole share until the run has tried what fits (train/fit.py)
        micro = None
    elif micro is None and recipe is not None and batch % world_size == 0:
        share = batch // world_size
        micro = largest_divisor(share, recipe.default_micro_batch)
    if spec.train.parallel == "fsdp" and plan.ramp and plan.ramp_mode == "measured":
        raise PlanError("train.parallel: fsdp does not measure the gradient noise scale that a "
                        "measured ramp follows; set date.ramp: planned (the probe's schedule) or "
                        "train.parallel: ddp.")
    split = split_batch(batch, world_size, micro)
    return RunPlan(plan, replace(split, parallel=spec.train.parallel))
