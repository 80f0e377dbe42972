"""PNG figures: a plan's LR curve (``date plan --plot``) and a sweep's figures (the paper's Fig. 1
and 2, LR schedules, loss curves). matplotlib is optional and imported only when a figure is drawn.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from date_engine.errors import DateError
from date_engine.plan import Plan

__all__ = ["FIGURES", "MISSING_MATPLOTLIB", "pyplot", "run_curves", "save_lr_plot",
           "sweep_figures"]

MISSING_MATPLOTLIB = ("matplotlib is not installed; in the date_engine clone run: pip "
                      "install -e '.[plot]'")


def pyplot() -> Any | None:
    """matplotlib.pyplot with a file-only backend, or None when matplotlib is not installed."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def save_lr_plot(path: str | Path, plans: Sequence[tuple[str, Plan]]) -> Path:
    """Draw each plan's learning rate against the optimizer step (and epoch) into a PNG."""
    plt = pyplot()
    if plt is None:
        raise DateError(f"--plot needs matplotlib: {MISSING_MATPLOTLIB}.")
    path = Path(path)
    first = plans[0][1]
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=120)
    for (label, plan), color in zip(plans, ("tab:blue", "tab:red", "tab:green", "tab:purple")):
        steps = range(1, plan.total_iterations + 1)
        ax.plot(steps, plan.lrs(), label=f"{label}: η = {plan.peak_lr:.4g}", color=color)
        if plan.warmup_iterations >= 1:
            ax.axvline(plan.warmup_iterations, color=color, linestyle=":", linewidth=1)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("learning rate")
    ax.set_title(
        f"LR schedule at batch {first.target_batch} "
        f"(baseline {first.baseline_batch}, k = {first.scale:g})"
    )
    per_step = first.target_batch / first.dataset_size
    top = ax.secondary_xaxis("top", functions=(lambda s: s * per_step, lambda e: e / per_step))
    top.set_xlabel("epoch")
    return save_figure(plt, fig, ax, path, f"--plot {path}")


def save_figure(plt, fig, ax, path: Path, name: str) -> Path:
    """Finish a one-panel figure (grid, legend, tight layout), write it to ``path`` and close it;
    a file that cannot be written is a DateError naming it as ``name``."""
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as exc:
        raise DateError(f"{name}: cannot write the file ({exc.strerror}).") from None
    finally:
        plt.close(fig)
    return path


