"""The ``date`` command line. It parses, calls and prints; nothing is derived here.

The options are declared in :mod:`date_engine.cli_options`. What ``date plan`` and ``date scale``
compute is :mod:`date_engine.commands`' (``plan_report``, ``scale_config``); the other commands
call the library's modules directly."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from date_engine import cli_options as o
from date_engine.checks import check_launch, output_file, output_folder, parse_size
from date_engine.errors import DateError, as_command_line
from date_engine.probe import DEFAULT_BRANCH_POINTS, DEFAULT_POINTS, DEFAULT_SHARE
from date_engine.sweep.schemes import DEFAULT_LR_GRID

app = typer.Typer(
    name="date",
    help="DATE: scale a small-batch training run that works to a large batch, without re-tuning.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a user's mistake into one line on stderr and exit code 2; errors name the flags."""
    try:
        with as_command_line():
            yield
    except DateError as exc:
        from date_engine.view.console import error_line

        _stderr().print(error_line(str(exc)))
        raise typer.Exit(2) from None


def _stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        from date_engine import __version__

        print(f"date-engine {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, o.flag("--version", callback=_version, is_eager=True,
                                           help="Print the version and exit.")] = False) -> None:
    """DATE (Dynamic Adaptive-Tuning Engine, You et al., SC'19): from a small-batch run that
    works, derive the large batch's learning rate, warmup, decay and the optimizer's
    batch-dependent settings, and train with them.

    `date` with no command, or with an option or +FORMAT of the system's date (date +%s, date -u,
    date --version), is the system's date; `date-engine` is this tool alone (date-engine
    --version gives its version)."""


def _typed(command: str) -> list[str] | None:
    """What the user typed after ``date COMMAND`` when this process was started so, else None
    (another caller: the tests' CliRunner, a script). The one place sys.argv is read."""
    return sys.argv[2:] if sys.argv[1:2] == [command] else None


def _command_line(command: str) -> str:
    """``date COMMAND ...`` as typed, quoted for a shell; empty under another caller."""
    return "" if (args := _typed(command)) is None else shlex.join(["date", command, *args])


# ---------------------------------------------------------------------------------- date plan


@app.command("plan", epilog="Example: date plan lenet-mnist --batch 8k --compare | date plan "
             "my.yaml --batch 8k --devices 64 --emit hf-args")
