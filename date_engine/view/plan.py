"""A plan, shown: rich tables of its inputs, derived values and phases, the batch split, the LR
curve."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from date_engine.plan import BatchSplit, Plan, fmt
from date_engine.view.chart import Series, line_chart

__all__ = ["describe_split", "render_comparison", "render_plan", "scheme_name"]


def scheme_name(plan: Plan) -> str:
    """A short name for how a plan scales: 'DATE' for sqrt + LEGW, else its two rules."""
    if plan.scaling == "sqrt" and plan.warmup == "legw":
        return "DATE (sqrt + LEGW)"
    return f"{plan.scaling} scaling + {plan.warmup} warmup"


def render_plan(plan: Plan, split: BatchSplit, title: str, chart_width: int = 64) -> RenderableType:
    """Everything ``date plan`` prints for one plan and its batch split."""
    parts: list[RenderableType] = [
        Text(title, style="bold"),
        Text(
            f"{scheme_name(plan)}: batch {plan.baseline_batch} → {plan.target_batch} "
            f"(k = {fmt(plan.scale)})"
        ),
        _inputs_table(plan),
        _derived_table(plan),
        _phases_table(plan),
        _split_line(split),
        Text("\nLearning rate per optimizer step", style="bold"),
        line_chart(
            [Series(scheme_name(plan), plan.lr, "cyan")],
            plan.total_iterations,
            width=chart_width,
            y_max=plan.peak_lr,
            y_format=_lr,
        ),
    ]
    return Group(*parts)


def render_comparison(plan: Plan, other: Plan, chart_width: int = 64) -> RenderableType:
    """``plan`` beside ``other`` (same batch, another scheme), values and curves."""
    table = Table(title="Side by side at the same batch", title_justify="left")
    table.add_column("quantity")
    table.add_column(scheme_name(plan), justify="right", style="cyan")
    table.add_column(scheme_name(other), justify="right", style="magenta")
    first_decay = {p.name: p.first_step for p in plan.phases}.get("decay", 1)
    rows = [
        ("peak LR η", _lr(plan.peak_lr), _lr(other.peak_lr)),
        ("warmup epochs w", fmt(plan.warmup_epochs), fmt(other.warmup_epochs)),
        ("warmup steps I_w", fmt(plan.warmup_iterations), fmt(other.warmup_iterations)),
        ("optimizer steps I", fmt(plan.total_iterations), fmt(other.total_iterations)),
        ("lr at step 1", _lr(plan.lr(1)), _lr(other.lr(1))),
        (f"lr at step {first_decay}", _lr(plan.lr(first_decay)), _lr(other.lr(first_decay))),
        (
            "lr at the last step",
            _lr(plan.lr(plan.total_iterations)),
            _lr(other.lr(other.total_iterations)),
        ),
    ]
    for row in rows:
        table.add_row(*row)
    chart = line_chart(
        [
            Series(scheme_name(plan), plan.lr, "cyan"),
            Series(scheme_name(other), other.lr, "magenta"),
        ],
        max(plan.total_iterations, other.total_iterations),
        width=chart_width,
        y_max=max(plan.peak_lr, other.peak_lr),
        y_format=_lr,
    )
    return Group(table, chart)


def _inputs_table(plan: Plan) -> Table:
    table = Table(title="Inputs (the baseline that works)", title_justify="left")
    for col in ("symbol", "value", "from", "meaning"):
        table.add_column(col)
    for d in plan.inputs():
        table.add_row(d.symbol, _value(d.name, d.value), d.formula, d.note)
    return table


def _derived_table(plan: Plan) -> Table:
    table = Table(title="Derived", title_justify="left")
    for col, style in (("symbol", ""), ("value", "bold"), ("formula", ""), ("why", "dim")):
        table.add_column(col, style=style)
    for d in plan.derivations:
        formula = Text(d.formula)
        formula.append(f"\n= {d.inputs}", style="dim")
        table.add_row(d.symbol, _value(d.name, d.value), formula, d.note)
    return table


def _phases_table(plan: Plan) -> Table:
    rules = {
        "warmup": "η·(e/w)" + ("²" if plan.warmup_shape == "quadratic" else ""),
        "decay": "η·(I − i)/(I − I_w)",
        "floor": "η̂",
    }
    table = Table(
        title="Schedule phases (i = optimizer step, e = i·B/n epochs)", title_justify="left"
    )
    for col in ("phase", "steps", "epochs", "lr", "rule"):
        table.add_column(col)
    for p in plan.phases:
        steps = str(p.first_step) if p.steps == 1 else f"{p.first_step}–{p.last_step}"
        lr = _lr(p.first_lr) if p.first_lr == p.last_lr else f"{_lr(p.first_lr)} → {_lr(p.last_lr)}"
        table.add_row(p.name, steps, f"{p.first_epoch:.4g}–{p.last_epoch:.4g}", lr, rules[p.name])
    return table


def describe_split(split: BatchSplit) -> str:
    """``8192 = 256 (micro-batch) × 4 (processes) × 8 (accumulation steps)``."""
    return (
        f"{split.batch} = {split.micro_batch} (micro-batch) × {split.world_size} "
        f"(process{'es' if split.world_size != 1 else ''}) × {split.accumulation_steps} "
        f"(accumulation step{'s' if split.accumulation_steps != 1 else ''})"
    )


def _split_line(split: BatchSplit) -> Text:
    text = Text("Batch split: ", style="bold")
    text.append(describe_split(split))
    return text


def _value(name: str, value: float | None) -> str:
    if value is None:
        return "—"
    if "lr" in name:
        return _lr(value)
    suffix = " epochs" if "epochs" in name else ""
    return fmt(value) + suffix


def _lr(value: float) -> str:
    return f"{value:.5g}"
