"""A plan, shown: rich tables of its inputs, derived values and phases, the batch split, the LR
curve."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from date_engine.catalog import step_path
from date_engine.forecast import HELD_OUT_MISS, STEPS_LIMITED_MISSES
from date_engine.plan import Plan, fmt
from date_engine.runplan import BatchSplit, RunPlan, Sharding
from date_engine.view.chart import Series, line_chart
from date_engine.view.console import BRANCHES_DOC, LR_CHECK_DOC, NOISE_DOC, bytes_text

__all__ = ["describe_optimizer", "describe_split", "print_plan", "render_comparison",
           "render_plan", "scheme_name", "show_plan"]


def scheme_name(plan: Plan) -> str:
    """A short name for how a plan scales: DATE's default rule, the paper's, or its two rules."""
    if plan.rule == "date" and plan.scaling == "power" and plan.warmup == "legw":
        return f"DATE ({plan.optimizer.name} rule: k^{plan.lr_exponent:g} + LEGW)"
    if plan.rule == "paper" and plan.scaling == "sqrt" and plan.warmup == "legw":
        return "DATE, the paper's rule (sqrt + LEGW)"
    return f"{plan.scaling} scaling + {plan.warmup} warmup"


def render_plan(plan: Plan, split: BatchSplit, title: str, chart_width: int = 64,
                sharding: Sharding | None = None, auto: bool = False,
                sources: dict[str, str] | None = None) -> RenderableType:
    """Everything ``date plan`` prints for one plan, its batch split and how the processes hold
    the model; ``sources``: where ``--from`` read each baseline value."""
    parts: list[RenderableType] = [
        Text(title, style="bold"),
        Text(
            f"{scheme_name(plan)}: batch {plan.baseline_batch} → {plan.target_batch} "
            f"(k = {fmt(plan.scale)})" + _tokens_a_step(plan)
        ),
        _inputs_table(plan, sources or {}),
        _derived_table(plan),
        *([Text(plan.lr_note)] if plan.lr_note else []),
        *_measured_lines(plan),
        *_forecast_lines(plan),
        _phases_table(plan),
        *_ramp_table(plan, split),
        _split_line(split, auto),
        *_sharding_lines(sharding),
        _optimizer_line(plan, split),
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


def show_plan(console: Console, path: Path, spec: Any, run: RunPlan, others: dict[str, Plan],
              parameters: int | None, micro_batch: int | None, times: dict[str, Any] | None,
              memory: Any, devices: int | None, sources: dict[str, str] | None = None) -> None:
    """``date plan``'s screen: the plan (:func:`print_plan`), then the time on the devices when
    ``times`` were forecast, else where to get them."""
    print_plan(console, path, spec.recipe, run, others, run.sharding(parameters),
               auto=spec.train.micro_batch == "auto" and micro_batch is None, sources=sources)
    if times:
        from date_engine.view.timing import render_time

        console.print(render_time(times[spec.date.budget], times, memory))
    elif devices is not None:
        console.print("For the time on these devices add --bench bench.json (from date bench "
                      "SPEC on your hardware).", markup=False, soft_wrap=True)


def print_plan(console: Console, path: Path, recipe: str | None, run: RunPlan,
               others: dict[str, Plan], sharding: Sharding | None, auto: bool = False,
               sources: dict[str, str] | None = None) -> None:
    """What ``date plan`` prints: the plan of ``path`` and, with ``others``, the comparison;
    ``auto``: the micro-batch is found when the run starts; ``sources``: where ``--from`` read
    each baseline value."""
    width = max(32, min(console.width - 14, 90))
    title = f"DATE plan for {path}" + (f" (recipe {recipe})" if recipe else "")
    console.print(render_plan(run.plan, run.split, title, chart_width=width,
                              sharding=sharding, auto=auto, sources=sources))
    if others:
        console.print()
        console.print(render_comparison(run.plan, others, chart_width=width))


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


def _inputs_table(plan: Plan, sources: dict[str, str]) -> Table:
    """The baseline's values and the spec field each came from, or where ``--from`` read it
    (``sources``: spec field -> words)."""
    table = Table(title="Inputs (the baseline that works)", title_justify="left")
    for col in ("symbol", "value", "from", "meaning"):
        table.add_column(col)
    for d in plan.inputs():
        table.add_row(d.symbol, _value(d.name, d.value), sources.get(d.formula, d.formula),
                      d.note)
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


def _measured_lines(plan: Plan) -> list[Text]:
    """What the probe's branches measured, and which of the plan's numbers rest on it."""
    m, b = plan.measured, plan.target_batch
    if m is None or b <= plan.baseline_batch:
        return []
    critical = ", ".join(f"{c.batch:,} from sample {c.at_samples:,}" for c in m.critical_batch)
    text = Text("Measured ", style="bold")
    text.append(f"by the probe's branches (to batch {m.branched_to:,}): the critical batch, the "
                f"largest that needed at most twice the baseline's samples, was {critical}. ")
    start = m.keeps_up_from(b)
    if start is not None:
        text.append(f"Batch {b:,} kept up from sample {start:,} on.")
    elif b <= m.branched_to:
        text.append(f"Batch {b:,} did not keep up on any branch: expect it to need more than "
                    "twice the baseline's samples (--budget hold gives it the epochs the "
                    "forecast asks for).", style="yellow")
    else:
        text.append(f"Batch {b:,} lies beyond the branches: extrapolated.", style="yellow")
    marks = Text("η and the second moment: measured at this batch." if m.settings is not None
                 and m.settings.batch == b and plan.rule == "date" else
                 "η and the second moment: the rule's, extrapolated (the branches measured them "
                 f"at batch {m.branched_to:,}).", style="dim")
    if m.critical_batch:
        last = max(c.at_samples for c in m.critical_batch)
        marks.append("\nThe forecast" + (", the ramp's rungs" if plan.ramp else "")
                     + (", hold's epochs" if plan.budget == "hold" else "")
                     + f": from the measured critical batch to sample {last:,}, extrapolated "
                     "past it by the noise curve's growth.")
    return [text, marks]


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
    how = _how_many(plan.baseline_iterations, ahead.steps)
    text = Text("Forecast ", style="bold")
    text.append(f"at batch {b:,}: {ahead.epochs:.4g} epochs ({ahead.factor:.3g}× the baseline's) "
                f"to reach its loss, {ahead.steps:,} steps ({how} "
                f"{'as' if how == 'as many' else 'than'} its {plan.baseline_iterations:,}); "
                "B_hold, the largest batch expected to hold in its epochs, "
                f"≈ {ahead.holding_batch:,}.")
    critical = plan.critical_curve
    basis = Text(
        f"From the probe's branches: the critical batch measured at epochs {critical.first:.3g}–"
        f"{critical.last:.3g}, the noise curve's growth before and after (extrapolated "
        f"{e0 / critical.last:.3g}× past the last)." if critical is not None else
        "From the probe's LR check: twice the LR trained no faster, so every batch needs the "
        "baseline's steps." if curve.steps_limited else
        f"From the probe's fit B_noise(e) = {curve.a:.4g} · e^{curve.beta:.3g} over epochs "
        f"{curve.first:.3g}–{curve.last:.3g}, extrapolated {e0 / curve.last:.3g}× past it.",
        style="dim")
    lines = [text, basis, _how_sure(plan)]
    if not curve.lr_checked:
        lines.append(Text("note: this probe ran without the LR check, which tells a baseline a "
                          "larger LR cannot speed up; date probe runs it unless --no-lr-check.",
                          style="yellow"))
    same_epochs_steps = math.ceil(plan.baseline_iterations * b0 / b)
    if plan.budget == "ramp" and plan.total_iterations > same_epochs_steps:
        lines.append(Text(
            f"note: this ramp plans {plan.total_iterations:,} steps, more than the "
            f"{same_epochs_steps:,} of the baseline's epochs at batch {b:,}"
            + ("; those epochs are expected to hold here, in fewer steps."
               if not ahead.loses_at_same_epochs else " (its smaller batches take more steps)."),
            style="yellow"))
    if plan.budget == "same-epochs" and b > b0:
        lines.append(_verdict(plan))
    if curve.steps_limited and b > b0 and plan.scaling != "none":
        lines.append(Text(
            "note: twice the LR trains this baseline no faster, yet this plan raises it "
            f"{plan.peak_lr / plan.baseline_lr:.3g}×; --set date.scaling=none keeps the "
            "baseline's LR.", style="yellow"))
    if plan.budget == "ramp" and curve.steps_limited:
        lines.append(Text(
            "warning: the LR check read this baseline steps-limited, where a ramp's larger "
            "batches may not save steps; --budget hold trains the baseline's steps.",
            style="yellow"))
    return lines


def _phases_table(plan: Plan) -> Table:
    own = not plan.schedule.is_date_default  # the baseline's shape, kept
    rules = {
        "warmup": "η·(e/w)" + ("²" if plan.warmup_shape == "quadratic" else ""),
        "decay": (f"{plan.schedule.name}: {plan.schedule.formula()}, t = (i − I_w)/(I − I_w)"
                  if own else "η·(I − i)/(I − I_w)"),
        "floor": "η̂",
    }
    if own and plan.schedule.index == "torch":
        rules["warmup"] += ", step i at i − 1 steps done (torch's count)"
    table = Table(
        title="Schedule phases (i = optimizer step, e = i·B/n epochs)", title_justify="left"
    )
    counted = plan.tokens_per_sample is not None
    for col in ("phase", "steps", "epochs", *(["tokens"] if counted else []), "lr", "rule"):
        table.add_column(col)
    for p in plan.phases:
        steps = str(p.first_step) if p.steps == 1 else f"{p.first_step}–{p.last_step}"
        lr = _lr(p.first_lr) if p.first_lr == p.last_lr else f"{_lr(p.first_lr)} → {_lr(p.last_lr)}"
        tokens = [f"{_tokens(plan.tokens(p.first_epoch * plan.dataset_size))}–"
                  f"{_tokens(plan.tokens(p.last_epoch * plan.dataset_size))}"] if counted else []
        table.add_row(p.name, steps, f"{p.first_epoch:.4g}–{p.last_epoch:.4g}", *tokens, lr,
                      rules[p.name])
    return table


def _tokens_a_step(plan: Plan) -> str:
    """``; sequences of 64 tokens: 768 → 6,144 a step``, for a plan that counts tokens."""
    if plan.tokens_per_sample is None:
        return ""
    return (f"; sequences of {plan.tokens_per_sample:,} tokens: "
            f"{_tokens(plan.tokens(plan.baseline_batch))} → "
            f"{_tokens(plan.tokens(plan.target_batch))} a step")


def _tokens(count: float) -> str:
    """A count of tokens as people say them: 49,152; 12.6M; 1.2B."""
    for size, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if count >= size:
            return f"{count / size:.4g}{suffix}"
    return f"{count:,.0f}"


def _ramp_table(plan: Plan, split: BatchSplit) -> list[RenderableType]:
    """budget ramp: each stage's steps, epochs, batch split, peak LR and optimizer options."""
    if not plan.ramp:
        return []
    measured, critical = plan.ramp_mode == "measured", plan.critical_curve
    what = "B_crit" if critical is not None else "B_noise"
    source = "the probe's branches, measured or extrapolated" if critical is not None else \
        "the probe"
    table = Table(title=f"Batch ramp (each stage's values derived at its batch; {what} from "
                  + (f"{source}, or the run's noise scale (*))" if measured else f"{source})"),
                  title_justify="left")
    counted = plan.tokens_per_sample is not None
    for col in ("stage", "steps", "epochs", *(["tokens at start"] if counted else []), "batch",
                "η_j", "optimizer", f"{what} at start"):
        table.add_column(col)
    run = RunPlan(plan, split)
    for j, st in enumerate(plan.ramp):
        steps = str(st.first_step) if st.steps == 1 else f"{st.first_step}–{st.last_step}"
        sub = run.split_at(st.first_step)
        noise = f"{st.noise_at_start:,.0f}{' *' if st.measured else _how_known(plan, st)}"
        tokens = [_tokens(plan.tokens(st.samples_before))] if counted else []
        table.add_row(str(j), steps, f"{plan.epoch(st.first_step - 1):.4g}–"
                      f"{plan.epoch(st.last_step):.4g}", *tokens,
                      f"{st.batch} = {sub.micro_batch} × {sub.world_size} × "
                      f"{sub.accumulation_steps}", _lr(st.peak_lr),
                      ", ".join(f"{k} {_option(v)}" for k, v in st.options.items()
                                if v is not None),
                      noise if st.first_step > 1 else "—")
    lines: list[RenderableType] = [table]
    if measured:
        lines.append(Text(
            "date.ramp measured: each stage starts once the run's own noise scale reaches B_j / ρ "
            f"(ρ = {fmt(plan.ramp_reach)}), at the latest where the table puts it.", style="dim"))
    if plan.ramp[-1].batch != plan.target_batch:
        then = (f"; the run goes on to {plan.target_batch:,} if its measured noise scale does"
                if measured else "")
        reach = "the critical batch measured and extrapolated" if critical is not None else \
            "the probe's noise scale"
        lines.append(Text(
            f"note: {reach} does not reach batch {plan.target_batch:,} within the baseline's "
            f"progress; the planned ramp ends at {plan.ramp[-1].batch:,}{then}.",
            style="yellow"))
    return lines