def plan_command(
    spec_arg: o.PlanSpecArg = None, *, batch: o.BatchOpt, nproc: o.NprocOpt = 1,
    micro_batch: o.MicroOpt = None, overrides: o.SetOpt = None, probe: o.ProbeOpt = None,
    budget: o.BudgetOpt = None, parallel: o.ParallelOpt = None, as_json: o.PlanJsonOpt = False,
    plot: o.PlotOpt = None, compare: o.CompareOpt = False, devices: o.DevicesOpt = None,
    bench: o.BenchOpt = None, baseline_devices: o.BaselineDevicesOpt = None, link: o.LinkOpt = None,
    emit: o.EmitOpt = None, device_memory: o.DeviceMemoryOpt = None, nnodes: o.NnodesOpt = 1,
    from_config: o.FromOpt = None, train_samples: o.TrainSamplesOpt = None,
    command: o.CommandOpt = None, cpus_per_process: o.CpusOpt = 1,
) -> None:
    """Show every number DATE derives for BATCH, with its formula, before any training: by
    default the optimizer family's rule (k^p·η0 and the optimizer's batch-dependent settings);
    --set date.rule=paper for the paper's √k·η0. --devices: the split; with --bench, the times
    and the speedup. --emit: the settings for HF's Trainer, Lightning or accelerate, or a Slurm
    script or Kubeflow TrainJob that trains the plan, or nanoGPT's or Megatron's own
    configuration. --from: the baseline of a HF, timm, nanoGPT or Megatron run."""
    from date_engine.commands import plan_report

    with user_errors():
        if plot is not None:
            output_file(plot, "--plot", (".png", ".pdf", ".svg"))
        if devices is not None and nproc != 1 and devices != nproc:
            raise DateError(f"--devices {devices} and --nproc {nproc} disagree; give one of them.")
        size = parse_size(batch, "--batch")
        report = plan_report(
            spec_arg, size, devices=devices or nproc, micro_batch=micro_batch,
            overrides=overrides, probe=probe, budget=budget, parallel=parallel,
            from_config=from_config, train_samples=train_samples,
            baseline_devices=baseline_devices, compare=compare, bench=bench, link=link,
            device_memory=device_memory, emit=emit is not None)
        run = report.run
        for line in report.lost:  # what the configuration sets that the plan cannot carry
            _stderr().print(f"note: {from_config} sets {line}.", markup=False, soft_wrap=True)
        if emit is not None:
            from date_engine.view.emit import plan_call, print_emitted, scale_args

            return print_emitted(emit, run, plan_call(
                report.spec_call, run, list(overrides or ()), probe and str(probe.absolute()),
                budget), from_config is None and scale_args(
                    str(spec_arg), batch, micro_batch, overrides, probe, budget, parallel),
                nnodes, report.recipe, command, _command_line("plan"), cpus_per_process)
        if plot is not None:
            from date_engine.view.plan import scheme_name
            from date_engine.view.plots import save_lr_plot

            save_lr_plot(plot, [(scheme_name(run.plan), run.plan), *report.others.items()])
        if as_json:
            from date_engine.view.plan import plan_document

            print(json.dumps(plan_document(run, report.parameters, report.others, report.times,
                                           report.spec.date.budget, report.memory), indent=2))
        else:
            from date_engine.view.plan import show_plan

            show_plan(Console(highlight=False), report.path, report.spec, run, report.others,
                      report.parameters, micro_batch, report.times, report.memory, devices,
                      report.sources)
        if plot is not None:
            _stderr().print(f"LR curve written to {plot}", markup=False)


# ---------------------------------------------------------------------------------- date scale


@app.command("scale", epilog=o.SCALE_EXAMPLES)
def scale_command(
    spec_arg: o.SpecArg, batch: o.BatchOpt, nproc: o.NprocOpt = 1, micro_batch: o.MicroOpt = None,
    overrides: o.SetOpt = None, output_dir: o.OutputOpt = None, resume: o.ResumeOpt = False,
    force_replan: o.ReplanOpt = False, dry_run: o.DryRunOpt = False,
    max_steps: o.MaxStepsOpt = None, precision: o.PrecisionOpt = None,
    compile: o.CompileOpt = False, recipe: o.RecipeOpt = None, backend: o.BackendOpt = None,
    nnodes: o.NnodesOpt = 1, node_rank: o.NodeRankOpt = None,
    rdzv_endpoint: o.RdzvEndpointOpt = None, rdzv_id: o.RdzvIdOpt = "date-engine",
    master_addr: o.MasterAddrOpt = None, master_port: o.MasterPortOpt = None,
    max_restarts: o.RestartsOpt = 0, as_json: o.ScaleJsonOpt = False, probe: o.ProbeOpt = None,
    budget: o.BudgetOpt = None, parallel: o.ParallelOpt = None, auto: o.AutoResumeOpt = False,
) -> None:
    """Train the spec's recipe at BATCH with the DATE plan: one process, several, or nodes."""
    from date_engine.commands import scale_config
    from date_engine.train.launch import launch, requeue_at_time_limit

    with user_errors():
        job = scale_config(
            spec_arg, parse_size(batch, "--batch"), nproc=nproc, nnodes=nnodes,
            micro_batch=micro_batch, overrides=overrides, probe=probe, budget=budget,
            parallel=parallel, recipe=recipe, output_dir=output_dir, resume=resume,
            auto_resume=auto, force_replan=force_replan, dry_run=dry_run, max_steps=max_steps,
            precision=precision, compile=compile, backend=backend, node_rank=node_rank,
            rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id, master_addr=master_addr,
            master_port=master_port, max_restarts=max_restarts, as_json=as_json,
            typed=_typed("scale"))
    code = launch(job.config, job.launch)
    if job.auto_resume:  # a job's run: under Slurm, its time limit's signal requeues it
        requeue_at_time_limit(code)
    if code:
        raise typer.Exit(code)