def run_curves(records: list[dict[str, Any]], metric_name: str, path: Path,
               plan: Plan | None = None) -> Path | None:
    """A run's metrics.jsonl records as one PNG: training loss, the evaluation metric, the LR (the
    plan's, every step) and the spread of DATE's layer ratios (min, median, max), each against the
    optimizer step. None without matplotlib or without a logged step."""
    plt = pyplot()
    train = [r for r in records if "loss" in r]
    if plt is None or not train:
        return None
    evals = [(r["step"], r["eval"][metric_name]) for r in records
             if metric_name in (r.get("eval") or {})]
    steps = [r["step"] for r in train]
    fig, axes = plt.subplots(1, 4, figsize=(15, 3.2))
    axes[0].plot(steps, [r["loss"] for r in train])
    axes[0].set(title="training loss", yscale="log")
    if evals:
        axes[1].plot(*zip(*evals), marker="o")
    axes[1].set(title=metric_name)
    if plan is not None:
        axes[2].plot(range(1, plan.total_iterations + 1), plan.lrs())
    else:
        axes[2].plot(steps, [r["lr"] for r in train])
    axes[2].set(title="learning rate")
    if "ratio_median" in train[0]:
        for key, style in (("ratio_min", ":"), ("ratio_median", "-"), ("ratio_max", ":")):
            axes[3].plot(steps, [r.get(key) for r in train], style, color="tab:blue", label=key[6:])
        axes[3].legend(fontsize=7)
    axes[3].set(title="DATE's layer ratios", yscale="log")
    for ax in axes:
        ax.set_xlabel("optimizer step")
        ax.grid(alpha=0.3)
        for stage in plan.ramp[1:] if plan is not None else ():  # a batch ramp's changes
            ax.axvline(stage.first_step, color="gray", alpha=0.5, linewidth=0.8, linestyle="--")
    if plan is not None and plan.ramp:
        axes[0].set_title("training loss (dashed: the batch grows)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- a sweep's figures

FIGURES = {
    "metric_vs_batch.png": "final metric against batch size, per scheme (mean ± sd over seeds)",
    "time_to_target.png": "training time and optimizer steps to the baseline's accuracy, by scheme",
    "lr_curves.png": "the learning-rate schedules the cells ran, against epochs",
    "loss_curves.png": "training loss against epochs (first seed)",
    "metric_vs_steps.png": "the metric against optimizer steps at each batch, per scheme (first "
                           "seed; dashed: where a batch ramp's batch grows)",
}
_COLORS = {
    "baseline": "black",
    "date": "tab:blue",
    "linear": "tab:red",
    "none": "tab:gray",
    "lars": "tab:green",
    "lamb": "tab:purple",
    "adam": "tab:orange",
}


def sweep_figures(
    root: Path, summary: Any, schemes: list[str], plan_of: Callable[[Any], Plan | None]
) -> dict[str, bool | str]:
    """Draw every figure of a sweep into ``root``: ``{file name: True}`` for each drawn, else the
    reason it was not. ``plan_of(cell_result)`` reads a cell's plan."""
    plt = pyplot()
    if plt is None:
        return {name: f"not drawn: {MISSING_MATPLOTLIB}" for name in FIGURES}
    drawn: dict[str, bool | str] = {}
    for name, draw in (
        ("metric_vs_batch.png", _metric_vs_batch),
        ("time_to_target.png", _time_to_target),
        ("lr_curves.png", _lr_curves),
        ("loss_curves.png", _loss_curves),
        ("metric_vs_steps.png", _metric_vs_steps),
    ):
        fig = draw(plt, summary, schemes, plan_of)
        if fig is None or isinstance(fig, str):  # a string: why there is nothing to draw
            drawn[name] = f"not drawn: {fig or 'no finished cells yet'}"
            continue
        fig.tight_layout()
        fig.savefig(root / name, dpi=110)
        plt.close(fig)
        drawn[name] = True
    return drawn


def _metric_vs_batch(plt, summary, schemes: list[str], plan_of):
    base = summary.baseline
    if base is None or base.mean is None:
        return None
    margin = abs(base.mean - summary.target)
    means = [g.mean for g in summary.groups if g.mean is not None]
    far = any(abs(m - base.mean) > 12 * margin for m in means) if margin > 0 else False
    fig, axes = plt.subplots(1, 2 if far else 1, figsize=(12 if far else 7, 4.5), squeeze=False)
    for ax in axes[0]:
        ax.axhline(base.mean, color="black", linewidth=1, label=f"baseline (batch {base.batch})")
        ax.axhspan(
            min(base.mean, summary.target),
            max(base.mean, summary.target),
            color="black",
            alpha=0.08,
            label=f"tolerance {summary.tolerance}",
        )
        for s in schemes:
            groups = [g for g in summary.groups if g.scheme == s and g.mean is not None]
            if groups:
                ax.errorbar(
                    [base.batch] + [g.batch for g in groups],
                    [base.mean] + [g.mean for g in groups],
                    yerr=[base.std] + [g.std for g in groups],
                    marker="o",
                    capsize=3,
                    label=s,
                    color=_COLORS.get(s),
                )
            for g in summary.groups:
                if g.scheme == s and g.complete and g.mean is None:
                    ax.annotate(
                        "diverged",
                        (g.batch, base.mean),
                        color=_COLORS.get(s),
                        fontsize=8,
                        rotation=90,
                        va="top",
                    )
        ax.set_xscale("log", base=2)
        ax.set_xlabel("global batch size")
        ax.set_ylabel(summary.metric_name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0][0].set_title(f"{summary.metric_name} after the baseline's epochs")
    if far:  # the right panel zooms in on the tolerance band
        low, high = base.mean - 8 * margin, base.mean + 3 * margin
        if not summary.higher_is_better:
            low, high = base.mean - 3 * margin, base.mean + 8 * margin
        axes[0][1].set_ylim(low, high)
        axes[0][1].set_title("near the baseline")
    return fig


def _time_to_target(plt, summary, schemes: list[str], plan_of):
    base = summary.baseline
    if base is None or base.mean is None:
        return None
    if base.time_to_target_s is None:  # every line starts at the baseline's time
        return (f"the baseline reached the target on {base.reached} of its {len(base.results)} "
                "seeds, so it has no time to target to compare with")
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    for s in ["baseline"] + schemes:
        groups = [base] + ([] if s == "baseline" else [g for g in summary.groups if g.scheme == s])
        groups = [
            g for g in groups if g.time_to_target_s is not None
        ]  # each line starts at the baseline
        if not groups:
            continue
        kw = dict(marker="o", label=s, color=_COLORS.get(s))
        ax.plot([g.batch for g in groups], [g.time_to_target_s for g in groups], **kw)
        ax2.plot([g.batch for g in groups], [g.steps_to_target for g in groups], **kw)
    for a, label in (
        (ax, "training seconds to the target"),
        (ax2, "optimizer steps to the target"),
    ):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("global batch size")
        a.set_ylabel(label)
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=8)
    fig.suptitle(
        f"time to {summary.metric_name} {'≥' if summary.higher_is_better else '≤'} "
        f"{summary.target:.4g}"
    )
    return fig