def _how_known(plan: Plan, stage) -> str:
    """`` (measured)`` where a planned rung starts within the checkpoints the probe branched
    from, `` (extrapolated)`` outside them; nothing without branches."""
    curve = plan.critical_curve
    if curve is None:
        return ""
    start = curve.progress_at(stage.batch / plan.ramp_reach)
    return " (measured)" if curve.measured_at(start) else " (extrapolated)"


def describe_split(split: BatchSplit) -> str:
    """``8192 = 256 (micro-batch) × 4 (processes) × 8 (accumulation steps)``."""
    return (
        f"{split.batch} = {split.micro_batch} (micro-batch) × {split.world_size} "
        f"(process{'es' if split.world_size != 1 else ''}) × {split.accumulation_steps} "
        f"(accumulation step{'s' if split.accumulation_steps != 1 else ''})"
    )


def _split_line(split: BatchSplit, auto: bool = False) -> Text:
    text = Text("Batch split: ", style="bold")
    text.append(describe_split(split))
    if auto:
        text.append(f"; train.micro_batch: auto: the run tries {split.micro_batch} per pass, then "
                    "halves it to the largest its device holds (micro_batch.json)")
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
    """One line on how far the forecast can be trusted: the range of B_hold over one standard
    error of the probe's fit, the worst miss measured where the constant was not chosen, a link."""
    ahead, curve, critical = plan.forecast, plan.noise_curve, plan.critical_curve
    if critical is not None:
        return Text(f"How sure: the critical batch measured at {len(critical.points)} "
                    f"checkpoint(s), each to within a factor of 2 (the branches' ladder); "
                    f"past them, extrapolated ({BRANCHES_DOC}).", style="yellow")
    if curve.steps_limited:
        misses = [miss for _, miss in STEPS_LIMITED_MISSES]
        return Text(f"How sure: set by the LR check, not the noise scale; where probes read so, "
                    f"B_hold was {min(misses):g}–{max(misses):g}× off the largest batch that "
                    f"held ({LR_CHECK_DOC}).", style="yellow")
    if ahead.holding_low is None:
        return Text(f"How sure: not measured (the fit has {curve.points or 'too few'} points); "
                    f"a longer probe (--share) measures it ({NOISE_DOC}).", style="yellow")
    low, high = ahead.holding_low, ahead.holding_high
    if high > 2 * low:
        return Text(f"How sure: B_hold {low:,}–{high:,} over one standard error of the fit, too "
                    f"wide to trust; a longer probe (--share) narrows it ({NOISE_DOC}).",
                    style="yellow")
    return Text(f"How sure: B_hold {low:,}–{high:,} over one standard error of the fit; on "
                f"held-out studies it missed by up to {HELD_OUT_MISS:g}× ({NOISE_DOC}).")


