"""A sweep's outputs: results.csv, results.json, report.md and the figures.

The figures are the paper's: the final metric against the batch per scheme (its Fig. 1), and the
time to the baseline's accuracy against the batch (its Fig. 2); besides them the LR schedules and
training-loss curves the cells ran. matplotlib is imported only here; without it the report says
how to get the figures.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from date_engine.plan import Plan
from date_engine.sweep.results import CellResult, Group, Summary
from date_engine.sweep.schemes import BASELINE, SCHEMES

__all__ = ["write_outputs"]

FIGURES = {
    "metric_vs_batch.png": "final metric against batch size, per scheme (mean ± sd over seeds)",
    "time_to_target.png": "training time and optimizer steps to the baseline's accuracy, per scheme",
    "lr_curves.png": "the learning-rate schedules the cells ran, against epochs",
    "loss_curves.png": "training loss against epochs (first seed)",
}
_COLORS = {BASELINE: "black", "date": "tab:blue", "linear": "tab:red", "none": "tab:gray",
           "lars": "tab:green", "lamb": "tab:purple", "adam": "tab:orange"}


def write_outputs(root: Path, summary: Summary, results: list[CellResult], settings: dict[str, Any],
                  schemes: list[str]) -> list[Path]:
    """Write every output of the sweep into ``root``; returns the paths written."""
    written = [_csv(root / "results.csv", results)]
    data = {"settings": settings, "summary": summary.to_dict(),
            "verdicts": summary.verdicts(schemes), "cells": [r.row() for r in results]}
    (root / "results.json").write_text(json.dumps(data, indent=2, default=_plain))
    written.append(root / "results.json")
    figures = _figures(root, summary, results, schemes)
    (root / "report.md").write_text(_markdown(summary, settings, schemes, figures))
    written.append(root / "report.md")
    return written + [root / name for name in figures if figures[name] is True]


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value):
        return dataclasses.asdict(value)
    return str(value)


def _csv(path: Path, results: list[CellResult]) -> Path:
    rows = [r.row() for r in results]
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["scheme"])
        writer.writeheader()
        writer.writerows(rows)
    return path


# ----------------------------------------------------------------------------- markdown


def _markdown(summary: Summary, settings: dict[str, Any], schemes: list[str],
              figures: dict[str, bool | str]) -> str:
    base = summary.baseline
    better = "higher" if summary.higher_is_better else "lower"
    lines = [f"# date sweep: {settings.get('recipe') or ''} ({settings['spec']})", "",
             f"Command: `{settings['command']}`", "",
             f"Machine: {settings.get('machine', 'not recorded')}. Cells ran {settings['jobs']} at a time, "
             f"{settings['nproc']} process(es) each, {settings.get('threads', '?')} thread(s) per process. "
             "Times are training seconds (evaluations left out), measured on this machine.", ""]
    if base is None or base.mean is None:
        lines += ["The baseline cells have not finished; no comparison yet.", ""]
    else:
        lines += [
            f"Baseline: batch {base.batch}, {summary.metric_name} {_ms(base)} over {len(base.results)} "
            f"seed(s), {base.steps} steps. Metric: {summary.metric_name}, {better} is better. "
            f"Tolerance: {summary.tolerance}, so the target is {summary.metric_name} "
            f"{'≥' if summary.higher_is_better else '≤'} {summary.target:.4g}.", "",
            "## Verdict", ""]
        lines += [f"- **{s}**: {v}." for s, v in summary.verdicts(schemes).items()]
        lines.append("")
    lines += ["## Results", "",
              "| batch | k | scheme | peak LR | warmup epochs | steps | "
              f"{summary.metric_name} (mean ± sd, n) | Δ vs baseline | holds | steps to target | "
              "time to target (s) | speedup | training time (s) |",
              "|---:|---:|---|---:|---:|---:|---|---:|:-:|---:|---:|---:|---:|"]
    for g in ([base] if base else []) + summary.groups:
        lines.append(_row(g, base))
    grids = [g for g in summary.groups if g.tried]
    if grids:
        lines += ["", "LR grid (mean final metric per LR; — where a seed diverged or did not finish):", ""]
        for g in grids:
            tried = ", ".join(f"{lr:g}: {'—' if v is None else f'{v:.4g}'}" for lr, v in g.tried.items())
            lines.append(f"- {g.scheme} at {g.batch}: {tried}; kept {g.grid_lr:g}")
    lines += ["", "## Schemes", "",
              f"- **baseline**: the spec as written at batch {base.batch if base else '?'}, per-layer ratios "
              "off (the small-batch run the user already has)."]
    for s in schemes:
        lines.append(f"- **{s}**: {SCHEMES[s].summary}.")
    if settings.get("lr_grid") and any(SCHEMES[s].uses_grid for s in schemes):
        lines.append(f"- LR grid: {', '.join(f'{v:g}' for v in settings['lr_grid'])}.")
    lines += ["", "Every cell trains for the baseline's epochs; each is evaluated "
              f"{settings['evals']} times, evenly spaced, and time-to-target is read at the first "
              "evaluation that reaches the target (so it is resolved to a tenth of a run at the default "
              "10 evaluations). Speedup = the baseline's time to the target / the cell's. Training time: the "
              "whole run's, the same epochs at every batch. Per-cell numbers: "
              "`results.csv`; everything: `results.json`.", "", "## Figures", ""]
    for name, caption in FIGURES.items():
        state = figures.get(name)
        if state is True:
            lines += [f"![{caption}]({name})", "", f"*{caption}*", ""]
        elif state:
            lines += [f"- {name}: {state}", ""]
    return "\n".join(lines).rstrip() + "\n"


def _ms(g: Group) -> str:
    if g.mean is None:
        return "—"
    if len(g.results) == 1:
        return f"{g.mean:.4g} (1)"
    return f"{g.mean:.4g} ± {g.std:.2g} ({len(g.results)})"


def _row(g: Group, base: Group | None) -> str:
    first = g.results[0]
    k = g.batch / base.batch if base else math.nan
    lr = "" if first.peak_lr is None else f"{first.peak_lr:.4g}"
    warm = "" if first.warmup_epochs is None else f"{first.warmup_epochs:.3g}"
    status = {r.status for r in g.results}
    if g.mean is not None:
        metric = _ms(g)
    elif "diverged" in status:
        metric = "diverged"
    else:
        metric = f"({', '.join(sorted(status))})"
    delta = "" if g.delta is None else f"{g.delta:+.3g}"
    holds = {True: "✓", False: "✗", None: ""}[g.holds] if g.scheme != BASELINE else ""
    to_steps = "" if g.steps_to_target is None else f"{g.steps_to_target:.0f}"
    if g.time_to_target_s is None:
        to_time = f"not reached ({g.reached}/{len(g.results)})" if g.complete and g.mean is not None else ""
    else:
        to_time = f"{g.time_to_target_s:.1f}"
    speed = "1" if g.scheme == BASELINE and g.time_to_target_s else \
        ("" if g.speedup is None else f"{g.speedup:.2f}×")
    name = g.scheme + (f" (lr {g.grid_lr:g})" if g.grid_lr is not None else "")
    train = "" if g.train_s is None else f"{g.train_s:.0f}"
    return (f"| {g.batch} | {k:g} | {name} | {lr} | {warm} | {g.steps} | {metric} | {delta} | {holds} | "
            f"{to_steps} | {to_time} | {speed} | {train} |")


# ----------------------------------------------------------------------------- figures


def _figures(root: Path, summary: Summary, results: list[CellResult],
             schemes: list[str]) -> dict[str, bool | str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        note = "not drawn: matplotlib is not installed (pip install 'date-engine[plot]')"
        return {name: note for name in FIGURES}
    drawn: dict[str, bool | str] = {}
    for name, draw in (("metric_vs_batch.png", _metric_vs_batch), ("time_to_target.png", _time_to_target),
                       ("lr_curves.png", _lr_curves), ("loss_curves.png", _loss_curves)):
        fig = draw(plt, summary, root, schemes)
        if fig is None:
            drawn[name] = "not drawn: no finished cells yet"
            continue
        fig.tight_layout()
        fig.savefig(root / name, dpi=110)
        plt.close(fig)
        drawn[name] = True
    return drawn


def _metric_vs_batch(plt, summary: Summary, root: Path, schemes: list[str]):
    base = summary.baseline
    if base is None or base.mean is None:
        return None
    margin = abs(base.mean - summary.target)
    means = [g.mean for g in summary.groups if g.mean is not None]
    far = any(abs(m - base.mean) > 12 * margin for m in means) if margin > 0 else False
    fig, axes = plt.subplots(1, 2 if far else 1, figsize=(12 if far else 7, 4.5), squeeze=False)
    for ax in axes[0]:
        ax.axhline(base.mean, color="black", linewidth=1, label=f"baseline (batch {base.batch})")
        ax.axhspan(min(base.mean, summary.target), max(base.mean, summary.target), color="black",
                   alpha=0.08, label=f"tolerance {summary.tolerance}")
        for s in schemes:
            groups = [g for g in summary.groups if g.scheme == s and g.mean is not None]
            if groups:
                ax.errorbar([base.batch] + [g.batch for g in groups], [base.mean] + [g.mean for g in groups],
                            yerr=[base.std] + [g.std for g in groups], marker="o", capsize=3, label=s,
                            color=_COLORS.get(s))
            for g in summary.groups:
                if g.scheme == s and g.complete and g.mean is None:
                    ax.annotate("diverged", (g.batch, base.mean), color=_COLORS.get(s), fontsize=8,
                                rotation=90, va="top")
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


def _time_to_target(plt, summary: Summary, root: Path, schemes: list[str]):
    base = summary.baseline
    if base is None or base.time_to_target_s is None:
        return None
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(10, 4.2))
    for s in [BASELINE] + schemes:
        groups = [base] + ([] if s == BASELINE else [g for g in summary.groups if g.scheme == s])
        groups = [g for g in groups if g.time_to_target_s is not None]  # each line starts at the baseline
        if not groups:
            continue
        kw = dict(marker="o", label=s, color=_COLORS.get(s))
        ax.plot([g.batch for g in groups], [g.time_to_target_s for g in groups], **kw)
        ax2.plot([g.batch for g in groups], [g.steps_to_target for g in groups], **kw)
    for a, label in ((ax, "training seconds to the target"), (ax2, "optimizer steps to the target")):
        a.set_xscale("log", base=2)
        a.set_yscale("log")
        a.set_xlabel("global batch size")
        a.set_ylabel(label)
        a.grid(alpha=0.3, which="both")
        a.legend(fontsize=8)
    fig.suptitle(f"time to {summary.metric_name} {'≥' if summary.higher_is_better else '≤'} {summary.target:.4g}")
    return fig


def _kept(summary: Summary, scheme: str) -> list[Group]:
    return [g for g in summary.groups if g.scheme == scheme]


def _panels(plt, count: int):
    cols = min(count, 3)
    rows = math.ceil(count / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 3.6 * rows), squeeze=False)
    for extra in axes.flat[count:]:
        extra.set_visible(False)
    return fig, list(axes.flat)


def _lr_curves(plt, summary: Summary, root: Path, schemes: list[str]):
    shown = [s for s in schemes if any(_plan(root, g.results[0]) for g in _kept(summary, s))]
    if not shown:
        return None
    fig, axes = _panels(plt, len(shown))
    cmap = plt.get_cmap("viridis")
    for ax, s in zip(axes, shown):
        groups = _kept(summary, s)
        for i, g in enumerate(groups):
            plan = _plan(root, g.results[0])
            if plan is None:
                continue
            steps = range(1, plan.total_iterations + 1)
            ax.plot([plan.epoch(i) for i in steps], plan.lrs(), color=cmap(i / max(1, len(groups) - 1)),
                    label=f"B = {g.batch}")
        base = summary.baseline
        plan = _plan(root, base.results[0]) if base else None
        if plan is not None:
            ax.plot([plan.epoch(i) for i in range(1, plan.total_iterations + 1)], plan.lrs(),
                    color="black", linewidth=1, label=f"baseline {base.batch}")
        ax.set_title(s)
        ax.set_xlabel("epoch")
        ax.set_ylabel("learning rate")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def _loss_curves(plt, summary: Summary, root: Path, schemes: list[str]):
    shown = [s for s in schemes if any(g.results[0].losses for g in _kept(summary, s))]
    if not shown:
        return None
    fig, axes = _panels(plt, len(shown))
    cmap = plt.get_cmap("viridis")
    base = summary.baseline
    for ax, s in zip(axes, shown):
        groups = _kept(summary, s)
        for i, g in enumerate(groups):
            losses = g.results[0].losses
            if losses:
                ax.plot(*zip(*losses), color=cmap(i / max(1, len(groups) - 1)), label=f"B = {g.batch}")
        if base is not None and base.results[0].losses:
            ax.plot(*zip(*base.results[0].losses), color="black", linewidth=1, label=f"baseline {base.batch}")
        ax.set_title(s)
        ax.set_xlabel("epoch")
        ax.set_ylabel("training loss")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def _plan(root: Path, result: CellResult) -> Plan | None:
    path = root / "cells" / result.cell.name / "plan.json"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    names = {f.name for f in dataclasses.fields(Plan)}
    return Plan(**{k: v for k, v in data.items() if k in names})
