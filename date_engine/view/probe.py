"""What ``date probe`` shows: the measured noise scale along the probed epochs, the fitted curve,
and the forecast at multiples of the baseline's batch; and its PNG."""

from __future__ import annotations

from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text

from date_engine.forecast import CriticalCurve, forecast, holding_batch
from date_engine.probe import Probe
from date_engine.view.console import LR_CHECK_DOC

__all__ = ["FORECAST_SCALES", "probe_figure", "render_probe"]

FORECAST_SCALES = (2, 4, 8, 16, 32, 64, 128)


def render_probe(probe: Probe, title: str) -> Group:
    points = Table(title="Measured gradient noise scale (B_noise = tr(Σ) / |G_pair|², the "
                         "signal of pairs of consecutive steps; B_simple = tr(Σ) / |G|² of "
                         "single steps, for comparison)", title_justify="left")
    for col in ("epoch", "B_noise", "B_simple", "|G_pair|²", "tr(Σ)", "loss"):
        points.add_column(col, justify="right")
    for p in probe.points:
        points.add_row(f"{p.epoch:.3g}", _scale(p.noise_scale), _scale(p.simple_scale),
                       f"{p.grad_sq:.4g}", f"{p.grad_trace:.4g}",
                       "—" if p.loss is None else f"{p.loss:.4g}")
    curve, b0, e0 = probe.curve, probe.baseline["batch_size"], probe.baseline_epochs
    n = probe.baseline["dataset_size"]
    cost = CriticalCurve.measured(probe.measurement, n, curve) or curve
    table = Table(title=f"Forecast (baseline {b0} × {e0:.4g} epochs; "
                  + ("from the critical batch the branches measured)" if cost is not curve else
                     "from the noise curve)"), title_justify="left")
    for col in ("batch", "k", "epochs to the baseline's loss", "× epochs", "steps",
                "steps saved", "same epochs"):
        table.add_column(col, justify="right")
    for k in FORECAST_SCALES:
        if k * b0 > n:
            break
        f = forecast(cost, k * b0, b0, e0, n)
        table.add_row(f"{k * b0:,}", str(k), f"{f.epochs:.3g}", f"{f.factor:.2f}",
                      f"{f.steps:,}", f"{f.speedup:.1f}×",
                      "expected to lose accuracy" if f.loses_at_same_epochs else "holds")
    hold = holding_batch(cost, b0, e0)
    lines = [
        Text(title, style="bold"),
        Text(f"Probed {probe.steps:,} of the baseline's {probe.baseline_steps:,} optimizer steps "
             f"({probe.share:.0%}, {probe.epochs:.3g} epochs) in {probe.wall_seconds:.0f} s, "
             f"batch {b0} = {probe.micro_batch} × {probe.world_size} × "
             f"{probe.accumulation_steps}."),
        points,
        Text(f"Fit: B_noise(e) = {curve.a:.4g} · e^{curve.beta:.3g} (measured over epochs "
             f"{curve.first:.3g}–{curve.last:.3g}, extrapolated to {e0:.4g}: "
             f"B_noise({e0:.4g}) ≈ {curve(e0):,.0f})."),
        lr_check_line(probe),
        table,
        Text(f"B_hold ≈ {hold:,}: the largest batch expected to hold accuracy in the baseline's "
             "epochs (beyond it, reaching its loss takes a third more epochs)."),
    ]
    return Group(*lines, *_branch_lines(probe))


