"""Draw the results figures of docs/ from the stored data, as SVG.

    python -m lab.results_figures            # rewrite docs/results/figures/*.svg
    python -m lab.results_figures --check    # what a test checks: each figure current

Each figure is drawn from numbers a function here computes from docs/results (the same readers
the tables use); docs/results/figures/figures.json keeps those numbers and the SHA-256 of the SVG
drawn from them. A figure is stale when its data no longer gives those numbers or its SVG is not
the one drawn from them; tests/test_docs.py checks both, without drawing (matplotlib is needed
only to draw).
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lab.results_data import study_of, sweep
from lab.results_tables import GPT_LABELS, GPT_SWEEPS, RULES, _rule_refs, delta

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "docs" / "results" / "figures"
SIDECAR = FIGURES / "figures.json"

RULE_SCHEMES = ("paper (√k)", "default, no probe", "default, its probe", "linear")


def rules_data() -> dict[str, Any]:
    """Δ against each study's baseline per batch multiple k, for each rule (the rules table)."""
    studies = []
    for study, name, b0, batches, higher, bare, probed in RULES:
        series = {scheme: [] for scheme in RULE_SCHEMES}
        for batch in batches:
            for scheme, refs in zip(RULE_SCHEMES, _rule_refs(name, batch, bare, probed)):
                value = delta(refs, batch)
                series[scheme].append(None if value is None else round(value, 4))
        studies.append({"study": study, "k": [b // b0 for b in batches],
                        "higher_is_better": higher, "series": series})
    return {"studies": studies}


STUDY_BUDGET = ("baseline.batch_size=128", "baseline.lr=1e-3", "baseline.warmup_epochs=0.1",
                "baseline.iterations=null", "baseline.epochs=10")
"""lenet-mnist as its studies train it (docs/results.md, the rules-v2 command)."""


def lr_curves_data() -> dict[str, Any]:
    """lenet-mnist's plan, as its studies train it, at k = 1, 8 and 32: its LR against the epoch
    (at most 400 optimizer steps a curve, the warmup's end among them)."""
    from date_engine import plan_for

    curves = {}
    for k in (1, 8, 32):
        plan = plan_for("lenet-mnist", 128 * k, overrides=STUDY_BUDGET).plan
        every = -(-plan.total_iterations // 400)  # at most 400 points a curve
        steps = sorted({*range(1, plan.total_iterations + 1, every), plan.total_iterations,
                        math.floor(plan.warmup_iterations), math.ceil(plan.warmup_iterations)})
        curves[str(k)] = {"epoch": [round(s * plan.target_batch / plan.dataset_size, 6)
                                    for s in steps],
                          "lr": [float(f"{plan.lr(s):.6g}") for s in steps]}
    return {"curves": curves}


def gpt_char_data() -> dict[str, Any]:
    """gpt-char's cells (the gpt-char table): each plan's validation-loss Δ against its sweep's
    baseline at each k, and the criterion's tolerance."""
    series: dict[str, dict[str, list]] = {}
    for name in GPT_SWEEPS:
        if study_of(name) is None:
            continue
        summary = sweep(name)
        for g in summary.groups:
            line = series.setdefault(GPT_LABELS.get(g.scheme, g.scheme), {"k": [], "delta": []})
            line["k"].append(g.batch // summary.baseline.batch)
            line["delta"].append(round(g.delta, 4))
    return {"series": series, "tolerance": 0.02}


def _draw_gpt_char(data: dict[str, Any], plt: Any) -> Any:
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, line in data["series"].items():
        ax.plot(line["k"], line["delta"], marker="o", label=label)
    ax.axhspan(-1.0, data["tolerance"], color="green", alpha=0.08,
               label=f"holds (Δ ≤ +{data['tolerance']})")
    ax.axhline(0.0, color="grey", linewidth=0.8)
    ks = sorted({k for line in data["series"].values() for k in line["k"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(min(-0.3, *(min(line["delta"]) - 0.05 for line in data["series"].values())),
                1.6)
    ax.set_xlabel("k = B / 12 sequences")
    ax.set_ylabel("Δ validation loss, nats per character")
    ax.set_title("gpt-char (nanoGPT's baseline): lower is better", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _draw_rules(data: dict[str, Any], plt: Any) -> Any:
    studies = data["studies"]
    fig, axes = plt.subplots(2, 3, figsize=(10, 6))
    for ax, study in zip(axes.flat, studies):
        accuracy = study["higher_is_better"]
        for scheme, values in study["series"].items():
            shown = [v if v is None or not accuracy else max(v, -3.0) for v in values]
            ax.plot(study["k"], [float("nan") if v is None else v for v in shown], marker="o",
                    label=scheme)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_xticks(study["k"], [str(k) for k in study["k"]])
        ax.set_title(study["study"], fontsize=9)
        ax.set_xlabel("k = B / B0", fontsize=8)
        ax.set_ylabel("Δ against the baseline" + (" (≥ −3 shown)" if accuracy else ""),
                      fontsize=8)
        if accuracy:
            ax.set_ylim(-3.1, 0.5)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return fig


def _draw_lr_curves(data: dict[str, Any], plt: Any) -> Any:
    fig, ax = plt.subplots(figsize=(7, 3.5))
    for k, curve in data["curves"].items():
        ax.plot(curve["epoch"], curve["lr"], label=f"k = {k} (batch {128 * int(k):,})")
    ax.set_xlabel("epoch")
    ax.set_ylabel("learning rate")
    ax.set_title("lenet-mnist's plan: LEGW's warmup and the decay, in epochs", fontsize=10)
    ax.legend()
    fig.tight_layout()
    return fig


BRANCH_PROBES = ROOT / "docs" / "results" / "branch-probes"


def critical_batch_data() -> dict[str, Any]:
    """Per study whose probe branched (docs/results/branch-probes): the critical batch at each
    checkpoint, in the baseline's samples, and every branch's loss against its batch."""
    out = {}
    for path in sorted(BRANCH_PROBES.glob("*.json")):
        probe = json.loads(path.read_text())
        out[path.stem] = {
            "baseline_batch": probe["baseline"]["batch_size"], "target": probe["target_batch"],
            "critical": [[c["at_samples"], c["batch"]] for c in probe["critical_batch"]],
            "ladder": [[b["at_samples"], b["batch"], b["loss"]] for b in probe["branches"]
                       if b["role"] in ("baseline", "ladder") and b["loss"] is not None]}
    return out


def _draw_critical_batch(data: dict[str, Any], plt: Any) -> Any:
    fig, axes = plt.subplots(1, len(data), figsize=(3.6 * len(data), 3.4), squeeze=False)
    for ax, (name, study) in zip(axes.flat, data.items()):
        for at in sorted({a for a, _, _ in study["ladder"]}):
            rungs = sorted((b, loss) for a, b, loss in study["ladder"] if a == at)
            ax.plot([b for b, _ in rungs], [loss for _, loss in rungs], "o-",
                    label=f"from sample {at:,}")
        for _, batch in study["critical"]:
            ax.axvline(batch, linestyle=":", color="grey")
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch (dotted: the critical batch)")
        ax.set_ylabel("branch loss, second half")
        ax.set_title(f"{name}: to batch {study['target']:,}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


FIGS: dict[str, tuple[Callable[[], dict[str, Any]], Callable[..., Any]]] = {
    "rules": (rules_data, _draw_rules),
    "lr-curves": (lr_curves_data, _draw_lr_curves),
    "gpt-char": (gpt_char_data, _draw_gpt_char),
    "critical-batch": (critical_batch_data, _draw_critical_batch),
}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def stale() -> list[str]:
    """The figures whose data or SVG differ from what figures.json records."""
    recorded = json.loads(SIDECAR.read_text()) if SIDECAR.exists() else {}
    out = []
    for name, (data, _) in FIGS.items():
        svg = FIGURES / f"{name}.svg"
        entry = recorded.get(name)
        if entry is None or not svg.exists() or entry["data"] != json.loads(
                json.dumps(data())) or entry["svg_sha256"] != _sha(svg):
            out.append(name)
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        for name in (names := stale()):
            print(f"docs/results/figures/{name}.svg is stale: run python -m "
                  "lab.results_figures")
        return 1 if names else 0
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"svg.hashsalt": "date_engine", "svg.fonttype": "none"})
    FIGURES.mkdir(parents=True, exist_ok=True)
    recorded = {}
    for name, (data, draw) in FIGS.items():
        values = json.loads(json.dumps(data()))
        fig = draw(values, plt)
        path = FIGURES / f"{name}.svg"
        fig.savefig(path, format="svg", metadata={"Date": None})
        plt.close(fig)
        recorded[name] = {"data": values, "svg_sha256": _sha(path)}
    SIDECAR.write_text(json.dumps(recorded, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