# ---------------------------------------------------------------------------------- date probe


@app.command("probe", epilog="Example: date probe lenet-mnist, then date plan lenet-mnist --batch "
             "4096 --probe runs/lenet-mnist-probe/probe.json --budget hold")
def probe_command(
    spec_arg: o.SpecArg, points: o.PointsOpt = DEFAULT_POINTS, share: o.ShareOpt = DEFAULT_SHARE,
    budget_minutes: o.MinutesOpt = None, nproc: o.NprocOpt = 1,
    micro_batch: o.ProbeMicroOpt = None, overrides: o.SetOpt = None,
    output_dir: o.ProbeOutputOpt = None, lr_check: o.LRCheckOpt = True,
    batch: o.ProbeBatchOpt = None, branch_points: o.BranchPointsOpt = DEFAULT_BRANCH_POINTS,
    branch_samples: o.BranchSamplesOpt = None,
) -> None:
    """Measure the gradient noise scale over the first part of the baseline's training, check
    whether a larger LR would train it faster, and forecast what larger batches cost: writes
    probe.json for date plan --probe. With --batch B, also branch from the probe's checkpoints at
    larger batches up to B: the critical batch and B's LR and second moment, measured."""
    from date_engine.commands import spec_of
    from date_engine.recipes import spec_recipe

    with user_errors():
        from date_engine.train import probe as probing

        path, spec = spec_of(spec_arg, overrides)
        recipe = spec_recipe(spec, source=str(path), to_train=True)
        check_launch(nproc)
        probing.check_probe(spec, nproc, micro_batch)  # refused up front
        folder, resume = probing.probe_folder(output_dir, recipe.name, spec)
        options = probing.ProbeOptions(
            share=share, points=points, max_minutes=budget_minutes, nproc=nproc,
            micro_batch=micro_batch, resume=resume, lr_check=lr_check,
            target_batch=parse_size(batch, "--batch") if batch is not None else None,
            branch_points=branch_points,
            branch_samples=parse_size(branch_samples, "--branch-samples")
            if branch_samples is not None else None)
        cost = probing.branch_budget(spec, recipe, options) \
            if options.target_batch is not None else None  # refused up front, as every input
        command = _command_line("probe")
    if cost is not None:
        _stderr().print(cost.line(), markup=False, soft_wrap=True)
    if resume:
        _stderr().print(f"continuing the interrupted probe in {folder} from its newest "
                        "checkpoint.", markup=False)
    probe, code = probing.run_probe(path, spec, recipe, options, folder, command)
    if probe is None:
        if code in (130, 143):
            _stderr().print(f"stopped; the probe's training in {folder} wrote a checkpoint. "
                            "Run the same command again to continue it.", markup=False)
        elif code != 2:  # after a refused input the error above is all there is to say
            _stderr().print(f"error: the probe measured too little to fit a noise curve (see "
                            f"{folder / 'run'}); give it a larger --share or --budget-minutes.",
                            markup=False)
        raise typer.Exit(code if code else 1)
    from date_engine.view.probe import probe_figure, render_probe

    console = Console(highlight=False)
    console.print(render_probe(probe, f"date probe {path} — recipe {recipe.name}"))
    figure = probe_figure(probe, folder / "probe.png")
    console.print(f"wrote {folder / 'probe.json'}" + (f" and {figure}" if figure else "")
                  + f"; use it with: date plan {spec_arg} --batch B --probe "
                  f"{folder / 'probe.json'}", soft_wrap=True, markup=False)


# ---------------------------------------------------------------------------------- date bench


@app.command("bench", epilog="Example: date bench lenet-mnist --nproc 2 -o bench/, then date plan "
             "lenet-mnist --batch 8k --devices 64 --bench bench/bench.json")
