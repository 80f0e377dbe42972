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

from date_engine.errors import DateError
from date_engine.plan import Plan, derive_plan
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
    "--micro-batch", help="Samples per process per pass (default: train.micro_batch, else B/nproc).",
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


@app.command("plan")
def plan_command(
    spec_path: SpecArg,
    batch: BatchOpt,
    nproc: NprocOpt = 1,
    micro_batch: MicroOpt = None,
    overrides: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as one JSON object.")] = False,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="Also draw the LR curve into this PNG.", show_default=False)] = None,
    compare: Annotated[bool, typer.Option(
        "--compare", help="Show beside it linear scaling + constant warmup (Goyal et al.).")] = False,
) -> None:
    """Show every number DATE derives for BATCH, with its formula, before any training."""
    with user_errors():
        spec = _with_recipe_dataset_size(load_spec(spec_path, overrides or ()))
        plan = derive_plan(spec, batch, world_size=nproc, micro_batch=micro_batch)
        other = _goyal_plan(spec, batch, nproc, micro_batch) if compare else None
        if plot is not None:
            from date_engine.plan_view import scheme_name
            from date_engine.plot import save_lr_plot

            curves = [(scheme_name(plan), plan)] + ([(scheme_name(other), other)] if other else [])
            save_lr_plot(plot, curves)
        if as_json:
            print(json.dumps(_plan_json(spec_path, spec, plan, other), indent=2))
        else:
            _print_plan(spec_path, spec, plan, other)
        if plot is not None:
            Console(stderr=True).print(f"LR curve written to {plot}")


def _with_recipe_dataset_size(spec: Spec) -> Spec:
    """Fill baseline.dataset_size from the spec's recipe when the spec leaves it out."""
    if spec.baseline.dataset_size is not None or spec.recipe is None:
        return spec
    from date_engine.recipes import get_recipe

    try:
        n = get_recipe(spec.recipe).dataset_size
    except DateError:  # `date plan` needs no recipe; derive_plan says what is missing
        return spec
    if n is None:
        return spec
    return spec.model_copy(update={"baseline": spec.baseline.model_copy(update={"dataset_size": n})})


def _goyal_plan(spec: Spec, batch: int, nproc: int, micro_batch: int | None) -> Plan:
    """The same baseline scaled the way most people do today: linear LR + constant warmup."""
    date = spec.date.model_copy(update={"scaling": "linear", "warmup": "constant"})
    return derive_plan(spec.model_copy(update={"date": date}), batch, nproc, micro_batch)


def _plan_json(path: Path, spec: Spec, plan: Plan, other: Plan | None) -> dict:
    out = {"spec": str(path), "recipe": spec.recipe, **plan.to_dict()}
    out["derivations"] = [
        {"symbol": d.symbol, "name": d.name, "value": d.value, "formula": d.formula,
         "inputs": d.inputs}
        for d in plan.derivations()
    ]
    if other is not None:
        out["compare"] = other.to_dict()
    return out


def _print_plan(path: Path, spec: Spec, plan: Plan, other: Plan | None) -> None:
    from date_engine.plan_view import render_comparison, render_plan

    console = Console(highlight=False)
    width = max(32, min(console.width - 14, 90))
    title = f"DATE plan for {path}" + (f" (recipe {spec.recipe})" if spec.recipe else "")
    console.print(render_plan(plan, title, chart_width=width))
    if other is not None:
        console.print()
        console.print(render_comparison(plan, other, chart_width=width))


