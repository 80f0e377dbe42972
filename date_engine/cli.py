"""The ``date`` command line. It parses, calls the library and prints; nothing is derived here."""

from __future__ import annotations

import dataclasses
import json
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional, get_args

import typer
from rich.console import Console

from date_engine.checks import (
    a_path,
    check_backend,
    check_endpoint,
    check_port,
    output_file,
    output_folder,
    parse_size,
)
from date_engine.errors import DateError
from date_engine.probe import DEFAULT_POINTS, DEFAULT_SHARE
from date_engine.spec import DateSpec, Spec, TrainSpec, load_spec
from date_engine.sweep.schemes import DEFAULT_LR_GRID

app = typer.Typer(
    name="date",
    help="DATE: scale a small-batch training run that works to a large batch, without re-tuning.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _opt(*names: str, help: str, **kwargs) -> typer.models.OptionInfo:
    """An option that takes a value (no default shown unless asked)."""
    return typer.Option(*names, help=help, show_default=kwargs.pop("show_default", False),
                        **kwargs)


def _path(text: str) -> Path:
    """A path option's text as a Path, refused when empty or blank (``Path("")`` is ``.``)."""
    try:
        return a_path(text, "the path")
    except DateError:
        raise typer.BadParameter("an empty path; give a file or folder name.") from None


def _path_opt(*names: str, help: str) -> typer.models.OptionInfo:
    """An option that names a file or folder."""
    return _opt(*names, help=help, parser=_path, metavar="PATH")


def _flag(*names: str, help: str, **kwargs) -> typer.models.OptionInfo:
    """An on/off option: given or not, it takes no value."""
    return typer.Option(*names, help=help, metavar=" ", show_default=False, **kwargs)


SpecArg = Annotated[str, typer.Argument(
    metavar="SPEC", show_default=False,
    help="Baseline YAML, or the name of a shipped one (date recipes lists them).")]
BatchOpt = Annotated[str, _opt("--batch", "-b", metavar="B",
                               help="Target global batch size B (8k = 8192).")]
NprocOpt = Annotated[int, typer.Option("--nproc", "-n", help="Processes (data-parallel replicas).")]
MicroOpt = Annotated[Optional[int], _opt(
    "--micro-batch", help="Samples per process per pass (default: train.micro_batch, else the "
    "recipe's, fitted to B/nproc).")]
SetOpt = Annotated[Optional[list[str]], _opt(
    "--set", metavar="KEY=VALUE", help="Override a spec value, e.g. --set baseline.lr=0.1 "
    "(repeatable).")]
ProbeOpt = Annotated[Optional[Path], _path_opt(
    "--probe", help="probe.json from date probe of this baseline: forecast what holding its "
    "loss costs at BATCH; where its LR check fires the adaptive family's LR grows as √k "
    "(sets date.probe).")]
Parallel = TrainSpec.model_fields["parallel"].annotation
ParallelOpt = Annotated[Optional[Parallel], _opt(
    "--parallel", metavar="|".join(get_args(Parallel)),
    help="ddp: every process holds the whole model; fsdp: parameters, gradients and optimizer "
    "state sharded over the processes (FSDP2), for models that do not fit one device (sets "
    "train.parallel).")]
BudgetOpt = Annotated[Optional[str], _opt(
    "--budget", metavar="same-epochs|hold|ramp", help="same-epochs: the baseline's epochs "
    "(default); hold: the epochs the probe forecasts to reach the baseline's loss; ramp: a batch "
    "that doubles up to --batch as the noise scale grows, as the run measures it unless "
    "date.ramp is planned (sets date.budget).")]


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a user's mistake into one line on stderr and exit code 2."""
    try:
        yield
    except DateError as exc:
        from date_engine.view.console import error_line

        Console(stderr=True, highlight=False, soft_wrap=True).print(error_line(str(exc)))
        raise typer.Exit(2) from None


def _version(value: bool) -> None:
    if value:
        from date_engine import __version__

        print(f"date-engine {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, _flag("--version", callback=_version, is_eager=True,
                                         help="Print the version and exit.")] = False) -> None:
    """DATE (Dynamic Adaptive-Tuning Engine, You et al., SC'19): from a small-batch run that
    works, derive the large batch's learning rate, warmup, decay and the optimizer's
    batch-dependent settings, and train with them.

    `date` with no command, or with an option or +FORMAT of the system's date (date +%s, date -u,
    date --version), is the system's date; `date-engine` is this tool alone (date-engine
    --version gives its version)."""


