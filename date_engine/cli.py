"""The ``date`` command line. It parses, calls the library and prints; nothing is derived here."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from date_engine.checks import (
    check_backend,
    check_endpoint,
    check_port,
    output_file,
    output_folder,
)
from date_engine.errors import DateError
from date_engine.spec import Spec, load_spec
from date_engine.sweep.schemes import DEFAULT_LR_GRID

app = typer.Typer(
    name="date",
    help="DATE: scale a small-batch training run that works to a large batch, without re-tuning.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)

SpecArg = Annotated[Path, typer.Argument(metavar="SPEC", help="Baseline YAML (see recipes/).",
                                         show_default=False)]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Target global batch size B.",
                                       show_default=False)]
NprocOpt = Annotated[int, typer.Option("--nproc", "-n", help="Processes (data-parallel replicas).")]
MicroOpt = Annotated[Optional[int], typer.Option(
    "--micro-batch", help="Samples per process per pass (default: train.micro_batch, else the "
    "recipe's, fitted to B/nproc).",
    show_default=False)]
SetOpt = Annotated[Optional[list[str]], typer.Option(
    "--set", help="Override a spec value, e.g. --set baseline.lr=0.1 (repeatable).",
    show_default=False)]


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn a user's mistake into one line on stderr and exit code 2."""
    try:
        yield
    except DateError as exc:
        Console(stderr=True, highlight=False, soft_wrap=True).print(f"[red]error:[/] {exc}",
                                                                    markup=True)
        raise typer.Exit(2) from None


@app.callback()
def _root() -> None:
    """DATE (Dynamic Adaptive-Tuning Engine, You et al., SC'19): from a working baseline, derive a
    sqrt-scaled learning rate, a linear-epoch warmup, a decay to a floor and clamped per-layer
    ratios for a large batch."""


PlanJsonOpt = Annotated[bool, typer.Option("--json", help="Print the plan as one JSON object.")]
PlotOpt = Annotated[Optional[Path], typer.Option(
    "--plot", help="Also draw the LR curve into this PNG.", show_default=False)]
CompareOpt = Annotated[bool, typer.Option(
    "--compare", help="Show beside it the other rule (the paper's, or DATE's default) and linear "
    "scaling + constant warmup (Goyal et al.).")]


@app.command("plan")
def plan_command(spec_path: SpecArg, batch: BatchOpt, nproc: NprocOpt = 1,
                 micro_batch: MicroOpt = None, overrides: SetOpt = None,
                 as_json: PlanJsonOpt = False, plot: PlotOpt = None,
                 compare: CompareOpt = False) -> None:
    """Show every number DATE derives for BATCH, with its formula, before any training."""
    from date_engine.plan import resolve_plan
    from date_engine.sweep.schemes import SCHEMES, scheme_spec

    with user_errors():
        if plot is not None:
            output_file(plot, "--plot", (".png", ".pdf", ".svg"))
        spec = load_spec(spec_path, overrides or ())
        recipe = _known_recipe(spec)
        planned = resolve_plan(spec, batch, nproc, micro_batch, recipe)
        others = {}
        if compare:  # the other rule, and what most people do today
            for name in ("paper" if spec.date.rule == "date" else "date", "linear"):
                scheme = scheme_spec(spec, SCHEMES[name])
                others[name] = resolve_plan(scheme, batch, nproc, micro_batch, recipe).plan
        if plot is not None:
            from date_engine.view.plan import scheme_name
            from date_engine.view.plots import save_lr_plot

            curves = [(scheme_name(planned.plan), planned.plan), *others.items()]
            save_lr_plot(plot, curves)
        if as_json:
            document = planned.to_dict()
            if others:
                document["compare"] = {name: p.to_dict() for name, p in others.items()}
            print(json.dumps(document, indent=2))
        else:
            _print_plan(spec_path, spec, planned, others)
        if plot is not None:
            Console(stderr=True).print(f"LR curve written to {plot}")


def _known_recipe(spec: Spec):
    """The spec's recipe, if it can be found here; ``date plan`` works without one."""
    from date_engine.recipes import get_recipe

    if spec.recipe is None:
        return None
    try:
        return get_recipe(spec.recipe)
    except DateError:
        return None