@app.command("scale")
def scale_command(
    spec_path: SpecArg,
    batch: BatchOpt,
    nproc: NprocOpt = 1,
    micro_batch: MicroOpt = None,
    overrides: SetOpt = None,
    output_dir: Annotated[Optional[Path], typer.Option(
        "--output-dir", "-o", help="Run folder (default: train.output_dir, else runs/<recipe>-B<batch>).",
        show_default=False)] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue from the newest valid checkpoint.")] = False,
    force_replan: Annotated[bool, typer.Option(
        "--force-replan", help="Resume a checkpoint written for another plan (batch, processes, spec).")] = False,
    dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="Validate everything, then 2 tiny steps on the CPU in a temporary folder.")] = False,
    max_steps: Annotated[Optional[int], typer.Option(
        "--max-steps", help="Stop after this optimizer step (checkpointed; the schedule is unchanged).",
        min=1, show_default=False)] = None,
    precision: Annotated[Optional[str], typer.Option(
        "--precision", help="fp32 | bf16 | fp16 (CUDA only; default: train.precision).",
        show_default=False)] = None,
    compile: Annotated[bool, typer.Option("--compile", help="torch.compile the model (CUDA only).")] = False,
    recipe: Annotated[Optional[str], typer.Option(
        "--recipe", help="Recipe name or package.module:function (default: the spec's).",
        show_default=False)] = None,
    backend: Annotated[Optional[str], typer.Option(
        "--backend", help="Process-group backend (default: nccl on CUDA, gloo on CPU).",
        show_default=False)] = None,
    nnodes: Annotated[int, typer.Option("--nnodes", help="Nodes in the job.", min=1)] = 1,
    node_rank: Annotated[Optional[int], typer.Option(
        "--node-rank", help="This node's rank (static rendezvous at --master-addr).",
        show_default=False)] = None,
    rdzv_endpoint: Annotated[Optional[str], typer.Option(
        "--rdzv-endpoint", help="host:port of the c10d rendezvous (multi-node).", show_default=False)] = None,
    rdzv_id: Annotated[str, typer.Option("--rdzv-id", help="Job id shared by all nodes.")] = "date-engine",
    master_addr: Annotated[Optional[str], typer.Option("--master-addr", show_default=False,
                                                       help="Static rendezvous host.")] = None,
    master_port: Annotated[Optional[int], typer.Option("--master-port", show_default=False,
                                                       help="Static rendezvous port.")] = None,
    max_restarts: Annotated[int, typer.Option(
        "--max-restarts", help="Restart failed workers this often (they resume from the newest checkpoint).",
        min=0)] = 0,
) -> None:
    """Train the spec's recipe at BATCH with the DATE plan: one process, several, or several nodes."""
    with user_errors():

        spec = load_spec(spec_path, overrides or ())
        recipe_ref = recipe or spec.recipe
        found = _recipe_to_train(spec_path, spec, recipe_ref, option=True)
        if precision is not None and precision not in ("fp32", "bf16", "fp16"):
            raise DateError(f"--precision must be fp32, bf16 or fp16, got {precision!r}.")
        from date_engine.train.runtime import job_environment

        job = job_environment()  # started by torchrun or srun: that job's size is the truth
        world = job.world_size if job.launcher != "none" else nproc * nnodes
        run_dir = output_dir or Path(spec.train.output_dir or f"runs/{found.name}-B{batch}")
        rerun = _continue_command(sys.argv[2:]) if sys.argv[1:2] == ["scale"] else ""
        from date_engine.train.config import RunConfig

        config = RunConfig(
            spec=spec.model_dump(mode="json", exclude_none=True), spec_path=str(spec_path), recipe=recipe_ref,
            batch=batch, world_size=world, micro_batch=micro_batch, output_dir=str(run_dir),
            resume=resume, force_replan=force_replan, dry_run=dry_run, max_steps=max_steps,
            precision=precision or spec.train.precision, compile=compile, backend=backend,
            rerun_command=rerun)
        if spec.baseline.dataset_size or found.dataset_size:  # fail before starting any process
            from date_engine.train.trainer import plan_for

            plan_for(config, spec, found)
        from date_engine.train.launch import LaunchOptions, launch

        options = LaunchOptions(nproc=nproc, nnodes=nnodes, node_rank=node_rank,
                                rdzv_endpoint=rdzv_endpoint, rdzv_id=rdzv_id,
                                master_addr=master_addr, master_port=master_port,
                                max_restarts=max_restarts if not dry_run else 0)
    code = launch(config, options)
    if code:
        raise typer.Exit(code)


def _recipe_to_train(spec_path: Path, spec: Spec, ref: str | None, option: bool = False):
    """The recipe a training command runs, its model options checked before any process starts.
    ``option``: the command has a --recipe option to name it with."""
    from date_engine.recipes import get_recipe

    if ref is None:
        hint = " or pass --recipe" if option else ""
        raise DateError(f"{spec_path}: no recipe to train; add 'recipe: <name>' to the spec{hint} "
                        "(see `date recipes`).")
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