def bench_command(
    spec_arg: o.SpecArg, nproc: o.NprocOpt = 2, link: o.LinkOpt = None,
    micro_batches: o.MicroBatchesOpt = None, overrides: o.SetOpt = None,
    output_dir: o.BenchOutputOpt = Path("bench"),
) -> None:
    """Time the recipe's forward and backward pass, the optimizer's step and an all-reduce on this
    machine (about half a minute for the MNIST recipes, longer for large models): writes
    bench.json for date plan --devices N --bench."""
    from date_engine.commands import spec_of
    from date_engine.recipes import spec_recipe

    with user_errors():
        from date_engine.timing import Bench, parse_link
        from date_engine.train.bench import bench_job, micro_batch_sizes
        from date_engine.view.timing import render_bench

        path, spec = spec_of(spec_arg, overrides)
        recipe = spec_recipe(spec, source=str(path), to_train=True)
        check_launch(nproc)
        given = parse_link(link) if link is not None else None
        sizes = micro_batch_sizes(recipe, None if micro_batches is None else [
            parse_size(x, "--micro-batches") for x in micro_batches.split(",")],
            spec.baseline.dataset_size)
        output = output_folder(output_dir, "--output-dir") / "bench.json"
    code = bench_job(spec, path, recipe, sizes, output, given, nproc)
    if code:
        raise typer.Exit(code)
    with user_errors():
        Console(highlight=False).print(render_bench(Bench.read(output), output))


# ---------------------------------------------------------------------------------- date sweep


@app.command("sweep", epilog="Example: date sweep lenet-digits --batches 64,256 --schemes "
             "date,paper,linear --repeats 2 --jobs 2")
def sweep_command(
    spec_arg: o.SpecArg, batches: o.BatchesOpt, schemes: o.SchemesOpt = "date,linear",
    repeats: o.RepeatsOpt = 1, nproc: o.NprocOpt = 1, jobs: o.JobsOpt = 1,
    output_dir: o.SweepOutputOpt = None, overrides: o.SetOpt = None,
    lr_grid: o.GridOpt = DEFAULT_LR_GRID, tolerance: o.ToleranceOpt = "1%",
    evals: o.EvalsOpt = 10, report_only: o.ReportOnlyOpt = False, probe: o.SweepProbeOpt = None,
    budgets: o.BudgetsOpt = None, grid_set: o.GridSetOpt = None, bench: o.SweepBenchOpt = None,
) -> None:
    """Compare schemes across batch sizes: accuracy, time to accuracy, speedup, plots.

    Trains the baseline and every (batch, scheme, seed) cell through `date scale`; a re-run skips
    finished cells and resumes interrupted ones."""
    from date_engine import sweep as sw
    from date_engine.commands import spec_of
    from date_engine.recipes import spec_recipe
    from date_engine.sweep.schemes import unused_note
    from date_engine.view.report import SweepDisplay
    from date_engine.view.sweep import print_verdicts

    with user_errors():
        path, spec = spec_of(spec_arg, overrides)
        recipe = spec_recipe(spec, source=str(path), to_train=True)
        options = sw.SweepOptions(
            batches=sw.parse_batches(batches), schemes=sw.parse_schemes(schemes), repeats=repeats,
            lr_grid=tuple(sw.parse_lr_grid(lr_grid)), tolerance=sw.Tolerance.parse(tolerance),
            evals=evals, nproc=nproc, jobs=jobs,
            budgets=tuple(sw.parse_budgets(budgets)) if budgets is not None else (),
            probe=str(probe.resolve()) if probe is not None else None,
            grid_options=sw.parse_grid_options(grid_set))
        root = output_folder(output_dir or Path("sweeps") / path.stem, "--output-dir")
        cells = sw.plan_sweep(spec, options, recipe)
        console = Console(highlight=False)
        settings = sw.sweep_settings(path, spec, recipe, options, cells, list(overrides or ()),
                                  _command_line("sweep"),
                                  spec_of(spec_arg, overrides, probe)[1] if probe else None, bench)
        if note := unused_note(spec, [s.name for s in options.schemes]):
            from date_engine.view.console import note_line

            console.print(note_line(note), soft_wrap=True)
        if not report_only:
            console.print(f"date sweep: {len(cells)} cells of {recipe.name} into {root}; finished "
                          "cells are skipped, interrupted ones resumed.", soft_wrap=True,
                          markup=False)
        summary, code = sw.run_sweep(recipe, cells, options, root, settings, SweepDisplay(console),
                                  train=not report_only)
        if code != 2:  # after a refused input the error above is all there is to say
            print_verdicts(console, summary, options.labels, root / "report.md")
    if code:
        if code in (130, 143):
            _stderr().print("stopped; every running cell wrote a checkpoint. Run the same command "
                            "again to continue.")
        raise typer.Exit(code)