def _spec(arg: str, overrides: list[str] | None, probe: Path | None = None,
          budget: str | None = None, parallel: str | None = None) -> tuple[Path, Spec]:
    """SPEC as a file, else as the name of a shipped baseline; validated, overrides applied
    (``--probe``, ``--budget`` and ``--parallel`` last: they are date.probe, date.budget and
    train.parallel)."""
    from date_engine.recipes import shipped_specs

    overrides = list(overrides or ())
    if parallel is not None:
        overrides.append(f"train.parallel={json.dumps(parallel)}")
    if probe is not None:  # absolute, so that every process and sweep cell finds it
        overrides.append(f"date.probe={json.dumps(str(probe.absolute()))}")
    if budget is not None:
        budgets = get_args(DateSpec.model_fields["budget"].annotation)
        if budget not in budgets:
            raise DateError(f"--budget: must be one of {', '.join(budgets)}; got {budget!r}.")
        overrides.append(f"date.budget={json.dumps(budget)}")

    path = a_path(arg, "SPEC")
    if not path.exists() and path.suffix == "" and len(path.parts) == 1:
        shipped = shipped_specs()
        if arg not in shipped:
            raise DateError(f"{arg}: no such file, and no shipped baseline of that name; give a "
                            f"YAML path, or one of {', '.join(shipped)}.")
        path = shipped[arg]
    return path, load_spec(path, overrides or ())


# ---------------------------------------------------------------------------------- date plan


@app.command("plan", epilog="Example: date plan lenet-mnist --batch 8k --compare")
def plan_command(
    spec_arg: SpecArg, batch: BatchOpt, nproc: NprocOpt = 1, micro_batch: MicroOpt = None,
    overrides: SetOpt = None, probe: ProbeOpt = None, budget: BudgetOpt = None,
    parallel: ParallelOpt = None,
    as_json: Annotated[bool, _flag("--json", help="Print the plan as one JSON object.")] = False,
    plot: Annotated[Optional[Path], _path_opt(
        "--plot", help="Also draw the LR curve into this PNG (or .pdf, .svg).")] = None,
    compare: Annotated[bool, _flag("--compare", help="Show beside it the other rule (the "
                                   "paper's, or DATE's default) and linear scaling + constant "
                                   "warmup (Goyal et al.).")] = False,
    devices: Annotated[Optional[int], _opt(
        "--devices", min=1, help="Forecast the wall-clock time on this many devices (with "
        "--bench; the batch is split over them as over --nproc processes).")] = None,
    bench: Annotated[Optional[Path], _path_opt(
        "--bench", help="bench.json from date bench on your hardware: the step times the "
        "forecast is built from.")] = None,
    baseline_devices: Annotated[Optional[int], _opt(
        "--baseline-devices", min=1, help="Devices the baseline runs on, for the speedup "
        "(default: its batch ÷ the micro-batch).")] = None,
    link: LinkOpt = None,
) -> None:
    """Show every number DATE derives for BATCH, with its formula, before any training: by
    default the optimizer family's rule (k^p·η0 and the optimizer's batch-dependent settings);
    --set date.rule=paper for the paper's √k·η0. With --devices and --bench: the time of a step,
    of the run and of the baseline, and the speedup."""
    from date_engine.runplan import resolve_plan
    from date_engine.sweep.schemes import SCHEMES, scheme_spec

    with user_errors():
        if plot is not None:
            output_file(plot, "--plot", (".png", ".pdf", ".svg"))
        path, spec = _spec(spec_arg, overrides, probe, budget, parallel)
        size, recipe = parse_size(batch, "--batch"), _known_recipe(spec)
        nproc, timed = _devices(nproc, devices, bench, link)
        parameters = None
        if spec.train.parallel == "fsdp" and recipe is not None:  # the bytes each process holds
            parameters = recipe.parameter_count(recipe.parse_options(spec.model))
        planned = resolve_plan(spec, size, nproc, micro_batch, recipe)
        others = {}
        if compare:  # the other rule, and what most people do today
            for name in ("paper" if spec.date.rule == "date" else "date", "linear"):
                other = scheme_spec(spec, SCHEMES[name])
                others[name] = resolve_plan(other, size, nproc, micro_batch, recipe).plan
        if plot is not None:
            from date_engine.view.plan import scheme_name
            from date_engine.view.plots import save_lr_plot

            save_lr_plot(plot, [(scheme_name(planned.plan), planned.plan), *others.items()])
        times = timed and _forecasts(timed, spec, planned, size, micro_batch, recipe,
                                     baseline_devices)
        if as_json:
            document = planned.document(parameters)
            if others:
                document["compare"] = {name: p.to_dict() for name, p in others.items()}
            if times:
                document["time"] = {**times[spec.date.budget].to_dict(), "budgets": {
                    name: {"steps": t.steps, "run_seconds": t.run_seconds,
                           "speedup": t.speedup} for name, t in times.items()}}
            print(json.dumps(document, indent=2))
        else:
            _print_plan(path, spec, planned, others, parameters)
            if times:
                from date_engine.view.timing import render_time

                Console(highlight=False).print(render_time(times[spec.date.budget], times))
        if plot is not None:
            Console(stderr=True).print(f"LR curve written to {plot}", markup=False)