@app.command("sweep")
def sweep_command(
    spec_path: SpecArg,
    batches: Annotated[str, typer.Option(
        "--batches", help="Global batch sizes, comma-separated (8k = 8192). The baseline's batch is "
        "always run, as the reference.", show_default=False)],
    schemes: Annotated[str, typer.Option(
        "--schemes", help="Comma-separated: date, linear, none, lars, lamb, adam.")] = "date,linear",
    repeats: Annotated[int, typer.Option("--repeats", "-r", min=1,
                                         help="Seeds per cell: train.seed, train.seed + 1, ...")] = 1,
    nproc: NprocOpt = 1,
    jobs: Annotated[int, typer.Option(
        "--jobs", "-j", min=1, help="Cells trained at once (the CPU threads are shared out).")] = 1,
    output_dir: Annotated[Optional[Path], typer.Option(
        "--output-dir", "-o", help="Sweep folder (default: sweeps/<spec name>).", show_default=False)] = None,
    overrides: SetOpt = None,
    lr_grid: Annotated[str, typer.Option(
        "--lr-grid", help="Peak LRs tried by lars, lamb and adam; the best per batch is kept.")] = \
        DEFAULT_LR_GRID,
    tolerance: Annotated[str, typer.Option(
        "--tolerance", help="How close to the baseline's metric counts as holding it: an amount in "
        "the metric's units (0.3) or a percentage (5%).")] = "1%",
    evals: Annotated[int, typer.Option(
        "--evals", min=1, help="Evaluations per cell, evenly spaced (time-to-accuracy is read at them).")] = 10,
    report_only: Annotated[bool, typer.Option(
        "--report-only", help="Train nothing; write the report from the cells already run.")] = False,
) -> None:
    """Compare schemes across batch sizes: accuracy, time to accuracy, speedup, plots.

    Trains the baseline and every (batch, scheme, seed) cell through `date scale`; a re-run skips
    finished cells and resumes interrupted ones."""
    with user_errors():
        from date_engine.sweep import (SweepOptions, Tolerance, parse_batches, parse_lr_grid,
                                       parse_schemes, plan_sweep, run_sweep)

        spec = _with_recipe_dataset_size(load_spec(spec_path, overrides or ()))
        recipe = _recipe_to_train(spec_path, spec, spec.recipe)
        options = SweepOptions(
            batches=parse_batches(batches), schemes=parse_schemes(schemes), repeats=repeats,
            lr_grid=tuple(parse_lr_grid(lr_grid)), tolerance=Tolerance.parse(tolerance),
            evals=evals, nproc=nproc, jobs=jobs)
        cells = plan_sweep(spec, options)
        root = output_dir or Path("sweeps") / spec_path.stem
        console = Console(highlight=False)
        settings = {"spec": str(spec_path), "recipe": recipe.name, "overrides": list(overrides or ()),
                    "command": " ".join(["date", *map(shlex.quote, sys.argv[1:])])
                    if sys.argv[1:2] == ["sweep"] else "",
                    "batches": options.batches, "schemes": [s.name for s in options.schemes],
                    "repeats": repeats, "tolerance": str(options.tolerance)}
        if not report_only:
            console.print(f"date sweep: {len(cells)} cells of {recipe.name} into {root}; finished "
                          "cells are skipped, interrupted ones resumed.", soft_wrap=True)
        summary, code = run_sweep(spec, cells, options, root, settings, console, train=not report_only)
        if code != 2:  # after a refused input the error above is all there is to say
            _print_verdicts(console, summary, [s.name for s in options.schemes], root)
    if code:
        if code in (130, 143):
            Console(stderr=True).print("stopped; every running cell wrote a checkpoint. Run the same "
                                       "command again to continue.", soft_wrap=True)
        raise typer.Exit(code)


def _print_verdicts(console: Console, summary, schemes: list[str], root: Path) -> None:
    for scheme, verdict in summary.verdicts(schemes).items():
        console.print(f"[bold]{scheme}[/]: {verdict}.", soft_wrap=True)
    console.print(f"report: {root / 'report.md'}", soft_wrap=True)


@app.command("recipes")
def recipes_command() -> None:
    """List the registered recipes: model, data set, parameters, training samples, metric."""
    with user_errors():
        from rich.table import Table

        from date_engine.recipes import list_recipes

        table = Table(title="Recipes", title_justify="left")
        for col in ("name", "model", "data set", "parameters", "samples", "metric"):
            table.add_column(col)
        for r in list_recipes():
            params = sum(p.numel() for p in r.build_model(r.parse_options()).parameters())
            table.add_row(r.name, r.model_name, r.dataset_name, f"{params:,}",
                          f"{r.dataset_size:,}" if r.dataset_size else "from the data",
                          f"{r.metric_name} ({'higher' if r.higher_is_better else 'lower'} is better)")
        Console().print(table)


data_app = typer.Typer(help="Lay out data sets that install offline in the formats recipes read.",
                       no_args_is_help=True)
app.add_typer(data_app, name="data")


@data_app.command("prepare")
def data_prepare_command(
    name: Annotated[str, typer.Argument(help="mnist | fashion-mnist | shakespeare | en-de",
                                        show_default=False)],
    dest: Annotated[Path, typer.Argument(help="Folder to write (train.data_dir of the recipe).",
                                         show_default=False)],
    source: Annotated[Optional[Path], typer.Option(
        "--source", help="Where the source lies, when not where it installs by default.",
        show_default=False)] = None,
) -> None:
    """Write a real data set in the format its recipes read (substitutes are named as such)."""
    with user_errors():
        from date_engine.data.prepare import prepare

        Console(highlight=False, soft_wrap=True).print(prepare(name, dest, source))


def main() -> None:
    """Console-script entry point."""
    app(prog_name="date")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
