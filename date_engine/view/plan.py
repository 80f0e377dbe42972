"""A plan, shown: rich tables of its inputs, derived values and phases, the batch split, the LR
curve."""

from __future__ import annotations

import math

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from date_engine.catalog import entry, step_path
from date_engine.forecast import HELD_OUT_MISS, PLATEAU_MISS, STEPS_LIMITED_MISSES
from date_engine.plan import Plan, fmt
from date_engine.runplan import BatchSplit, RunPlan, Sharding
from date_engine.view.chart import Series, line_chart
from date_engine.view.console import bytes_text

__all__ = ["describe_optimizer", "describe_split", "render_comparison", "render_plan",
           "scheme_name"]


def scheme_name(plan: Plan) -> str:
    """A short name for how a plan scales: DATE's default rule, the paper's, or its two rules."""
    if plan.rule == "date" and plan.scaling == "power" and plan.warmup == "legw":
        return f"DATE ({plan.optimizer.name} rule: k^{plan.lr_exponent:g} + LEGW)"
    if plan.rule == "paper" and plan.scaling == "sqrt" and plan.warmup == "legw":
        return "DATE, the paper's rule (sqrt + LEGW)"
    return f"{plan.scaling} scaling + {plan.warmup} warmup"


def render_plan(plan: Plan, split: BatchSplit, title: str, chart_width: int = 64,
                sharding: Sharding | None = None) -> RenderableType:
    """Everything ``date plan`` prints for one plan, its batch split and how the processes hold
    the model."""
    parts: list[RenderableType] = [
        Text(title, style="bold"),
        Text(
            f"{scheme_name(plan)}: batch {plan.baseline_batch} → {plan.target_batch} "
            f"(k = {fmt(plan.scale)})"
        ),
        _inputs_table(plan),
        _derived_table(plan),
        *_forecast_lines(plan),
        _phases_table(plan),
        *_ramp_table(plan, split),
        _split_line(split),
        *_sharding_lines(sharding),
        _optimizer_line(plan),
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


_STYLES = ("cyan", "magenta", "green", "yellow")


def render_comparison(plan: Plan, others: dict[str, Plan], chart_width: int = 64) -> RenderableType:
    """``plan`` beside ``others`` (the same batch under other schemes, by name): the values that
    differ, the optimizer each runs, and the curves."""
    plans = [plan, *others.values()]
    names = [scheme_name(plan), *others]
    table = Table(title="Side by side at the same batch", title_justify="left")
    table.add_column("quantity")
    for name, style in zip(names, _STYLES):
        table.add_column(name, justify="right", style=style)
    first_decay = {p.name: p.first_step for p in plan.phases}.get("decay", 1)
    rows = {
        "peak LR η": lambda p: _lr(p.peak_lr),
        "warmup epochs w": lambda p: fmt(p.warmup_epochs),
        "warmup steps I_w": lambda p: fmt(p.warmup_iterations),
        "optimizer steps I": lambda p: fmt(p.total_iterations),
        "lr at step 1": lambda p: _lr(p.lr(1)),
        f"lr at step {first_decay}": lambda p: _lr(p.lr(first_decay)),
        "lr at the last step": lambda p: _lr(p.lr(p.total_iterations)),
        "optimizer": describe_optimizer,
    }
    for quantity, value in rows.items():
        table.add_row(quantity, *(value(p) for p in plans))
    chart = line_chart(
        [Series(name, p.lr, style) for name, p, style in zip(names, plans, _STYLES)],
        max(p.total_iterations for p in plans), width=chart_width,
        y_max=max(p.peak_lr for p in plans), y_format=_lr,
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


def _forecast_lines(plan: Plan) -> list[Text]:
    """The probe's forecast for the target batch, and a warning when the plan's epochs are
    expected to lose accuracy; without a probe, where to get one."""
    ahead, b, b0 = plan.forecast, plan.target_batch, plan.baseline_batch
    if ahead is None:
        return [Text("No forecast: date probe SPEC measures the gradient noise scale and "
                     "--probe probe.json forecasts what holding accuracy costs at this batch.",
                     style="dim")] if b > b0 else []
    e0 = plan.baseline_iterations * b0 / plan.dataset_size
    curve = plan.noise_curve
    text = Text("Forecast ", style="bold")
    text.append("(probe: steps-limited — twice the LR did not lower its loss, so B_noise is taken "
                "as 0 and every batch needs the baseline's steps)" if curve.steps_limited else
                f"(probe: B_noise(e) = {curve.a:.4g} · e^{curve.beta:.3g}, fitted on epochs "
                f"{curve.first:.3g}–{curve.last:.3g} and extrapolated to {e0:.4g}, "
                f"{e0 / curve.last:.3g}× past the probe)")
    text.append(": reaching the baseline's loss "
                f"at batch {b:,} takes {ahead.factor:.3g} × {e0:.4g} = {ahead.epochs:.4g} epochs, "
                f"{ahead.steps:,} steps against the baseline's {plan.baseline_iterations:,} "
                f"({_how_many(plan.baseline_iterations, ahead.steps)}); the largest batch "
                f"expected to hold accuracy at the baseline's epochs ≈ {ahead.holding_batch:,}.")
    lines = [text, _how_sure(plan)]
    same_epochs_steps = math.ceil(plan.baseline_iterations * b0 / b)
    if plan.budget == "ramp" and plan.total_iterations > same_epochs_steps:
        lines.append(Text(
            f"note: this ramp plans {plan.total_iterations:,} steps, more than the "
            f"{same_epochs_steps:,} of the baseline's epochs at batch {b:,} (its smaller "
            "batches take more steps)" + ("; at this batch the baseline's epochs are expected "
                                          "to hold, and --budget same-epochs takes fewer."
                                          if not ahead.loses_at_same_epochs else "."),
            style="yellow"))
    if plan.budget == "same-epochs" and not ahead.loses_at_same_epochs and b > b0:
        lines.append(Text(
            f"batch {b:,} is within {ahead.holding_batch:,}: the baseline's epochs are expected to "
            "hold accuracy, and no budget is needed (--budget hold or ramp would train longer).",
            style="green"))
    if plan.budget == "same-epochs" and ahead.loses_at_same_epochs:
        lines.append(Text(
            f"warning: batch {b:,} is beyond {ahead.holding_batch:,}, the largest expected to "
            "hold accuracy at the baseline's epochs: "
            f"training the baseline's {e0:.4g} epochs is expected to lose accuracy; "
            f"--budget hold trains {ahead.epochs:.4g} epochs instead; --budget ramp grows the "
            f"batch to {b:,} as the run's noise scale allows, which held accuracy with fewer "
            "samples in our studies" + (" — of the two whose probe read steps-limited where it "
                                        "ran, on vit-mnist and not on bert-mlm (docs/noise.md)."
                                        if curve.steps_limited else " (docs/noise.md)."),
            style="yellow"))
    if curve.steps_limited and b > b0 and plan.scaling != "none":
        lines.append(Text(
            "note: twice the LR trains this baseline no faster, and this plan raises it "
            f"{plan.peak_lr / plan.baseline_lr:.3g}×"
            + (" (√k: the default rule's exponent for this family where the check reads so)"
               if plan.scaling == "power" and plan.lr_exponent ==
               entry(plan.optimizer.name).batch_rule.steps_limited_exponent else "")
            + ". Of the two studies the check read so where it was tried, "
            "keeping the baseline's LR, warmup and optimizer values (--set date.rule=paper --set "
            "date.scaling=none --set date.warmup=constant) held bert-mlm at 2× and 8× its batch "
            "in the baseline's steps where the rule's LR lost, and lost to the rule on vit-mnist "
            "at 2× and 8× in the baseline's epochs (docs/results.md).", style="yellow"))
    if plan.budget == "ramp" and curve.steps_limited:
        lines.append(Text(
            "warning: the probe's LR check found the baseline steps-limited, and a ramp saves "
            "steps by training larger batches sooner: of the two studies where a baseline read "
            "so, the ramp held at 32× on vit-mnist and lost on bert-mlm, a masked LM "
            "(docs/noise.md, \"The LR check\").", style="yellow"))
    return lines


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


def _ramp_table(plan: Plan, split: BatchSplit) -> list[RenderableType]:
    """budget ramp: each stage's steps, epochs, batch split, peak LR and optimizer options."""
    if not plan.ramp:
        return []
    measured = plan.ramp_mode == "measured"
    table = Table(title="Batch ramp (each stage's values derived at its batch; B_noise from the "
                  + ("probe, or measured in the run (*))" if measured else "probe)"),
                  title_justify="left")
    for col in ("stage", "steps", "epochs", "batch", "η_j", "optimizer", "B_noise at start"):
        table.add_column(col)
    run = RunPlan(plan, split)
    for j, st in enumerate(plan.ramp):
        steps = str(st.first_step) if st.steps == 1 else f"{st.first_step}–{st.last_step}"
        sub = run.split_at(st.first_step)
        noise = f"{st.noise_at_start:,.0f}{' *' if st.measured else ''}"
        table.add_row(str(j), steps, f"{plan.epoch(st.first_step - 1):.4g}–"
                      f"{plan.epoch(st.last_step):.4g}",
                      f"{st.batch} = {sub.micro_batch} × {sub.world_size} × "
                      f"{sub.accumulation_steps}", _lr(st.peak_lr),
                      ", ".join(f"{k} {_option(v)}" for k, v in st.options.items()
                                if v is not None),
                      noise if st.first_step > 1 else "—")
    lines: list[RenderableType] = [table]
    if measured:
        lines.append(Text(
            "date.ramp measured: the run moves up to batch B_j of the ladder once the noise scale "
            f"it measures (once measurable and risen from its lowest) has reached B_j / ρ, ρ = "
            f"{fmt(plan.ramp_reach)} — each stage starts there or, at the latest, where the table "
            "puts it; the same samples in all, fewer steps with every earlier start.",
            style="dim"))
    if plan.ramp[-1].batch != plan.target_batch:
        then = (f"; the run goes on to {plan.target_batch:,} if its measured noise scale does"
                if measured else "")
        lines.append(Text(
            f"note: the probe's noise scale does not reach batch {plan.target_batch:,} within the "
            f"baseline's progress; the planned ramp ends at {plan.ramp[-1].batch:,}{then}.",
            style="yellow"))
    return lines


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


def _sharding_lines(sharding: Sharding | None) -> list[Text]:
    """How the processes hold the model: shown for a sharded model, or for several processes."""
    if sharding is None or not (sharding.sharded or sharding.world_size > 1):
        return []
    text = Text("Parallel: ", style="bold")
    if sharding.sharded:
        text.append(f"fsdp — parameters, gradients and optimizer state sharded over "
                    f"{sharding.world_size} process{'es' if sharding.world_size != 1 else ''}")
    else:
        text.append("ddp — every process holds the whole model")
    held = sharding.bytes_per_process()
    if held is not None:
        text.append(f"; per process {bytes_text(held['parameters'])} of parameters, "
                    f"{bytes_text(held['gradients'])} of gradients, "
                    f"{bytes_text(held['optimizer_state'])} of optimizer state "
                    f"(P = {sharding.parameters:,}, fp32")
        text.append(f", each ÷ {sharding.world_size})" if sharding.sharded else ")")
    lines = [text, Text(f"Collectives per step: {sharding.collectives()}")]
    if sharding.sharded:
        lines.append(Text("The gradient noise scale is not measured under fsdp (a measured "
                          "ramp and date probe need --parallel ddp).", style="dim"))
    return lines


def _how_many(baseline_steps: int, steps: int) -> str:
    """``steps`` against the baseline's, in words: "4× fewer", "as many", "1.5× more"."""
    ratio = baseline_steps / steps
    if f"{ratio:.3g}" == "1":
        return "as many"
    return f"{ratio:.3g}× fewer" if ratio > 1 else f"{1 / ratio:.3g}× more"


def _how_sure(plan: Plan) -> Text:
    """One sentence on how far the forecast can be trusted: the probe's own uncertainty (B_hold
    one standard error of its fit either side) and how far the fit is extrapolated."""
    ahead, curve = plan.forecast, plan.noise_curve
    e0 = plan.baseline_iterations * plan.baseline_batch / plan.dataset_size
    if curve.steps_limited:
        misses = dict(STEPS_LIMITED_MISSES)
        return Text("How sure: the probe's LR check, not its noise scale, sets this forecast; "
                    f"on the three studies where a baseline read so its B_hold was "
                    f"{misses['bert-mlm']:g}× off the largest batch that held in the baseline's "
                    f"epochs on bert-mlm, where none above the baseline's did, "
                    f"{misses['vit-mnist']:g}× on vit-mnist at its best LR, where twice its "
                    f"batch did, and {misses['lenet-mnist']:g}× on lenet-mnist at 8× its LR, "
                    "where 16× did under the √k this rule then takes: below it, the forecast "
                    "can be far too cautious (docs/noise.md, \"The LR check\").",
                    style="yellow")
    reach = f"extrapolated {e0 / curve.last:.3g}× past the probe's last point"
    if ahead.holding_low is None:
        return Text(f"How sure: not measured — the fit has {curve.points or 'too few'} points, "
                    f"{reach}; a longer probe (--share) measures its spread.", style="yellow")
    low, high = ahead.holding_low, ahead.holding_high
    wide = high > 2 * low
    return Text(
        f"How sure: within one standard error of the probe's fit ({curve.points} points) "
        f"B_hold lies in {low:,}–{high:,}"
        + ("; that spans more than 2×, so the forecast cannot be trusted at this length of "
           "probe: a longer probe (--share) narrows it." if wide else
           f"; that is the probe's scatter only: on studies its constant was not chosen on, "
           f"B_hold missed the largest batch that held by up to {HELD_OUT_MISS:g}×"
           + (" (docs/noise.md, \"Held out\"); the LR check found that twice the LR trains the "
              "baseline faster, as on every study where a larger batch held." if curve.lr_checked
              else f", and on a masked LM whose accuracy waits on a plateau it was "
              f"{PLATEAU_MISS:g}× the batch that held, which the probe's LR check (not run for "
              "this probe) tells apart (docs/noise.md, \"Held out\").")
           + " It assumes the baseline trains at its best LR: from one below it, a larger batch "
           "may hold beyond B_hold."),
        style="yellow" if wide else "")


def describe_optimizer(plan: Plan) -> str:
    """``DATE (dynamic, gamma 8) over rmsprop (alpha 0.92274, eps 3.5355e-09, ...)``."""
    opt = plan.optimizer
    options = ", ".join(f"{k} {_option(v)}" for k, v in opt.options.items() if v is not None)
    ratio = dict(opt.layer_ratio)
    mode = ratio.pop("mode")
    if mode == "off":
        return f"{opt.name} ({options})"
    rule = ", ".join([mode] + [f"{k} {_option(v)}" for k, v in ratio.items()])
    return f"DATE ({rule}) over {opt.name} ({options})"


def _option(value) -> str:
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_option(v) for v in value) + ")"
    return f"{value:.5g}" if isinstance(value, float) else str(value)


def _optimizer_line(plan: Plan) -> Text:
    text = Text("Optimizer: ", style="bold")
    text.append(describe_optimizer(plan))
    opt = plan.optimizer
    text.append("\nStep: ", style="bold")
    text.append(step_path(opt.name, opt.options, opt.layer_ratio["mode"])[1])
    return text


def _value(name: str, value: float | None) -> str:
    if value is None:
        return "—"
    if isinstance(value, list):
        return " → ".join(fmt(v) for v in value)
    if "lr" in name:
        return _lr(value)
    if name.startswith("forecast."):
        return f"{value:,}" if isinstance(value, int) else f"{value:.4g}"
    suffix = " epochs" if "epochs" in name else ""
    return fmt(value) + suffix


def _lr(value: float) -> str:
    return f"{value:.5g}"