def _devices(nproc: int, devices: int | None, bench: Path | None, link: str | None):
    """(the processes the batch is split over, (bench.json's path, the link given) or None) for
    --devices and --bench, refused in one sentence where they do not go together."""
    from date_engine.timing import parse_link

    if devices is not None and nproc != 1 and devices != nproc:
        raise DateError(f"--devices {devices} and --nproc {nproc} disagree; give one of them.")
    if devices is not None and bench is None:
        raise DateError("--devices forecasts the time from the step times date bench measures: "
                        "run date bench SPEC -o bench/ on your hardware, then add --bench "
                        "bench/bench.json.")
    if bench is None:
        if link is not None:
            raise DateError("--link goes with --bench (it replaces the bench's measured link).")
        return nproc, None
    return devices or nproc, (bench, parse_link(link) if link is not None else None)


def _forecasts(timed, spec: Spec, planned, size: int, micro_batch: int | None, recipe,
               baseline_devices: int | None) -> dict:
    """The time forecast of every budget the spec can plan (same-epochs; hold and ramp with a
    probe), the spec's own among them."""
    from date_engine.runplan import resolve_plan
    from date_engine.timing import Bench, forecast

    path, link = timed
    b0 = planned.plan.baseline_batch
    if baseline_devices is not None and b0 % baseline_devices:
        raise DateError(f"--baseline-devices {baseline_devices}: the baseline's batch {b0} does "
                        "not split evenly over them; give a number that divides it.")
    bench = Bench.read(path)
    bench.check(path, recipe and recipe.name, planned.split.world_size, link)
    budgets = ["same-epochs", *(("hold", "ramp") if spec.date.probe is not None else ())]
    times = {}
    for name in budgets:
        each = planned if name == spec.date.budget else resolve_plan(
            spec.model_copy(update={"date": spec.date.model_copy(update={"budget": name})}),
            size, planned.split.world_size, micro_batch, recipe)
        times[name] = forecast(bench, each, baseline_devices, link, spec.train.precision)
    return times


def _known_recipe(spec: Spec):
    """The spec's recipe, its model options checked (``date plan`` works without one; one the spec
    names must be found, as date scale would need it)."""
    from date_engine.recipes import get_recipe

    if spec.recipe is None:
        return None
    found = get_recipe(spec.recipe)
    found.parse_options(spec.model)
    return found


def _print_plan(path: Path, spec: Spec, planned, others, parameters: int | None) -> None:
    from date_engine.view.plan import render_comparison, render_plan

    console = Console(highlight=False)
    width = max(32, min(console.width - 14, 90))
    title = f"DATE plan for {path}" + (f" (recipe {spec.recipe})" if spec.recipe else "")
    console.print(render_plan(planned.plan, planned.split, title, chart_width=width,
                              sharding=planned.sharding(parameters)))
    if others:
        console.print()
        console.print(render_comparison(planned.plan, others, chart_width=width))


# ---------------------------------------------------------------------------------- date scale

OutputOpt = Annotated[Optional[Path], _path_opt(
    "--output-dir", "-o", help="Run folder (default: train.output_dir, else "
    "runs/<recipe>-B<batch>[-hold|-ramp], then -2, -3, ... for each new run).")]
ResumeOpt = Annotated[bool, _flag(
    "--resume", help="Continue from the newest valid checkpoint (of the newest default run "
    "folder, without --output-dir).")]
ReplanOpt = Annotated[bool, _flag(
    "--force-replan", help="Resume a checkpoint written for another plan (batch, processes, "
    "spec).")]
DryRunOpt = Annotated[bool, _flag(
    "--dry-run", help="Validate everything, then 2 tiny steps on the CPU in a temporary folder.")]
MaxStepsOpt = Annotated[Optional[int], _opt(
    "--max-steps", min=1, help="Stop after this optimizer step (checkpointed; the schedule is "
    "unchanged).")]
Precision = TrainSpec.model_fields["precision"].annotation  # the spec's Literal: one list
PrecisionOpt = Annotated[Optional[Precision], _opt(
    "--precision", metavar="|".join(get_args(Precision)),
    help="CUDA only; default: train.precision.")]
CompileOpt = Annotated[bool, _flag("--compile", help="torch.compile the model (CUDA only).")]
RecipeOpt = Annotated[Optional[str], _opt(
    "--recipe", help="Recipe name or package.module:function (default: the spec's).")]
BackendOpt = Annotated[Optional[str], _opt(
    "--backend", help="Process-group backend: gloo, nccl or mpi (default: nccl on CUDA, gloo on "
    "CPU).")]
NnodesOpt = Annotated[int, typer.Option("--nnodes", min=1, help="Nodes in the job.")]
NodeRankOpt = Annotated[Optional[int], _opt(
    "--node-rank", help="This node's rank (static rendezvous at --master-addr).")]
RdzvEndpointOpt = Annotated[Optional[str], _opt(
    "--rdzv-endpoint", help="host:port of the c10d rendezvous (multi-node).")]