def _kept(summary, scheme: str) -> list:
    return [g for g in summary.groups if g.scheme == scheme]


def _panels(plt, count: int):
    cols = min(count, 3)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for extra in axes.flat[count:]:
        extra.set_visible(False)
    return fig, list(axes.flat)


def _lr_curves(plt, summary, schemes: list[str], plan_of):
    def curve(result):
        plan = plan_of(result)
        if plan is None:
            return None
        return [plan.epoch(i) for i in range(1, plan.total_iterations + 1)], plan.lrs()

    return _curves(plt, summary, schemes, curve, "learning rate", log=False)


def _loss_curves(plt, summary, schemes: list[str], plan_of):
    def curve(result):
        return tuple(zip(*result.losses)) if result.losses else None

    return _curves(plt, summary, schemes, curve, "training loss", log=True)


def _metric_vs_steps(plt, summary, schemes: list[str], plan_of):
    """One panel per batch: each scheme's evaluations against optimizer steps (first seed), the
    baseline's in black, a ramp's batch changes marked on its curve."""
    batches = sorted({g.batch for g in summary.groups if g.results[0].evals})
    if not batches:
        return None
    fig, axes = _panels(plt, len(batches))
    base = summary.baseline
    for ax, batch in zip(axes, batches):
        if base is not None and base.results[0].evals:
            steps, _, values = zip(*base.results[0].evals)
            ax.plot(steps, values, color="black", linewidth=1, label=f"baseline {base.batch}")
        for s in schemes:
            group = next((g for g in summary.groups if g.scheme == s and g.batch == batch), None)
            if group is None or not group.results[0].evals:
                continue
            result = group.results[0]
            steps, _, values = zip(*result.evals)
            (line,) = ax.plot(steps, values, marker=".", label=s, color=_COLORS.get(s))
            plan = plan_of(result)
            for stage in plan.ramp[1:] if plan is not None else ():
                if stage.first_step <= result.steps:
                    ax.axvline(stage.first_step, color=line.get_color(), alpha=0.4,
                               linewidth=0.8, linestyle="--")
        if base is not None and base.mean is not None and summary.target is not None:
            margin = abs(base.mean - summary.target)  # zoom on the tolerance band, not the start
            low, high = base.mean - 8 * margin, base.mean + 3 * margin
            if not summary.higher_is_better:
                low, high = base.mean - 3 * margin, base.mean + 8 * margin
            ax.set_ylim(low, high)
            ax.axhspan(min(base.mean, summary.target), max(base.mean, summary.target),
                       color="black", alpha=0.08)
        ax.set_title(f"batch {batch}")
        ax.set_xscale("log")
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(summary.metric_name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def _curves(plt, summary, schemes: list[str], curve, ylabel: str, log: bool):
    """One panel per scheme: ``curve(result) -> (epochs, values) | None`` of the first seed at
    each batch, and the baseline's in black."""
    shown = [s for s in schemes if any(curve(g.results[0]) for g in _kept(summary, s))]
    if not shown:
        return None
    fig, axes = _panels(plt, len(shown))
    cmap = plt.get_cmap("viridis")
    base = summary.baseline
    baseline_curve = curve(base.results[0]) if base is not None else None
    for ax, s in zip(axes, shown):
        groups = _kept(summary, s)
        for i, g in enumerate(groups):
            if (xy := curve(g.results[0])) is not None:
                ax.plot(*xy, color=cmap(i / max(1, len(groups) - 1)), label=f"B = {g.batch}")
        if baseline_curve is not None:
            ax.plot(*baseline_curve, color="black", linewidth=1, label=f"baseline {base.batch}")
        ax.set_title(s)
        ax.set_xlabel("epoch")
        ax.set_ylabel(ylabel)
        if log:
            ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig
