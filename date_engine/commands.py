"""What ``date plan`` and ``date scale`` compute, apart from how they are asked for and shown.

cli.py parses the flags, calls one function here and renders what it returns; this module calls
the library. Raw ``--flag`` text lives only in the two of them. Tests of what a command decides call
these functions directly; tests of the command line go through cli.py.

    plan_report(...)   -> PlanReport: the run, the --compare plans, the parameter count, the
                          --bench times and the --device-memory fit
    scale_config(...)  -> ScaleJob: the run derived once (refused before any process starts),
                          as RunConfig for every process, and how to launch them
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from date_engine.errors import DateError, PlanError
from date_engine.plan import Plan
from date_engine.planning import plan_for
from date_engine.runplan import RunPlan
from date_engine.spec import Spec, spec_with

if TYPE_CHECKING:
    from date_engine.baselines import BaselineRead
    from date_engine.recipes import Recipe
    from date_engine.train.config import RunConfig
    from date_engine.train.launch import LaunchOptions

__all__ = ["PlanReport", "ScaleJob", "config_spec", "forecast_times", "memory_fit",
           "plan_report", "scale_config", "spec_of"]


def spec_of(arg: str | None, overrides: list[str] | None, probe: Path | None = None,
            budget: str | None = None, parallel: str | None = None) -> tuple[Path, Spec]:
    """SPEC (a file, or a shipped baseline's name) validated, with the overrides; ``--probe``,
    ``--budget`` and ``--parallel`` last (they set date.probe, date.budget, train.parallel)."""
    from date_engine.checks import a_path
    from date_engine.spec import shipped_or_path

    if arg is None:  # date plan's SPEC is optional: --from gives the baseline instead
        raise DateError("give the baseline: SPEC (a YAML, or a shipped name: date recipes), or "
                        "--from a run's TrainingArguments JSON or timm args.yaml.")
    path = shipped_or_path(a_path(arg, "SPEC"))
    return path, spec_with(path, overrides or (), probe=probe, budget=budget, parallel=parallel)


def config_spec(arg: str | None, config: Path, samples: int | None, devices: int | None,
                overrides: list[str] | None, probe: Path | None, budget: str | None,
                parallel: str | None) -> tuple[Path, Spec, str, BaselineRead]:
    """``date plan --from``: the baseline of a run's own configuration (SPEC not given), with
    the overrides, the Python expression that gives it, and what the reader said
    (:class:`~date_engine.baselines.BaselineRead`: where each value came from, what is lost)."""
    from date_engine.baselines import read_baseline

    if arg is not None:
        raise DateError(f"give SPEC ({arg}) or --from {config}, not both.")
    if samples is None:
        raise DateError(f"--from {config} needs --train-samples N: the baseline's training "
                        "samples per epoch (the length of its training set).")
    world = devices or 1
    read = read_baseline(config, samples, world)
    spec = spec_with(read.spec, overrides or (), probe=probe, budget=budget, parallel=parallel)
    return config, spec, f"baseline_from_file({str(config)!r}, {samples}, {world})", read


# ---------------------------------------------------------------------------------- date plan


@dataclass(frozen=True)
class PlanReport:
    """Everything ``date plan`` shows: derived once, rendered as a table, JSON, a job or code."""

    path: Path
    """SPEC's file, or the --from configuration."""
    spec: Spec
    spec_call: str
    """The Python expression that gives the spec (for --emit's code)."""
    run: RunPlan
    recipe: Recipe | None
    others: dict[str, Plan]
    """--compare: the other rules' plans at the same batch, by scheme name."""
    parameters: int | None
    """The model's parameter count, where the processes shard it (fsdp)."""
    times: dict[str, Any] | None
    """--bench: budget -> TimeForecast."""
    memory: Any
    """--device-memory: the MemoryFit."""
    sources: dict[str, str] = field(default_factory=dict)
    """--from: where each baseline value was read (spec field -> words), for the "from" column."""
    lost: tuple[str, ...] = ()
    """--from: what the configuration sets that the plan cannot carry, one line each."""


def plan_report(spec_arg: str | None, batch: int, *, devices: int = 1,
                micro_batch: int | None = None, overrides: list[str] | None = None,
                probe: Path | None = None, budget: str | None = None,
                parallel: str | None = None, from_config: Path | None = None,
                train_samples: int | None = None, baseline_devices: int | None = None,
                compare: bool = False, bench: Path | None = None, link: str | None = None,
                device_memory: str | None = None, emit: bool = False) -> PlanReport:
    """What ``date plan`` derives: the run of SPEC (or of ``--from``'s configuration) at
    ``batch`` over ``devices``, and what the flags add to it; ``emit``: the run alone (--emit
    writes it out: no --compare plans, times or memory fit)."""
    from date_engine.recipes import spec_recipe
    from date_engine.sweep.schemes import SCHEMES, scheme_spec
    from date_engine.timing import parse_link

    if link is not None and bench is None:
        raise DateError("--link goes with --bench (it replaces the bench's measured link).")
    sources: dict[str, str] = {}
    lost: tuple[str, ...] = ()
    if from_config is None:
        path, spec = spec_of(spec_arg, overrides, probe, budget, parallel)
        spec_call = repr(spec_arg)
    else:
        path, spec, spec_call, read = config_spec(
            spec_arg, from_config, train_samples, baseline_devices, overrides, probe, budget,
            parallel)
        sources, lost = read.sources, read.lost
    recipe = spec_recipe(spec)
    run = plan_for(spec, batch, devices=devices, micro_batch=micro_batch, recipe=recipe)
    others = {name: plan_for(scheme_spec(spec, SCHEMES[name]), batch, devices=devices,
                             micro_batch=micro_batch, recipe=recipe).plan
              for name in ("paper" if spec.date.rule == "date" else "date", "linear")
              } if compare and not emit else {}
    times = bench and not emit and forecast_times(spec, run, bench, link and parse_link(link),
                                                  baseline_devices, recipe, micro_batch)
    memory = device_memory and not emit and memory_fit(run, bench, device_memory)
    parameters = recipe.parameter_count(recipe.parse_options(spec.model)) \
        if spec.train.parallel == "fsdp" and recipe is not None else None
    return PlanReport(path, spec, spec_call, run, recipe, others, parameters, times or None,
                      memory or None, sources, lost)


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
        each = run if name == spec.date.budget else plan_for(
            spec_with(spec, budget=name), run.plan.target_batch, devices=run.split.world_size,
            micro_batch=micro_batch, recipe=recipe)
        times[name] = forecast(bench, each, baseline_devices, link, spec.train.precision)
    return times


# ---------------------------------------------------------------------------------- date scale


@dataclass(frozen=True)
class ScaleJob:
    """What ``date scale`` launches: every process's RunConfig and how the processes start."""

    config: RunConfig
    launch: LaunchOptions
    auto_resume: bool
    """--auto-resume: a run stopped for a Slurm job's time limit requeues the job."""


def scale_config(spec_arg: str, batch: int, *, nproc: int = 1, nnodes: int = 1,
                 micro_batch: int | None = None, overrides: list[str] | None = None,
                 probe: Path | None = None, budget: str | None = None,
                 parallel: str | None = None, recipe: str | None = None,
                 output_dir: Path | None = None, resume: bool = False, auto_resume: bool = False,
                 force_replan: bool = False, dry_run: bool = False, max_steps: int | None = None,
                 precision: str | None = None, compile: bool = False, backend: str | None = None,
                 node_rank: int | None = None, rdzv_endpoint: str | None = None,
                 rdzv_id: str = "date-engine", master_addr: str | None = None,
                 master_port: int | None = None, max_restarts: int = 0, as_json: bool = False,
                 typed: list[str] | None = None) -> ScaleJob:
    """What ``date scale`` runs: the spec's recipe at ``batch`` with the plan derived here, once
    (every refusal before a process starts; where n is known only once the data is loaded, each
    process derives it then), in the run folder it picks. ``typed``: the arguments after ``date
    scale`` as the user typed them (the resume hint repeats them)."""
    from date_engine.checks import check_launch
    from date_engine.recipes import spec_recipe
    from date_engine.runfolder import continue_command, run_folder_for
    from date_engine.train.config import RunConfig
    from date_engine.train.launch import LaunchOptions
    from date_engine.train.runtime import job_environment

    path, spec = spec_of(spec_arg, overrides, probe, budget, parallel)
    recipe_ref = spec.recipe if recipe is None else recipe
    found = spec_recipe(spec, recipe_ref, source=str(path), to_train=True, option=True)
    check_launch(nproc, backend, rdzv_endpoint, master_port)
    job = job_environment()  # started by torchrun or srun: that job's size is the truth
    world = job.world_size if job.launcher != "none" else nproc * nnodes
    run = plan_for(spec, batch, devices=world, micro_batch=micro_batch, recipe=found) \
        if spec.baseline.dataset_size or found.dataset_size else None
    budget_name = "" if spec.date.budget == "same-epochs" else f"-{spec.date.budget}"
    run_dir, resume = run_folder_for(
        output_dir, spec.train.output_dir, f"runs/{found.name}-B{batch}{budget_name}",
        resume or auto_resume, versioned=job.launcher == "none" and nnodes == 1,
        dry_run=dry_run, auto=auto_resume and not resume)
    config = RunConfig(
        spec=spec.model_dump(mode="json", exclude_none=True), spec_path=str(path),
        recipe=recipe_ref, batch=batch, world_size=world, micro_batch=micro_batch,
        output_dir=str(run_dir), run=run and run.to_dict(), resume=resume,
        force_replan=force_replan, dry_run=dry_run, max_steps=max_steps,
        precision=precision or spec.train.precision, compile=compile, backend=backend,
        rerun_command=continue_command(typed, run_dir, output_dir), print_json=as_json)
    options = LaunchOptions(nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                            rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id,
                            master_addr=master_addr, master_port=master_port,
                            max_restarts=max_restarts if not dry_run else 0)
    return ScaleJob(config, options, auto_resume)