# ---------------------------------------------------------------------------------- date recipes

recipes_app = typer.Typer(help="The registered recipes and the shipped baselines.",
                          rich_markup_mode=None)
app.add_typer(recipes_app, name="recipes")


@recipes_app.callback(invoke_without_command=True)
def recipes_command(ctx: typer.Context, as_json: o.RecipesJsonOpt = False) -> None:
    """List the registered recipes: model, data set, parameters, training samples, metric, and the
    shipped baselines of each (date plan NAME and date recipes copy NAME take them).

    A table on a terminal; one tab-separated line per recipe in a pipe; --json for scripts."""
    if ctx.invoked_subcommand is not None:
        return
    with user_errors():
        from date_engine.recipes import list_recipes
        from date_engine.view.tables import print_recipes

        print_recipes(list_recipes(), as_json, sys.stdout.isatty())


@recipes_app.command("copy", epilog="Example: date recipes copy lenet-mnist my-baseline.yaml")
def recipes_copy_command(name: o.CopyNameArg, dest: o.CopyDestArg = None,
                         force: o.ForceOpt = False) -> None:
    """Copy a shipped baseline YAML to start your own spec from."""
    with user_errors():
        from date_engine.recipes import copy_shipped

        target = copy_shipped(name, dest, force)
        print(f"{target}: a copy of the {name} baseline; edit it, then: date plan {target} "
              "--batch B")


@recipes_app.command("new", epilog="Example: date recipes new my_model, then date scale "
                     "my_model.yaml --batch 256")
def recipes_new_command(name: o.NewNameArg, force: o.ForceOpt = False) -> None:
    """Write a recipe of your own to fill in (NAME.py: a model and its data) and its baseline
    (NAME.yaml); both run as written, on scikit-learn's digits."""
    with user_errors():
        from date_engine.recipes.template import write_template

        py, spec = write_template(name, Path("."), force)
        print(f"wrote {py} and {spec}; put your model and data in {py}, your baseline in {spec}, "
              f"then: date plan {spec} --batch B")


# ---------------------------------------------------------------------------------- date data

data_app = typer.Typer(help="Lay out data sets that install offline in the formats recipes read.",
                       no_args_is_help=True, rich_markup_mode=None)
app.add_typer(data_app, name="data")


@data_app.command("prepare", epilog="Example: date data prepare mnist data/mnist")
def data_prepare_command(name: o.DataNameArg, dest: o.DataDestArg,
                         source: o.SourceOpt = None) -> None:
    """Write a real data set in the format its recipes read (substitutes are named as such)."""
    with user_errors():
        from date_engine.data.prepare import prepare

        output_folder(dest, "DEST")
        Console(highlight=False, soft_wrap=True).print(prepare(name, dest, source), markup=False)


def main() -> None:
    """date_engine's command line as ``date`` (the ``date`` console script reaches it through
    :func:`date_engine.sysdate.main`, which first hands the system's calls over)."""
    app(prog_name="date")


def main_engine() -> None:
    """The ``date-engine`` console script and ``python -m date_engine``: never the system's date."""
    app(prog_name="date-engine" if Path(sys.argv[0]).name == "date-engine" else "date")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