def _print_plan(path: Path, spec: Spec, planned, others) -> None:
    from date_engine.view.plan import render_comparison, render_plan

    console = Console(highlight=False)
    width = max(32, min(console.width - 14, 90))
    title = f"DATE plan for {path}" + (f" (recipe {spec.recipe})" if spec.recipe else "")
    console.print(render_plan(planned.plan, planned.split, title, chart_width=width))
    if others:
        console.print()
        console.print(render_comparison(planned.plan, others, chart_width=width))


def _option(*names: str, help: str, **kwargs) -> typer.models.OptionInfo:
    return typer.Option(*names, help=help, show_default=kwargs.pop("show_default", False), **kwargs)


OutputOpt = Annotated[Optional[Path], _option(
    "--output-dir", "-o", help="Run folder (default: train.output_dir, else "
        "runs/<recipe>-B<batch>).")]
ResumeOpt = Annotated[
    bool, typer.Option("--resume", help="Continue from the newest valid checkpoint.")
]
ReplanOpt = Annotated[
    bool,
    typer.Option(
        "--force-replan",
        help="Resume a checkpoint written for another plan (batch, processes, spec).",
    ),
]
DryRunOpt = Annotated[
    bool,
    typer.Option(
        "--dry-run", help="Validate everything, then 2 tiny steps on the CPU in a temporary folder."
    ),
]
MaxStepsOpt = Annotated[
    Optional[int],
    _option(
        "--max-steps",
        help="Stop after this optimizer step (checkpointed; the schedule is unchanged).",
        min=1,
    ),
]
PrecisionOpt = Annotated[
    Optional[str],
    _option("--precision", help="fp32 | bf16 | fp16 (CUDA only; default: train.precision)."),
]
CompileOpt = Annotated[bool, typer.Option("--compile", help="torch.compile the model (CUDA only).")]
RecipeOpt = Annotated[
    Optional[str],
    _option("--recipe", help="Recipe name or package.module:function (default: the spec's)."),
]
BackendOpt = Annotated[
    Optional[str],
    _option("--backend", help="Process-group backend (default: nccl on CUDA, gloo on CPU)."),
]
NnodesOpt = Annotated[int, typer.Option("--nnodes", help="Nodes in the job.", min=1)]
NodeRankOpt = Annotated[
    Optional[int],
    _option("--node-rank", help="This node's rank (static rendezvous at --master-addr)."),
]
RdzvEndpointOpt = Annotated[
    Optional[str], _option("--rdzv-endpoint", help="host:port of the c10d rendezvous (multi-node).")
]
RdzvIdOpt = Annotated[str, typer.Option("--rdzv-id", help="Job id shared by all nodes.")]
MasterAddrOpt = Annotated[Optional[str], _option("--master-addr", help="Static rendezvous host.")]
MasterPortOpt = Annotated[Optional[int], _option("--master-port", help="Static rendezvous port.")]
RestartsOpt = Annotated[
    int,
    typer.Option(
        "--max-restarts",
        help="Restart failed workers this often (they resume from the newest checkpoint).",
        min=0,
    ),
]
ScaleJsonOpt = Annotated[
    bool,
    typer.Option(
        "--json",
        help="At the end, print the run's plan and summary as one JSON object on stdout "
        "(everything else goes to stderr).",
    ),
]