def _verdict(plan: Plan) -> Text:
    """Whether the baseline's epochs are expected to hold at the target batch, as sure as the
    how-sure line is."""
    ahead, b = plan.forecast, plan.target_batch
    low, high, hold = ahead.holding_low, ahead.holding_high, ahead.holding_batch
    e0 = plan.baseline_iterations * plan.baseline_batch / plan.dataset_size
    trusted = plan.noise_curve.steps_limited or (low is not None and high <= 2 * low)
    if ahead.loses_at_same_epochs:
        sure = "are expected to lose" if low is None or b > high else "may lose"
        return Text(f"warning: at batch {b:,}, beyond B_hold ≈ {hold:,}, the baseline's "
                    f"{e0:.4g} epochs {sure} accuracy; --budget hold trains "
                    f"{ahead.epochs:.4g} epochs, --budget ramp grows the batch as it can.",
                    style="yellow")
    if low is not None and b > low:
        return Text(f"batch {b:,} is within B_hold ≈ {hold:,} but inside its range "
                    f"({low:,}–{high:,}): the baseline's epochs may hold accuracy; --budget hold "
                    "is the cautious choice.", style="yellow")
    where = f"below B_hold's whole range ({low:,}–{high:,})" if low is not None else \
        f"within B_hold ≈ {hold:,}"
    return Text(f"batch {b:,} is {where}: the baseline's epochs are expected to hold accuracy"
                + ("; no budget is needed." if trusted else
                   ", though its spread is not measured." if low is None else
                   ", though that range is too wide to be sure."),
                style="green" if trusted else "yellow")


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