RdzvIdOpt = Annotated[str, typer.Option("--rdzv-id", help="Job id shared by all nodes.")]
MasterAddrOpt = Annotated[Optional[str], _opt("--master-addr", help="Static rendezvous host.")]
MasterPortOpt = Annotated[Optional[int], _opt("--master-port", help="Static rendezvous port.")]
RestartsOpt = Annotated[int, typer.Option(
    "--max-restarts", min=0, help="Restart failed workers this often (they resume from the newest "
    "checkpoint).")]
ScaleJsonOpt = Annotated[bool, _flag(
    "--json", help="At the end, print the run's plan and summary as one JSON object on stdout "
    "(everything else goes to stderr).")]
SCALE_EXAMPLES = ("Examples: date scale lenet-digits --batch 256 | date scale my.yaml --batch 8k "
                  "--nproc 8 | date scale my.yaml --batch 8k --dry-run --json | date scale my.yaml "
                  "--batch 8k --resume")


@app.command("scale", epilog=SCALE_EXAMPLES)
def scale_command(
    spec_arg: SpecArg, batch: BatchOpt, nproc: NprocOpt = 1, micro_batch: MicroOpt = None,
    overrides: SetOpt = None, output_dir: OutputOpt = None, resume: ResumeOpt = False,
    force_replan: ReplanOpt = False, dry_run: DryRunOpt = False, max_steps: MaxStepsOpt = None,
    precision: PrecisionOpt = None, compile: CompileOpt = False, recipe: RecipeOpt = None,
    backend: BackendOpt = None, nnodes: NnodesOpt = 1, node_rank: NodeRankOpt = None,
    rdzv_endpoint: RdzvEndpointOpt = None, rdzv_id: RdzvIdOpt = "date-engine",
    master_addr: MasterAddrOpt = None, master_port: MasterPortOpt = None,
    max_restarts: RestartsOpt = 0, as_json: ScaleJsonOpt = False, probe: ProbeOpt = None,
    budget: BudgetOpt = None, parallel: ParallelOpt = None,
) -> None:
    """Train the spec's recipe at BATCH with the DATE plan: one process, several, or nodes."""
    with user_errors():
        path, spec = _spec(spec_arg, overrides, probe, budget, parallel)
        if recipe is not None and not recipe.strip():
            raise DateError("--recipe: empty; give a recipe name (date recipes lists them) or "
                            "package.module:function.")
        size, recipe_ref = parse_size(batch, "--batch"), recipe or spec.recipe
        found = _recipe_to_train(path, spec, recipe_ref, option=True)
        _check_launch(nproc, backend, rdzv_endpoint, master_port)
        from date_engine.runplan import resolve_plan
        from date_engine.train.config import RunConfig
        from date_engine.train.launch import LaunchOptions, launch
        from date_engine.train.runtime import job_environment

        job = job_environment()  # started by torchrun or srun: that job's size is the truth
        world = job.world_size if job.launcher != "none" else nproc * nnodes
        if spec.baseline.dataset_size or found.dataset_size:  # else n is known once data loads
            resolve_plan(spec, size, world, micro_batch, found)  # refuse before any process starts
        budget_name = "" if spec.date.budget == "same-epochs" else f"-{spec.date.budget}"
        run_dir = _run_folder(output_dir, spec, f"runs/{found.name}-B{size}{budget_name}", resume,
                              versioned=job.launcher == "none" and nnodes == 1, dry_run=dry_run)
        config = RunConfig(
            spec=spec.model_dump(mode="json", exclude_none=True), spec_path=str(path),
            recipe=recipe_ref, batch=size, world_size=world, micro_batch=micro_batch,
            output_dir=str(run_dir), resume=resume, force_replan=force_replan, dry_run=dry_run,
            max_steps=max_steps, precision=precision or spec.train.precision, compile=compile,
            backend=backend, rerun_command=_continue_command(_typed("scale"), run_dir, output_dir),
            print_json=as_json)
        options = LaunchOptions(nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                                rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id,
                                master_addr=master_addr, master_port=master_port,
                                max_restarts=max_restarts if not dry_run else 0)
    code = launch(config, options)
    if code:
        raise typer.Exit(code)


def _run_folder(output_dir: Path | None, spec: Spec, default: str, resume: bool, versioned: bool,
                dry_run: bool) -> Path:
    """``--output-dir``, else ``train.output_dir``, else a new versioned default folder (the
    newest one with checkpoints when resuming)."""
    from date_engine.runfolder import default_run_folder

    if output_dir is None and spec.train.output_dir is None and versioned:
        run_dir = default_run_folder(Path(default), resume)
        option = "the default run folder (--output-dir)"
    else:
        run_dir = output_dir or Path(spec.train.output_dir or default)
        option = "--output-dir" if output_dir else "train.output_dir" \
            if spec.train.output_dir else "the default run folder (--output-dir)"
    if not dry_run:
        output_folder(run_dir, option)
    return run_dir


def _check_launch(nproc: int, backend: str | None, endpoint: str | None, port: int | None) -> None:
    """The launch options, before any process starts."""
    if nproc < 1:
        raise DateError(f"--nproc must be a positive whole number, got {nproc}.")
    check_endpoint(endpoint)
    check_port(port, "--master-port")
    if backend is not None:
        import torch

        check_backend(backend, torch.cuda.is_available())