@app.command("scale")
def scale_command(
    spec_path: SpecArg, batch: BatchOpt, nproc: NprocOpt = 1, micro_batch: MicroOpt = None,
    overrides: SetOpt = None, output_dir: OutputOpt = None, resume: ResumeOpt = False,
    force_replan: ReplanOpt = False, dry_run: DryRunOpt = False, max_steps: MaxStepsOpt = None,
    precision: PrecisionOpt = None, compile: CompileOpt = False, recipe: RecipeOpt = None,
    backend: BackendOpt = None, nnodes: NnodesOpt = 1, node_rank: NodeRankOpt = None,
    rdzv_endpoint: RdzvEndpointOpt = None, rdzv_id: RdzvIdOpt = "date-engine",
    master_addr: MasterAddrOpt = None, master_port: MasterPortOpt = None,
    max_restarts: RestartsOpt = 0, as_json: ScaleJsonOpt = False,
) -> None:
    """Train the spec's recipe at BATCH with the DATE plan: one process, several, or nodes."""
    with user_errors():
        spec = load_spec(spec_path, overrides or ())
        recipe_ref = recipe or spec.recipe
        found = _recipe_to_train(spec_path, spec, recipe_ref, option=True)
        if precision is not None and precision not in ("fp32", "bf16", "fp16"):
            raise DateError(f"--precision must be fp32, bf16 or fp16, got {precision!r}.")
        _check_launch(nproc, backend, rdzv_endpoint, master_port)
        from date_engine.plan import resolve_plan
        from date_engine.train.config import RunConfig
        from date_engine.train.launch import LaunchOptions, launch
        from date_engine.train.runtime import job_environment

        job = job_environment()  # started by torchrun or srun: that job's size is the truth
        world = job.world_size if job.launcher != "none" else nproc * nnodes
        if spec.baseline.dataset_size or found.dataset_size:  # else n is known once data loads
            resolve_plan(spec, batch, world, micro_batch, found)  # refuse before any process starts
        run_dir = output_dir or Path(spec.train.output_dir or f"runs/{found.name}-B{batch}")
        if not dry_run:
            output_folder(run_dir, "--output-dir" if output_dir else "train.output_dir")
        config = RunConfig(
            spec=spec.model_dump(mode="json", exclude_none=True), spec_path=str(spec_path),
            recipe=recipe_ref, batch=batch, world_size=world, micro_batch=micro_batch,
            output_dir=str(run_dir),
            resume=resume, force_replan=force_replan, dry_run=dry_run, max_steps=max_steps,
            precision=precision or spec.train.precision, compile=compile, backend=backend,
            rerun_command=_continue_command(sys.argv[2:]) if sys.argv[1:2] == ["scale"] else "",
            print_json=as_json)
        options = LaunchOptions(nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                                rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id,
                                master_addr=master_addr, master_port=master_port,
                                max_restarts=max_restarts if not dry_run else 0)
    code = launch(config, options)
    if code:
        raise typer.Exit(code)


def _check_launch(nproc: int, backend: str | None, endpoint: str | None,
                  port: int | None) -> None:
    """The launch options, before any process starts."""
    if nproc < 1:
        raise DateError(f"--nproc must be a positive whole number, got {nproc}.")
    check_endpoint(endpoint)
    check_port(port, "--master-port")
    if backend is not None:
        import torch

        check_backend(backend, torch.cuda.is_available())


def _recipe_to_train(spec_path: Path, spec: Spec, ref: str | None, option: bool = False):
    """The recipe a training command runs, its model options checked before any process starts.
    ``option``: the command has a --recipe option to name it with."""
    from date_engine.recipes import get_recipe

    if ref is None:
        hint = " or pass --recipe" if option else ""
        raise DateError(
            f"{spec_path}: no recipe to train; add 'recipe: <name>' to the spec{hint} "
            "(see `date recipes`)."
        )
    found = get_recipe(ref)
    found.parse_options(spec.model)  # a bad model option fails here
    return found


def _continue_command(args: list[str]) -> str:
    """The command line that continues this run: without --resume and --max-steps."""
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--max-steps":
            skip = True
        elif arg != "--resume" and not arg.startswith("--max-steps="):
            kept.append(shlex.quote(arg))
    return " ".join(["date", "scale", *kept])


BatchesOpt = Annotated[
    str,
    _option(
        "--batches",
        help="Global batch sizes, comma-separated (8k = 8192). The baseline's batch is "
        "always run, as the reference.",
    ),
]
SchemesOpt = Annotated[
    str, typer.Option("--schemes", help="Comma-separated: date, linear, none, lars, lamb, adam.")
]
RepeatsOpt = Annotated[
    int,
    typer.Option("--repeats", "-r", min=1, help="Seeds per cell: train.seed, train.seed + 1, ..."),
]
JobsOpt = Annotated[
    int,
    typer.Option(
        "--jobs", "-j", min=1, help="Cells trained at once (the CPU threads are shared out)."
    ),
]
SweepOutputOpt = Annotated[
    Optional[Path],
    _option("--output-dir", "-o", help="Sweep folder (default: sweeps/<spec name>)."),
]
GridOpt = Annotated[
    str,
    typer.Option(
        "--lr-grid", help="Peak LRs tried by lars, lamb and adam; the best per batch is kept."
    ),
]
ToleranceOpt = Annotated[
    str,
    typer.Option(
        "--tolerance",
        help="How close to the baseline's metric counts as holding it: an amount in "
        "the metric's units (0.3) or a percentage (5%).",
    ),
]
EvalsOpt = Annotated[
    int,
    typer.Option(
        "--evals",
        min=1,
        help="Evaluations per cell, evenly spaced (time-to-accuracy is read at them).",
    ),
]
ReportOnlyOpt = Annotated[
    bool,
    typer.Option(
        "--report-only", help="Train nothing; write the report from the cells already run."
    ),
]