def describe_extras(plan: Plan) -> str:
    """What trains besides the optimizer's options: the clipping and the decay's exemptions."""
    opt = plan.optimizer
    clip = f"gradients clipped to global norm {plan.grad_clip:g}" if plan.grad_clip else \
        "no gradient clipping"
    if not opt.options.get("weight_decay"):
        return clip
    spared = "biases and norm weights spared" if opt.decay_exempt else \
        "on every parameter, biases and norms included"
    return f"{clip}; weight decay {spared}"


def _optimizer_line(plan: Plan, split: BatchSplit | None = None) -> Text:
    text = Text("Optimizer: ", style="bold")
    text.append(describe_optimizer(plan))
    text.append("\nClipping and decay: ", style="bold")
    text.append(describe_extras(plan))
    opt = plan.optimizer
    text.append("\nStep: ", style="bold")
    text.append(step_path(opt.name, opt.options, opt.layer_ratio["mode"])[1])
    if split is not None and split.world_size > 1:
        held = "its shard" if split.sharded else "its full copy"
        text.append(f"; each of the {split.world_size} processes steps {held}")
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


def plan_document(run: RunPlan, parameters: int | None, others: dict[str, Plan],
                  times: dict | None, budget: str, memory: Any = None) -> dict:
    """What ``date plan --json`` prints: the run's plan; with ``others``, the compared plans;
    with ``times``, the forecast of the spec's ``budget`` and of every budget; with ``memory``,
    the micro-batch that fits a device (:class:`~date_engine.timing.MemoryFit`)."""
    document = run.document(parameters)
    if memory:
        document["memory"] = memory.to_dict()
    if others:
        document["compare"] = {name: p.to_dict() for name, p in others.items()}
    if times:
        document["time"] = {**times[budget].to_dict(), "budgets": {
            name: {"steps": t.steps, "run_seconds": t.run_seconds, "speedup": t.speedup}
            for name, t in times.items()}}
    return document