def _recipe_to_train(spec_path: Path, spec: Spec, ref: str | None, option: bool = False):
    """The recipe a training command runs, its model options and the packages it needs checked
    before any process starts. ``option``: the command has a --recipe option to name it with."""
    from date_engine.recipes import get_recipe

    if ref is None:
        hint = " or pass --recipe" if option else ""
        raise DateError(f"{spec_path}: no recipe to train; add 'recipe: <name>' to the spec{hint} "
                        "(see `date recipes`).")
    found = get_recipe(ref)
    found.parse_options(spec.model)  # a bad model option fails here
    found.check_requirements()
    return found


def _typed(command: str) -> list[str] | None:
    """What the user typed after ``date COMMAND`` when this process was started so, else None
    (another caller: the tests' CliRunner, a script). The one place sys.argv is read."""
    return sys.argv[2:] if sys.argv[1:2] == [command] else None


def _command_line(command: str) -> str:
    """``date COMMAND ...`` as typed, quoted for a shell; empty under another caller."""
    args = _typed(command)
    return "" if args is None else " ".join(["date", command, *map(shlex.quote, args)])


def _continue_command(args: list[str] | None, run_dir: Path, output_dir: Path | None) -> str:
    """The command line that continues this run from what was typed after ``date scale``:
    without --resume and --max-steps, and naming the run folder when it was chosen by default
    (a new run would take the next one)."""
    if args is None:
        return ""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--max-steps":
            skip = True
        elif arg != "--resume" and not arg.startswith("--max-steps="):
            kept.append(shlex.quote(arg))
    if output_dir is None:
        kept += ["-o", shlex.quote(str(run_dir))]
    return " ".join(["date", "scale", *kept])


# ---------------------------------------------------------------------------------- date probe

PointsOpt = Annotated[int, typer.Option(
    "--points", min=2, help="Noise-scale measurements kept, one per equal stretch of the probe.")]
ShareOpt = Annotated[float, typer.Option(
    "--share", min=0.001, max=1.0, help="Share of the baseline's optimizer steps to train.")]
MinutesOpt = Annotated[Optional[float], _opt(
    "--budget-minutes", min=0.01, help="Stop after this many minutes of training, even before "
    "--share is reached (the LR check then trains as many steps again).")]
ProbeMicroOpt = Annotated[Optional[int], _opt(
    "--micro-batch", help="Samples per process per pass (default: half the baseline's batch on one "
    "process, each process's share on several: two or more gradients per step).")]
LRCheckOpt = Annotated[bool, typer.Option(
    "--lr-check/--no-lr-check", help="Train the probe's steps again at twice the baseline's LR: "
    "where that does not lower the loss, the forecast expects no steps saved at a larger batch "
    "(about doubles the probe's time).")]
ProbeOutputOpt = Annotated[Optional[Path], _path_opt(
    "--output-dir", "-o", help="Probe folder: probe.json, probe.png and the training run "
    "(default: runs/<recipe>-probe, then -2, -3, ...).")]


@app.command("probe", epilog="Example: date probe lenet-mnist, then date plan lenet-mnist --batch "
             "4096 --probe runs/lenet-mnist-probe/probe.json --budget hold")