@app.command("sweep")
def sweep_command(
    spec_path: SpecArg, batches: BatchesOpt, schemes: SchemesOpt = "date,linear",
    repeats: RepeatsOpt = 1, nproc: NprocOpt = 1, jobs: JobsOpt = 1,
    output_dir: SweepOutputOpt = None, overrides: SetOpt = None, lr_grid: GridOpt = DEFAULT_LR_GRID,
    tolerance: ToleranceOpt = "1%", evals: EvalsOpt = 10, report_only: ReportOnlyOpt = False,
) -> None:
    """Compare schemes across batch sizes: accuracy, time to accuracy, speedup, plots.

    Trains the baseline and every (batch, scheme, seed) cell through `date scale`; a re-run skips
    finished cells and resumes interrupted ones."""
    with user_errors():
        from date_engine.sweep import (
            SweepOptions,
            Tolerance,
            parse_batches,
            parse_lr_grid,
            parse_schemes,
            plan_sweep,
            run_sweep,
        )

        spec = load_spec(spec_path, overrides or ())
        recipe = _recipe_to_train(spec_path, spec, spec.recipe)
        options = SweepOptions(
            batches=parse_batches(batches), schemes=parse_schemes(schemes), repeats=repeats,
            lr_grid=tuple(parse_lr_grid(lr_grid)), tolerance=Tolerance.parse(tolerance),
            evals=evals, nproc=nproc, jobs=jobs)
        root = output_folder(output_dir or Path("sweeps") / spec_path.stem, "--output-dir")
        cells = plan_sweep(spec, options, recipe)
        console = Console(highlight=False)
        command = " ".join(["date", *map(shlex.quote, sys.argv[1:])]) \
            if sys.argv[1:2] == ["sweep"] else ""
        settings = {"spec": str(spec_path), "recipe": recipe.name,
                    "overrides": list(overrides or ()), "command": command,
                    "batches": options.batches, "schemes": [s.name for s in options.schemes],
                    "repeats": repeats, "tolerance": str(options.tolerance)}
        if not report_only:
            console.print(f"date sweep: {len(cells)} cells of {recipe.name} into {root}; finished "
                          "cells are skipped, interrupted ones resumed.", soft_wrap=True)
        summary, code = run_sweep(recipe, cells, options, root, settings, console,
                                  train=not report_only)
        if code != 2:  # after a refused input the error above is all there is to say
            _print_verdicts(console, summary, [s.name for s in options.schemes], root)
    if code:
        if code in (130, 143):
            Console(stderr=True).print("stopped; every running cell wrote a checkpoint. Run the "
                                       "same command again to continue.", soft_wrap=True)
        raise typer.Exit(code)


def _print_verdicts(console: Console, summary, schemes: list[str], root: Path) -> None:
    for scheme, verdict in summary.verdicts(schemes).items():
        console.print(f"[bold]{scheme}[/]: {verdict}.", soft_wrap=True)
    console.print(f"report: {root / 'report.md'}", soft_wrap=True)


@app.command("recipes")
def recipes_command() -> None:
    """List the registered recipes: model, data set, parameters, training samples, metric."""
    with user_errors():
        from date_engine.recipes import list_recipes
        from date_engine.view.tables import recipes_table

        Console().print(recipes_table(list_recipes()))


data_app = typer.Typer(
    help="Lay out data sets that install offline in the formats recipes read.", no_args_is_help=True
)
app.add_typer(data_app, name="data")


@data_app.command("prepare")
def data_prepare_command(
    name: Annotated[
        str, typer.Argument(help="mnist | fashion-mnist | shakespeare | en-de", show_default=False)
    ],
    dest: Annotated[
        Path,
        typer.Argument(help="Folder to write (train.data_dir of the recipe).", show_default=False),
    ],
    source: Annotated[
        Optional[Path],
        _option("--source", help="Where the source lies, when not where it installs by default."),
    ] = None,
) -> None:
    """Write a real data set in the format its recipes read (substitutes are named as such)."""
    with user_errors():
        from date_engine.data.prepare import prepare

        output_folder(dest, "DEST")
        Console(highlight=False, soft_wrap=True).print(prepare(name, dest, source))


def main() -> None:
    """Console-script entry point."""
    app(prog_name="date")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