def _branch_lines(probe: Probe) -> list:
    """The branches: each batch's loss against the baseline's, the critical batch per
    checkpoint, the target's settings, and what they cost."""
    if not probe.branches:
        return []
    table = Table(title=f"Branches to batch {probe.target_batch:,} (docs/branches.md)",
                  title_justify="left")
    for col in ("from sample", "batch", "LR", "β2/α", "steps", "loss", "metric", "verdict"):
        table.add_column(col, justify="right")
    for b in probe.branches:
        verdict = ("baseline" if b.role == "baseline" else "keeps up" if b.keeps_up else
                   "behind" if b.stable else f"unstable: {b.why}")
        table.add_row(f"{b.at_samples:,}", f"{b.batch:,}" + (" (peak)" if b.role == "setting"
                                                             else ""),
                      f"{b.lr:.4g}", "baseline's" if b.second_moment == "fixed" else "rule's",
                      f"{b.steps:,}", "—" if b.loss is None else f"{b.loss:.4g}",
                      "—" if b.metric is None else f"{b.metric:.4g}", verdict)
    critical = ", ".join(f"{c.batch:,} from sample {c.at_samples:,}"
                         for c in probe.critical_batch)
    lines = [table, Text(f"Critical batch (the largest that kept up, τ the baseline branches' "
                         f"spread): {critical}.")]
    if probe.settings is not None:
        s = probe.settings
        moment = "the rule's" if s.second_moment == "scaled" else "the baseline's"
        lines.append(Text(
            f"At batch {s.batch:,}: LR exponent {s.lr_exponent:g} with {moment} second moment "
            + ("had the lowest loss of the stable settings; date plan --batch "
               f"{s.batch} --probe takes them." if s.stable else
               "— none of the settings tried was stable at its peak LR; these reached the "
               "lowest loss, and the plan takes them and says so.")))
    if probe.branch_cost is not None:
        lines.append(Text(probe.branch_cost.line()))
    return lines


def lr_check_line(probe: Probe) -> Text:
    """What the LR check measured and what the forecast makes of it."""
    check = probe.lr_check
    if check is None:
        return Text("LR check: not run (--no-lr-check, or no loss logged in the probe's second "
                    "half); the forecast reads the noise scale alone.", style="dim")
    said = (f"LR check: at {check.factor:g}× the LR the probe's steps end at a loss of "
            f"{check.loss:.4g} against {check.baseline_loss:.4g}" if check.loss is not None else
            f"LR check: at {check.factor:g}× the LR the probe's steps stopped on a non-finite "
            f"loss ({check.baseline_loss:.4g} at the baseline's)")
    if check.gains:
        return Text(said + ": a larger LR trains faster, and the forecast reads the noise scale.")
    return Text(said + ": a larger LR does not train faster, so every batch is forecast to need "
                f"the baseline's steps ({LR_CHECK_DOC}).", style="yellow")


def _scale(value: float | None) -> str:
    return f"{value:,.0f}" if value else "—"


def probe_figure(probe: Probe, path: Path) -> Path | None:
    """B_noise against epoch: the measured points and the fitted curve to the baseline's end."""
    from date_engine.view.plots import pyplot, save_figure

    plt = pyplot()
    if plt is None:
        return None
    curve, e0 = probe.curve, probe.baseline_epochs
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    measured = [(p.epoch, p.noise_scale) for p in probe.points if p.noise_scale]
    ax.plot(*zip(*measured), "o", label="measured: pairs of steps (forecast)")
    simple = [(p.epoch, p.simple_scale) for p in probe.points if p.simple_scale]
    if simple:
        ax.plot(*zip(*simple), "x", color="gray", label="B_simple: single steps")
    grid = [e0 * (i + 1) / 200 for i in range(200)]
    inside = [e for e in grid if e <= curve.last]
    beyond = [e for e in grid if e >= curve.last]
    ax.plot(inside, [curve(e) for e in inside], "-", color="tab:blue",
            label=f"fit {curve.a:.3g}·e^{curve.beta:.2f}")
    ax.plot(beyond, [curve(e) for e in beyond], "--", color="tab:blue", label="extrapolated")
    ax.axhline(probe.baseline["batch_size"], color="gray", linewidth=1, linestyle=":",
               label="baseline batch")
    ax.set_yscale("log")
    ax.set_xlabel("epoch of the baseline")
    ax.set_ylabel("gradient noise scale B_noise")
    return save_figure(plt, fig, ax, path, str(path))
