"""The ``date`` command line. It parses, calls the library and prints; nothing is derived here."""

from __future__ import annotations

import json
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
        spec = load_spec(spec_path, overrides or ())
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


def main() -> None:
    """Console-script entry point."""
    app(prog_name="date")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