def probe_command(
    spec_arg: SpecArg, points: PointsOpt = DEFAULT_POINTS, share: ShareOpt = DEFAULT_SHARE,
    budget_minutes: MinutesOpt = None, nproc: NprocOpt = 1, micro_batch: ProbeMicroOpt = None,
    overrides: SetOpt = None, output_dir: ProbeOutputOpt = None, lr_check: LRCheckOpt = True,
) -> None:
    """Measure the gradient noise scale over the first part of the baseline's training, check
    whether a larger LR would train it faster, and forecast what larger batches cost: writes
    probe.json for date plan --probe."""
    with user_errors():
        from date_engine.train.probe import ProbeOptions, measuring_micro_batch, run_probe

        path, spec = _spec(spec_arg, overrides)
        recipe = _recipe_to_train(path, spec, spec.recipe)
        _check_launch(nproc, None, None, None)
        measuring_micro_batch(spec.baseline.batch_size, nproc, micro_batch)  # refuse up front
        folder, resume = _probe_folder(output_dir, recipe.name, spec)
        options = ProbeOptions(share=share, points=points, max_minutes=budget_minutes,
                               nproc=nproc, micro_batch=micro_batch, resume=resume,
                               lr_check=lr_check)
        command = _command_line("probe")
    if resume:
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"continuing the interrupted probe in {folder} from its newest checkpoint.",
            markup=False)
    probe, code = run_probe(path, spec, recipe, options, folder, command)
    if probe is None:
        err = Console(stderr=True, highlight=False, soft_wrap=True)
        if code in (130, 143):
            err.print(f"stopped; the probe's training in {folder} wrote a checkpoint. "
                      "Run the same command again to continue it.", markup=False)
        elif code != 2:  # after a refused input the error above is all there is to say
            err.print(f"error: the probe measured too little to fit a noise curve (see "
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


def _probe_folder(output_dir: Path | None, recipe: str, spec: Spec) -> tuple[Path, bool]:
    """Where the probe goes, and whether it continues an interrupted one there: ``--output-dir``,
    else the first of runs/<recipe>-probe, -2, -3, ... that holds no finished probe. A folder
    whose probe was stopped before probe.json is continued from its checkpoint when it probed
    this spec; a finished probe, or an interrupted one of another spec, is refused for
    ``--output-dir`` and passed over otherwise."""
    from date_engine.runfolder import folder_versions
    from date_engine.train.probe import probe_state

    candidates = [output_dir] if output_dir is not None else \
        folder_versions(Path(f"runs/{recipe}-probe"))
    for folder in candidates:
        state = probe_state(folder, spec)
        if state in ("empty", "interrupted"):
            return output_folder(folder, "--output-dir"), state == "interrupted"
        if output_dir is None:
            continue
        if state == "finished":
            raise DateError(f"{folder} already holds a finished probe ({folder / 'probe.json'}); "
                            f"use it with date plan SPEC --batch B --probe "
                            f"{folder / 'probe.json'}, or choose another --output-dir.")
        raise DateError(f"{folder} holds an interrupted probe of another spec ({folder / 'run'}); "
                        "choose another --output-dir, or remove that folder.")
    raise DateError(f"runs/{recipe}-probe: every numbered folder is taken; pass --output-dir.")


# ---------------------------------------------------------------------------------- date bench

LinkOpt = Annotated[Optional[str], _opt(
    "--link", metavar="BANDWIDTH,LATENCY", help="The fabric's all-reduce link, e.g. 25GB/s,5us "
    "(NVLink, InfiniBand), instead of the one measured here.")]
MicroBatchesOpt = Annotated[Optional[str], _opt(
    "--micro-batches", help="Micro-batch sizes to time, comma-separated (default: the recipe's "
    "micro-batch and its half, quarter, eighth and sixteenth).")]


@app.command("bench", epilog="Example: date bench lenet-mnist --nproc 2 -o bench/, then date plan "
             "lenet-mnist --batch 8k --devices 64 --bench bench/bench.json")
def bench_command(
    spec_arg: SpecArg, nproc: NprocOpt = 2, link: LinkOpt = None,
    micro_batches: MicroBatchesOpt = None, overrides: SetOpt = None,
    output_dir: Annotated[Path, _path_opt("--output-dir", "-o", help="Folder for bench.json.")]
    = Path("bench"),
) -> None:
    """Time the recipe's forward and backward pass, the optimizer's step and an all-reduce on this
    machine (about half a minute for the MNIST recipes, longer for large models): writes
    bench.json for date plan --devices N --bench."""
    with user_errors():
        from date_engine.timing import parse_link

        path, spec = _spec(spec_arg, overrides)
        recipe = _recipe_to_train(path, spec, spec.recipe)
        _check_launch(nproc, None, None, None)
        given = parse_link(link) if link is not None else None
        if micro_batches is None:  # a run's micro-batches lie at or below the recipe's
            most = recipe.default_micro_batch
            sizes = sorted({max(1, most >> k) for k in range(5)})  # m, m/2, …, m/16
        else:
            sizes = sorted({parse_size(x, "--micro-batches") for x in micro_batches.split(",")})
        output = output_folder(output_dir, "--output-dir") / "bench.json"
        config = json.dumps({"spec": spec.model_dump(mode="json", exclude_none=True),
                             "spec_path": str(path), "recipe": spec.recipe or recipe.name,
                             "micro_batches": sizes, "output": str(output.absolute()),
                             "link": given and dataclasses.asdict(given)})
    code = _run_bench(config, nproc)
    if code:
        raise typer.Exit(code)
    from date_engine.timing import Bench
    from date_engine.view.timing import render_bench

    Console(highlight=False).print(render_bench(Bench.read(output), output))


def _run_bench(config: str, nproc: int) -> int:
    from date_engine.train.launch import LaunchOptions, elastic

    if nproc == 1:  # in this process
        from date_engine.train.bench import run

        return run(json.loads(config))
    return elastic(config, LaunchOptions(nproc=nproc), module="date_engine.train.bench")


# ---------------------------------------------------------------------------------- date sweep

BatchesOpt = Annotated[str, _opt(
    "--batches", help="Global batch sizes, comma-separated (8k = 8192). The baseline's batch is "
    "always run, as the reference.")]
SchemesOpt = Annotated[str, typer.Option(
    "--schemes", help="Comma-separated: date, paper, linear, none, lars, lamb, adam.")]
RepeatsOpt = Annotated[int, typer.Option(
    "--repeats", "-r", min=1, help="Seeds per cell: train.seed, train.seed + 1, ... (the "
    "report says how many would narrow a close call to the tolerance).")]
JobsOpt = Annotated[int, typer.Option(
    "--jobs", "-j", min=1, help="Cells trained at once (the CPU threads are shared out).")]
SweepOutputOpt = Annotated[Optional[Path], _path_opt(
    "--output-dir", "-o", help="Sweep folder (default: sweeps/<spec name>).")]
GridOpt = Annotated[str, typer.Option(
    "--lr-grid", help="Peak LRs tried by lars, lamb and adam; the best per batch is kept.")]
ToleranceOpt = Annotated[str, typer.Option(
    "--tolerance", help="How close to the baseline's metric counts as holding it: an amount in "
    "the metric's units (0.3) or a percentage (5%); schemes whose seed-by-seed interval lies "
    "within it read level.")]
EvalsOpt = Annotated[int, typer.Option(
    "--evals", min=1, help="Evaluations per cell, evenly spaced (time-to-accuracy is read at "
    "them).")]
BudgetsOpt = Annotated[Optional[str], typer.Option(
    "--budgets", metavar="same-epochs,hold,ramp,ramp-planned", help="Train each scheme once "
    "per budget (date.budget; ramp-planned: a ramp with date.ramp planned), side by side as "
    "scheme+budget; all but same-epochs need --probe. Default: the spec's budget.")]
GridSetOpt = Annotated[Optional[list[str]], _opt(
    "--grid-set", metavar="KEY=VALUE", help="An option of the optimizer lars, lamb and adam "
    "tune, e.g. --grid-set phi_bounds=[1,10] (repeatable).")]
ReportOnlyOpt = Annotated[bool, _flag(
    "--report-only", help="Train nothing; write the report from the cells already run.")]


@app.command("sweep", epilog="Example: date sweep lenet-digits --batches 64,256 --schemes "
             "date,paper,linear --repeats 2 --jobs 2")
def sweep_command(
    spec_arg: SpecArg, batches: BatchesOpt, schemes: SchemesOpt = "date,linear",
    repeats: RepeatsOpt = 1, nproc: NprocOpt = 1, jobs: JobsOpt = 1,
    output_dir: SweepOutputOpt = None, overrides: SetOpt = None, lr_grid: GridOpt = DEFAULT_LR_GRID,
    tolerance: ToleranceOpt = "1%", evals: EvalsOpt = 10, report_only: ReportOnlyOpt = False,
    probe: Annotated[Optional[Path], _path_opt(
        "--probe", help="probe.json of the baseline: the report puts each batch's forecast beside "
        "what its cells measured, --budgets hold and ramp train with it, and the date scheme's "
        "cells read its LR check (√k for the adaptive family where it fires).")] = None,
    budgets: BudgetsOpt = None, grid_set: GridSetOpt = None,
    bench: Annotated[Optional[Path], _path_opt(
        "--bench", help="bench.json from date bench on this machine: the report puts each "
        "cell's forecast training time beside the measured one.")] = None,
) -> None:
    """Compare schemes across batch sizes: accuracy, time to accuracy, speedup, plots.

    Trains the baseline and every (batch, scheme, seed) cell through `date scale`; a re-run skips
    finished cells and resumes interrupted ones."""
    with user_errors():
        from date_engine.sweep import (SweepOptions, Tolerance, parse_batches,  # noqa: I001
                                       parse_budgets, parse_grid_options, parse_lr_grid,
                                       parse_schemes, plan_sweep, run_sweep, sweep_forecast,
                                       sweep_time_forecast)
        from date_engine.sweep.schemes import DATE_SETTABLE, given_settings, unused_settings

        path, spec = _spec(spec_arg, overrides)
        recipe = _recipe_to_train(path, spec, spec.recipe)
        options = SweepOptions(
            batches=parse_batches(batches), schemes=parse_schemes(schemes), repeats=repeats,
            lr_grid=tuple(parse_lr_grid(lr_grid)), tolerance=Tolerance.parse(tolerance),
            evals=evals, nproc=nproc, jobs=jobs,
            budgets=tuple(parse_budgets(budgets)) if budgets is not None else (),
            probe=str(probe.resolve()) if probe is not None else None,
            grid_options=parse_grid_options(grid_set))
        root = output_folder(output_dir or Path("sweeps") / path.stem, "--output-dir")
        cells = plan_sweep(spec, options, recipe)
        console = Console(highlight=False)
        command = _command_line("sweep")
        settings = {"spec": str(path), "recipe": recipe.name, "overrides": list(overrides or ()),
                    "command": command, "batches": options.batches,
                    "schemes": [s.name for s in options.schemes], "repeats": repeats,
                    "budgets": list(options.budgets),
                    "tolerance": str(options.tolerance)}
        if probe is not None:
            settings["forecast"] = sweep_forecast(_spec(spec_arg, overrides, probe)[1],
                                                  options.batches, nproc, recipe)
        if bench is not None:
            settings["time_forecast"] = sweep_time_forecast(bench, cells, recipe.name)
        names = [s.name for s in options.schemes]
        if "date" in names and (taken := given_settings(spec, DATE_SETTABLE)):
            settings["date_settings"] = taken
        if unused := unused_settings(spec, names):
            from date_engine.view.console import note_line

            console.print(note_line(
                f"{', '.join(unused)} reaches no scheme's cells: the schemes (--schemes) set their "
                "own rule, and every one but date its own LR scaling and warmup; to compare the "
                "default rule's settings, sweep the date scheme with them."), soft_wrap=True)
        if not report_only:
            console.print(f"date sweep: {len(cells)} cells of {recipe.name} into {root}; finished "
                          "cells are skipped, interrupted ones resumed.", soft_wrap=True,
                          markup=False)
        summary, code = run_sweep(recipe, cells, options, root, settings, console,
                                  train=not report_only)
        if code != 2:  # after a refused input the error above is all there is to say
            _print_verdicts(console, summary, options.labels, root)
    if code:
        if code in (130, 143):
            Console(stderr=True).print("stopped; every running cell wrote a checkpoint. Run the "
                                       "same command again to continue.", soft_wrap=True)
        raise typer.Exit(code)


def _print_verdicts(console: Console, summary, schemes: list[str], root: Path) -> None:
    from rich.text import Text

    from date_engine.view.sweep import side_by_side_lines

    for scheme, verdict in summary.verdicts(schemes).items():
        console.print(Text.assemble((scheme, "bold"), f": {verdict}."), soft_wrap=True)
    for line in side_by_side_lines(summary):
        console.print(f"{line}.", soft_wrap=True, markup=False, highlight=False)
    console.print(f"report: {root / 'report.md'}", soft_wrap=True, markup=False)


# ---------------------------------------------------------------------------------- date recipes

recipes_app = typer.Typer(help="The registered recipes and the shipped baselines.",
                          rich_markup_mode=None)
app.add_typer(recipes_app, name="recipes")


@recipes_app.callback(invoke_without_command=True)
def recipes_command(ctx: typer.Context, as_json: Annotated[bool, _flag(
        "--json", help="A JSON list, one object per recipe.")] = False) -> None:
    """List the registered recipes: model, data set, parameters, training samples, metric, and the
    shipped baselines of each (date plan NAME and date recipes copy NAME take them).

    A table on a terminal; one tab-separated line per recipe in a pipe; --json for scripts."""
    if ctx.invoked_subcommand is not None:
        return
    with user_errors():
        from date_engine.recipes import list_recipes
        from date_engine.view.tables import recipe_rows, recipes_table

        recipes = list_recipes()
        if as_json:
            print(json.dumps(recipe_rows(recipes), indent=2))
        elif sys.stdout.isatty():
            Console().print(recipes_table(recipes))
        else:  # a pipe: every field whole, one line per recipe
            for row in recipe_rows(recipes):
                print("\t".join("" if v is None else ",".join(v) if isinstance(v, list) else
                                str(v) for v in row.values()))


@recipes_app.command("copy", epilog="Example: date recipes copy lenet-mnist my-baseline.yaml")
def recipes_copy_command(
    name: Annotated[str, typer.Argument(help="A shipped baseline (date recipes lists the "
                                        "recipes; their YAMLs carry these names).",
                                        show_default=False)],
    dest: Annotated[Optional[Path], typer.Argument(
        help="Where to write it (default: NAME.yaml here).", show_default=False,
        parser=_path)] = None,
    force: Annotated[bool, _flag("--force", help="Overwrite DEST if it exists.")] = False,
) -> None:
    """Copy a shipped baseline YAML to start your own spec from."""
    with user_errors():
        from date_engine.recipes import shipped_specs

        shipped = shipped_specs()
        if name not in shipped:
            raise DateError(f"no shipped baseline '{name}'; choose one of {', '.join(shipped)}.")
        target = dest or Path(f"{name}.yaml")
        if target.is_dir():
            target = target / f"{name}.yaml"
        if target.exists() and not force:
            raise DateError(f"{target} exists; pass --force to overwrite it, or choose another "
                            "DEST.")
        output_file(target, "DEST", (".yaml", ".yml"))
        target.write_text(shipped[name].read_text())
        print(f"{target}: a copy of the {name} baseline; edit it, then: date plan {target} "
              "--batch B")


# ---------------------------------------------------------------------------------- date data

data_app = typer.Typer(help="Lay out data sets that install offline in the formats recipes read.",
                       no_args_is_help=True, rich_markup_mode=None)
app.add_typer(data_app, name="data")


@data_app.command("prepare", epilog="Example: date data prepare mnist data/mnist")
def data_prepare_command(
    name: Annotated[str, typer.Argument(help="mnist | fashion-mnist | shakespeare | "
                                        "shakespeare-text | en-de",
                                        show_default=False)],
    dest: Annotated[Path, typer.Argument(help="Folder to write (train.data_dir of the recipe).",
                                         show_default=False, parser=_path)],
    source: Annotated[Optional[Path], _path_opt(
        "--source", help="Where the source lies, when not where it installs by default.")] = None,
) -> None:
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
