"""Regenerate the results tables of README.md and docs/*.md from the data in docs/results.

    python -m lab.results_tables            # rewrite every generated table in place
    python -m lab.results_tables --check    # exit 1, naming each table that differs

A generated table sits between ``<!-- generated: NAME -->`` and ``<!-- end generated -->``; what
is between the two lines is replaced by ``TABLES[NAME]()``. Δ is a scheme's mean metric minus its
sweep's own baseline (seeds pooled over the sweeps named, each sweep's Δ weighted by its seeds);
accuracy in points, perplexity where the study is a language model (lower is better).
"""

from __future__ import annotations

import json
import re
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from date_engine.sweep.results import paired
from lab import holdout
from lab.results_data import RESULTS, group, seed_metrics, study_of, sweep, sweep_rows

ROOT = Path(__file__).resolve().parent.parent
Ref = tuple[str, str]
"""(sweep, scheme label)."""


def _num(value: float | None, digits: int = 2) -> str:
    return "" if value is None else f"{value:+.{digits}f}".replace("-", "−")


def delta(refs: list[Ref], batch: int) -> float | None:
    """Δ of ``refs``' cells at ``batch`` against each sweep's baseline, weighted by seeds; None
    where a cell diverged (a stored sweep is finished, so a group without a mean diverged)."""
    total = weight = 0.0
    for name, scheme in refs:
        g = group(name, scheme, batch)
        if g.mean is None:
            return None
        total += (g.mean - sweep(name).baseline.mean) * len(g.results)
        weight += len(g.results)
    return total / weight


def _delta_text(refs: list[Ref], batch: int) -> str:
    value = delta(refs, batch)
    return "diverged" if value is None else _num(value)


def _bold_best(cells: list[str], higher_is_better: bool = True) -> list[str]:
    numbers = [float(c.replace("−", "-")) if c and c != "diverged" else None for c in cells]
    finite = [n for n in numbers if n is not None]
    if not finite:
        return cells
    best = (max if higher_is_better else min)(finite)
    return [f"**{c}**" if n == best else c for c, n in zip(cells, numbers)]


def _link(name: str, base: str) -> str:
    return f"[{name}]({base}results/sweeps/{name}.jsonl)"


# ------------------------------------------------------------------------------------- the tables

RULES = (
    # study (optimizer), the sweep of paper and linear, B0, batches, higher is better, the default
    # without a probe, the default with the study's probe (its LR check passes: k^0.75; fires: √k,
    # the LR flat past the probe's noise scale since 0.9)
    ("lenet-mnist (RMSprop)", "lenet-mnist-rules", 128, (1024, 2048, 4096), True,
     ("lenet-mnist-rules-v2", "date"), ("lenet-mnist-rules", "date")),
    ("lstm-mnist (momentum)", "lstm-mnist-momentum", 128, (512, 2048), True,
     ("lstm-mnist-momentum", "date"), ("lstm-mnist-momentum", "date")),
    ("lstm-mnist-adam (Adam)", "lstm-mnist-adam", 128, (512, 2048), True,
     ("lstm-mnist-adam-v2", "date"), ("lstm-mnist-adam", "date")),
    ("ptb-small (SGD), perplexity", "ptb-small-rules", 20, (320,), False,
     ("ptb-small-rules", "date"), ("ptb-small-rules", "date")),
    ("vit-mnist (AdamW)", "vit-mnist-lr4e-3-rules", 128, (1024, 4096), True,
     ("vit-mnist-lr4e-3-rules-v2", "date"), ("vit-mnist-lr4e-3-cap", "date")),
    ("bert-mlm (AdamW), masked accuracy", "bert4-rules", 32, (256, 1024), True,
     ("bert4-rules", "date"), ("bert-mlm-cap", "date")),
)
"""The SGD family's default reads no probe: its two default columns are one set of cells."""

VIT_32X = [("vit-mnist-lr4e-3-date-sqrt", "date"), ("vit-mnist-lr4e-3-32x-seeds23-sqrt", "date"),
           ("vit-mnist-lr4e-3-32x-seeds4-7", "date")]
POOLED = {  # (sweep of the row, batch) -> its cells' refs: paper, no probe, its probe, linear
    ("vit-mnist-lr4e-3-rules", 4096): (
        [("vit-mnist-lr4e-3-small", "paper"), ("vit-mnist-lr4e-3-32x-seeds23-sqrt", "paper"),
         ("vit-mnist-lr4e-3-32x-seeds4-7", "paper")], VIT_32X, [("vit-mnist-lr4e-3-cap", "date")],
        [("vit-mnist-lr4e-3-rules", "linear")]),
}
"""Cells whose 2 seeds span more than the bound they are read against (vit-mnist at 32×: 4.7
points), pooled over every stored seed of the same plans (8), as the exponent table pools them
(the capped default with its probe: 2 seeds)."""


def _rule_refs(name: str, batch: int, bare: Ref, probed: Ref) -> list[list[Ref]]:
    return list(POOLED.get((name, batch), ([(name, "paper")], [bare], [probed],
                                           [(name, "linear")])))


def rules_table(base: str = "") -> str:
    """The default rule without and with the study's probe against the paper's and linear
    scaling, in the baseline's epochs."""
    lines = ["| study | k | paper (√k) | default, no probe | default, its probe | linear | data |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for study, name, b0, batches, higher, bare, probed in RULES:
        names = list(dict.fromkeys([name, bare[0], probed[0]]))
        for i, batch in enumerate(batches):
            refs = _rule_refs(name, batch, bare, probed)
            cells = _bold_best([_delta_text(r, batch) for r in refs], higher)
            k = f"{batch // b0}" + ("†" if (name, batch) in POOLED else "")
            data = ", ".join(_link(n, base) for n in names) if i == 0 else ""
            lines.append(f"| {study if i == 0 else ''} | {k} | " + " | ".join(cells)
                         + f" | {data} |")
    return "\n".join(lines) + ("\n\n† 8 seeds a cell (the default with its probe: 2), pooled "
                               "over the sweeps of the exponent table below (2 seeds span 4.7 "
                               "points there).")


def worst_default_against_paper() -> tuple[float, str]:
    """The rules table's largest shortfall of the default without a probe behind the paper's rule,
    in points (a perplexity's excess for a language model), and the cell it is in: what the
    acceptance bound of docs/results.md is checked against."""
    worst, where = float("-inf"), ""
    for study, name, b0, batches, higher, bare, probed in RULES:
        for batch in batches:
            paper_refs, bare_refs, *_ = _rule_refs(name, batch, bare, probed)
            default, paper = delta(bare_refs, batch), delta(paper_refs, batch)
            if default is None or paper is None:
                continue
            behind = (paper - default) if higher else (default - paper)
            if behind > worst:
                worst, where = behind, f"{study} at {batch // b0}×"
    return worst, where


EXPONENT = (
    # study, check verdict, B0, [(k, paper refs, k^0.75 refs, √k refs)]
    ("lenet-mnist (RMSprop)", "passes", 128, [
        (k, [("lenet-mnist-exp-rules", "paper")], [("lenet-mnist-exp-rules", "date")],
         [("lenet-mnist-exp-sqrt", "date")]) for k in (8, 16, 32)]),
    ("lstm-mnist-adam (Adam)", "passes", 128, [
        (k, [("lstm-mnist-adam-exp-rules", "paper")], [("lstm-mnist-adam-exp-rules", "date")],
         [("lstm-mnist-adam-exp-sqrt", "date")]) for k in (4, 16)]),
    ("fashion-lenet (RMSprop), held out", "passes", 128, [
        (k, [("fashion-lenet-exp-sqrt", "paper")], [("fashion-lenet-exp-rules", "date")],
         [("fashion-lenet-exp-sqrt", "date")]) for k in (8, 16, 32)]),
    ("vit-mnist (AdamW) from 2e-3", "passes", 128, [
        (k, [], [("vit-mnist-lr2e-3-exp-rules", "date")],
         [("vit-mnist-lr2e-3-exp-date-sqrt", "date")]) for k in (8, 32)]),
    ("vit-mnist (AdamW) from 4e-3", "fires", 128, [
        *((k, [("vit-mnist-lr4e-3-small", "paper")], [("vit-mnist-lr4e-3-small", "date")],
           [("vit-mnist-lr4e-3-date-sqrt", "date")]) for k in (2, 4, 8)),
        (16, [("vit-mnist-lr4e-3-16x", "paper")], [("vit-mnist-lr4e-3-16x", "date")],
         [("vit-mnist-lr4e-3-date-sqrt", "date")]),
        (32, [("vit-mnist-lr4e-3-small", "paper"), ("vit-mnist-lr4e-3-32x-seeds23-sqrt", "paper"),
              ("vit-mnist-lr4e-3-32x-seeds4-7", "paper")],
         [("vit-mnist-lr4e-3-small", "date"), ("vit-mnist-lr4e-3-32x-seeds23-date", "date")],
         [("vit-mnist-lr4e-3-date-sqrt", "date"), ("vit-mnist-lr4e-3-32x-seeds23-sqrt", "date"),
          ("vit-mnist-lr4e-3-32x-seeds4-7", "date")])]),
    ("lenet-mnist (RMSprop) from 8e-3, held out", "fires", 128, [
        (k, [("lenet-mnist-lr8e-3-probe", "paper")], [("lenet-mnist-lr8e-3-rules", "date")],
         [("lenet-mnist-lr8e-3-probe", "date")]) for k in (8, 16, 32)]),
    ("vit on Fashion-MNIST (AdamW), held out", "fires", 128, [
        (k, [("vit-fashion-probe", "paper"), ("vit-fashion-probe-seeds2-7", "paper")],
         [("vit-fashion-rules", "date")],
         [("vit-fashion-probe", "date"), ("vit-fashion-probe-seeds2-7", "date")])
        for k in (8, 32)]),
    ("bert-mlm (AdamW)", "fires", 32, [
        (2, [], [("bert4-batches", "date")], [("bert4-exp-sqrt", "date")]),
        (8, [("bert4-rules", "paper")], [("bert4-batches", "date")], [("bert4-exp-sqrt", "date")]),
        (32, [("bert4-probe-32x", "paper")], [("bert4-batches", "date")],
         [("bert4-probe-32x", "date")])]),
)


def _seeds(refs: list[Ref], batch: int) -> int:
    return sum(len(group(n, s, batch).results) for n, s in refs)


def exponent_table() -> str:
    """The adaptive family's exponent alone varied: k^0.75 against √k (the rest of the rule kept),
    the paper's rule beside them."""
    lines = ["| study | LR check | k | paper (√k, nothing else) | k^0.75 | "
             "√k, the rest of the rule | seeds |", "|---|---|---:|---:|---:|---:|---|"]
    for study, check, b0, rows in EXPONENT:
        for i, (k, paper, k75, sqrt) in enumerate(rows):
            cells = _bold_best([_delta_text(refs, k * b0) if refs else "" for refs in
                                (paper, k75, sqrt)])
            seeds = ", ".join(str(_seeds(refs, k * b0)) if refs else "–"
                              for refs in (paper, k75, sqrt))
            lines.append(f"| {study if i == 0 else ''} | {check if i == 0 else ''} | {k} | "
                         + " | ".join(cells) + f" | {seeds} |")
    return "\n".join(lines)


RAMPS = (
    ("lenet-mnist (RMSprop)", "lenet-mnist-ramp-pairs", 4096),
    ("lstm-mnist (momentum)", "lstm-mnist-ramp-pairs", 4096),
    ("vit-mnist (AdamW)", "vit-mnist-lr4e-3-ramp-new", 4096),
    ("bert-mlm (AdamW), masked accuracy", "bert4-ramp-new", 1024),
)


def ramp_table(base: str = "") -> str:
    """--budget ramp at 32×, from each baseline's probe: Δ and the steps against the baseline's."""
    lines = ["| study | batch (k) | steps (seeds) | baseline's steps | Δ | data |",
             "|---|---:|---:|---:|---:|---|"]
    for study, name, batch in RAMPS:
        g, base_group = group(name, "date+ramp", batch), sweep(name).baseline
        steps = ", ".join(f"{r.steps:,}" for r in g.results)
        lines.append(f"| {study} | {batch:,} ({batch // base_group.batch}×) | {steps} | "
                     f"{base_group.steps:,} | {_num(g.mean - base_group.mean)} | "
                     f"{_link(name, base)} |")
    return "\n".join(lines)


README_ROWS = (
    # study, optimizer, rules sweep and its largest batch, ramp sweep and its batch (or None)
    ("lenet-mnist", "RMSprop", "lenet-mnist-rules", 4096, ("lenet-mnist-ramp-pairs", 4096)),
    ("lstm-mnist", "momentum", "lstm-mnist-momentum", 2048, ("lstm-mnist-ramp-pairs", 4096)),
    ("lstm-mnist-adam", "Adam", "lstm-mnist-adam", 2048, None),
    ("vit-mnist", "AdamW", "vit-mnist-lr4e-3-rules", 4096, ("vit-mnist-lr4e-3-ramp-new", 4096)),
    ("bert-mlm", "AdamW", "bert4-rules", 1024, ("bert4-ramp-new", 1024)),
)


def readme_table() -> str:
    """README's "Does accuracy hold?": the largest batch each study ran, in the baseline's epochs
    under both rules and, with a probe, with --budget ramp."""
    lines = ["| study (optimizer) | batch | default, no probe | paper's rule | default + probe, "
             "`--budget ramp` |", "|---|---:|---:|---:|---:|"]
    for study, opt, name, batch, ramp in README_ROWS:
        b0 = sweep(name).baseline.batch
        ramp_text = "not run"
        if ramp:
            ramp_name, ramp_batch = ramp
            g = group(ramp_name, "date+ramp", ramp_batch)
            ramp_text = (f"{_num(g.mean - sweep(ramp_name).baseline.mean)} at "
                         f"{ramp_batch // b0}× ({max(r.steps for r in g.results):,} steps)")
        row = next(r for r in RULES if r[1] == name)
        paper, bare, *_ = _rule_refs(name, batch, row[5], row[6])  # the default without a probe
        lines.append(f"| {study} ({opt}) | {batch // b0}× | {_delta_text(bare, batch)} | "
                     f"{_delta_text(paper, batch)} | {ramp_text} |")
    return "\n".join(lines)


READINGS = {"ahead": "default ahead", "behind": "default behind", "level": "not told apart",
            "within": "level within ±{tol:g}", "one seed": "one seed"}

SEED_BY_SEED = (
    ("vit-mnist from 4e-3", 4096, ["vit-mnist-lr4e-3-probe-rules",
                                   "vit-mnist-lr4e-3-32x-seeds23-sqrt",
                                   "vit-mnist-lr4e-3-32x-seeds4-7"], 0.3),
    ("vit on Fashion-MNIST, held out", 1024, ["vit-fashion-probe", "vit-fashion-probe-seeds2-7"],
     0.3),
    ("vit on Fashion-MNIST, held out", 4096, ["vit-fashion-probe", "vit-fashion-probe-seeds2-7"],
     0.3),
    ("bert-mlm (masked accuracy)", 1024, ["bert4-probe-32x", "bert4-32x-seeds45",
                                          "bert4-32x-seeds67"], 0.5),
)


def seed_by_seed_table() -> str:
    """The default (with each baseline's probe) against the paper's rule, seeds paired."""
    lines = ["| study | batch | seeds | default | paper's rule | default − paper (95% interval) "
             "| above on | reading |", "|---|---:|---:|---:|---:|---|---|---|"]
    for study, batch, names, tol in SEED_BY_SEED:
        mine, theirs = seed_metrics(names, "date", batch), seed_metrics(names, "paper", batch)
        pair = paired(mine, theirs)
        n, half = len(pair.seeds), pair.half_width
        above = sum(d > 0 for d in pair.differences)
        reading = READINGS[pair.reading(True, tol)].format(tol=tol)
        lines.append(
            f"| {study} | {batch:,} | {n} | {sum(mine[s] for s in pair.seeds) / n:.2f} | "
            f"{sum(theirs[s] for s in pair.seeds) / n:.2f} | {_num(pair.mean)} "
            f"({_num(pair.mean - half)} to {_num(pair.mean + half)}) | {above} of {n} | "
            f"{reading} |")
    return "\n".join(lines)


def budgets_table() -> str:
    """Every budget the plan offers at 16× and 32×, the default rule: Δ (steps of each seed)."""
    rows: dict[tuple[str, int], dict[str, str]] = {}
    for row in holdout.BUDGETS:
        g = row.group
        cell = (f"{_num(g['delta'])} ({', '.join(str(r['steps']) for r in g['results'])})"
                + ("" if g["holds"] else " ✗"))
        rows.setdefault((row.study, row.k), {})[row.budget] = cell
    lines = ["| study | k | same epochs | hold | ramp |", "|---|---:|---|---|---|"]
    order = list(dict.fromkeys(study for study, _ in rows))
    for (study, k), cells in sorted(rows.items(), key=lambda r: (order.index(r[0][0]), r[0][1])):
        fitted = "" if study in holdout.FITTED_ON else ", held out"
        lines.append(f"| {study}{fitted} | {k} | " + " | ".join(
            cells.get(b, "") for b in ("same-epochs", "hold", "ramp")) + " |")
    return "\n".join(lines)


CAP = (
    # study, B0, B_cap (the probe's), [(batch, uncapped refs: the default with the probe, capped)]
    ("vit-mnist from 4e-3", 128, 177, [
        (2048, [("vit-mnist-lr4e-3-date-sqrt", "date")], [("vit-mnist-lr4e-3-cap", "date")]),
        (4096, [("vit-mnist-lr4e-3-probe-rules", "date")], [("vit-mnist-lr4e-3-cap", "date")])]),
    ("lenet-mnist from 8e-3", 128, 1460, [
        (b, [("lenet-mnist-lr8e-3-probe", "date")], [("lenet-mnist-lr8e-3-cap", "date")])
        for b in (2048, 4096)]),
    ("vit on Fashion-MNIST, held out", 128, 169, [
        (b, [("vit-fashion-probe", "date")], [("vit-fashion-cap", "date")]) for b in (1024, 4096)]),
)


CAP_WHERE_ROOM = (
    # the same, on baselines whose probe's LR check finds room (k^0.75): written before their cells
    ("lenet-mnist from 1e-3", 128, 1615, [
        (b, [("lenet-mnist-rules", "date")], [("lenet-mnist-cap", "date")])
        for b in (2048, 4096)]),
    ("lstm-mnist-adam", 128, 281, [
        (b, [("lstm-mnist-adam", "date")], [("lstm-mnist-adam-cap", "date")])
        for b in (512, 2048)]),
)


CAP_RAMP = (
    # the flipped default in a ramp (measured after the flip, no criterion written before)
    ("vit-mnist from 4e-3, ramp", 128, 177, [
        (4096, [("vit-mnist-lr4e-3-ramp-new", "date+ramp")],
         [("vit-mnist-lr4e-3-ramp-cap", "date+ramp")])]),
    ("bert-mlm, ramp", 32, 172, [
        (1024, [("bert4-ramp-new", "date+ramp")], [("bert-mlm-ramp-cap", "date+ramp")])]),
)


def _spread(refs: list[Ref], batch: int) -> float:
    metrics = list(seed_metrics([n for n, _ in refs], refs[0][1], batch).values())
    return max(metrics) - min(metrics)


def cap_cells(studies=CAP) -> list[tuple[str, int, int, float, float, float]]:
    """(study, k, B_cap, Δ uncapped, Δ capped, the seeds' spread) of each pre-registered cell."""
    out = []
    for study, b0, cap, cells in studies:
        for batch, uncapped, capped in cells:
            d0, d1 = delta(uncapped, batch), delta(capped, batch)
            out.append((study, batch // b0, cap, d0, d1,
                        max(_spread(uncapped, batch), _spread(capped, batch))))
    return out


def _cap_diffs(rows) -> list[tuple[float, float]]:
    return [((d1 if d1 is not None else -100.0) - (d0 if d0 is not None else -100.0), s)
            for *_, d0, d1, s in rows]


def cap_decision() -> bool:
    """The pre-registered criterion (docs/results.md): adopt the cap only if it is at least the
    uncapped mean minus the seeds' spread in every cell, and above it by more than the spread in
    one or more."""
    diffs = _cap_diffs(cap_cells())
    return all(d >= -s for d, s in diffs) and any(d > s for d, s in diffs)


def cap_where_room_decision() -> bool:
    """The second criterion: cap baselines whose LR check passes too only if the cap is at least
    the uncapped mean minus the seeds' spread in every one of their cells."""
    return all(d >= -s for d, s in _cap_diffs(cap_cells(CAP_WHERE_ROOM)))


def cap_in_ramps_decision() -> bool:
    """Whether a ramp's rungs stay capped: only if no ramp cell lost beyond the seeds' spread."""
    return all(d >= -s for d, s in _cap_diffs(cap_cells(CAP_RAMP)))


def cap_table() -> str:
    lines = ["| study (B_cap) | LR check | k | uncapped | capped | difference | seed spread |",
             "|---|---|---:|---:|---:|---:|---:|"]
    for studies, check in ((CAP, "fires"), (CAP_WHERE_ROOM, "passes"), (CAP_RAMP, "fires")):
        for study, k, cap, d0, d1, spread in cap_cells(studies):
            diff = None if d0 is None or d1 is None else d1 - d0
            lines.append(f"| {study} ({cap:,}) | {check} | {k} | {_num(d0) or 'diverged'} | "
                         f"{_num(d1) or 'diverged'} | {_num(diff) or '–'} | {spread:.2f} |")
    verdict = "adopted" if cap_decision() else "not adopted; the plan keeps no cap"
    room = ("capped there too" if cap_where_room_decision() else
            "not capped there (date.lr_cap: auto caps where the check fires)")
    ramp = "capped" if cap_in_ramps_decision() else "not capped (lost beyond the spread)"
    return ("\n".join(lines) + f"\n\nBy the criterion: {verdict}. Where the check passes: {room}. "
            f"A ramp's rungs: {ramp}.")


SHAPE_STUDY = "schedule-shape"
SHAPES = (  # study (optimizer), the sweep keeping the baseline's cosine, the one forcing linear
    ("lenet-mnist (RMSprop)", "lenet-mnist-cosine", "lenet-mnist-cosine-as-linear"),
    ("vit-mnist (AdamW)", "vit-mnist-cosine", "vit-mnist-cosine-as-linear"),
)


def _shape_rows() -> list[tuple[str, int, float, float, float, float]]:
    """(study, k, cosine baseline, Δ cosine kept, Δ linear forced, the linear baseline's Δ) of
    each stored cell; every Δ against the cosine sweep's own baseline."""
    rows = []
    for study, kept, forced in SHAPES:
        if study_of(forced) is None:
            continue
        base = sweep(kept).baseline.mean
        for g in sweep(kept).groups:
            k = g.batch // sweep(kept).baseline.batch
            rows.append((study, k, base, g.mean - base, group(forced, "date", g.batch).mean - base,
                         sweep(forced).baseline.mean - base))
    return rows


def shape_decision() -> bool:
    """The criterion written before the cells ran (the first line of the study's data file):
    keeping the baseline's cosine is right if its pooled Δ is ≥ the forced linear's − 0.3."""
    rows = _shape_rows()
    kept = sum(r[3] for r in rows) / len(rows)
    forced = sum(r[4] for r in rows) / len(rows)
    return kept >= forced - 0.3


def shape_table() -> str:
    """A cosine baseline at 8× and 32×: the default plan keeping the cosine against the same plan
    with DATE's linear decay forced, each against the cosine baseline."""
    lines = ["| study | k | cosine baseline | Δ, cosine kept | Δ, linear forced | data |",
             "|---|---:|---:|---:|---:|---|"]
    shown = set()
    for study, k, base, kept, forced, _ in _shape_rows():
        data = "" if shown else f"[{SHAPE_STUDY}](results/studies/{SHAPE_STUDY}.jsonl)"
        cells = _bold_best([_num(kept), _num(forced)])
        lines.append(f"| {study if study not in shown else ''} | {k} | {base:.2f} | "
                     f"{cells[0]} | {cells[1]} | {data} |")
        shown.add(study)
    rows = _shape_rows()
    pooled = [sum(r[i] for r in rows) / len(rows) for i in (3, 4)]
    verdict = "met" if shape_decision() else "not met"
    return ("\n".join(lines) + f"\n\nPooled over the {len(rows)} cells: cosine kept "
            f"{_num(pooled[0])}, linear forced {_num(pooled[1])}; the criterion (kept ≥ forced − "
            f"0.3) is {verdict}.")


HF_CELLS = (("date", "DATE's ratios (date=True)"), ("base", "the base optimizer (default)"),
            ("sqrt-by-hand", "√k by hand, the baseline's own arguments"))


def hf_adapter_rows() -> dict[str, dict[str, list[float]]]:
    """model -> cell -> the seeds' held-out losses, from docs/results/hf-adapter.jsonl."""
    path = RESULTS / "studies" / "hf-adapter.jsonl"
    out: dict[str, dict[str, list[float]]] = {}
    for line in path.read_text().splitlines()[1:]:
        row = json.loads(line)
        out.setdefault(row["model"], {}).setdefault(row["cell"], []).append(row["eval_loss"])
    return out


def hf_adapter_table() -> str:
    """Held-out loss (lower is better) of a character-level GPT-2 and BERT trained by HF's Trainer
    at batch 16 and at 8× through DateTrainer, seed by seed."""
    head = " | ".join(label for _, label in HF_CELLS)
    lines = [f"| model | baseline, batch 16 | {head} |", "|---|---:|" + "---:|" * len(HF_CELLS)]
    for model, cells in hf_adapter_rows().items():
        def text(losses: list[float]) -> str:
            return f"{sum(losses) / len(losses):.3f} ({', '.join(f'{x:.3f}' for x in losses)})"
        means = [sum(cells[c]) / len(cells[c]) for c, _ in HF_CELLS]
        best = min(means)
        shown = [f"**{text(cells[c])}**" if m == best else text(cells[c])
                 for (c, _), m in zip(HF_CELLS, means)]
        name = {"gpt2": "GPT-2 (causal LM)", "bert": "BERT (masked LM)"}[model]
        lines.append(f"| {name} | {text(cells['baseline'])} | {' | '.join(shown)} |")
    return "\n".join(lines)


GPT_STUDY = "gpt-char"
GPT_SWEEPS = ("gpt-char-rules", "gpt-char-budgets", "gpt-char-linear", "gpt-char-hold-32x",
              "gpt-char-hold-64x", "gpt-char-ramp-32x-64x")
GPT_LABELS = {"date": "default (its probe: k^0.75)", "paper": "paper (√k)",
              "linear": "linear, constant warmup", "date+hold": "default, hold",
              "date+ramp": "default, ramp"}


def gpt_char_table() -> str:
    """gpt-char's cells: validation loss (nats per character, lower is better) against each
    sweep's baseline, seeds, steps, and the steps and training time to the baseline's loss."""
    lines = ["| batch (k) | plan | Δ loss (seeds) | holds | steps | steps, s to the baseline's "
             "loss |", "|---|---|---:|---|---:|---:|"]
    rows = []
    for name in GPT_SWEEPS:
        if study_of(name) is None:
            continue
        summary = sweep(name)
        for g in summary.groups:
            seeds = ", ".join(_num(r.metric - summary.baseline.mean, 3) for r in g.results
                              if r.metric is not None)
            reached = (f"{g.steps_to_target:.0f}, {g.time_to_target_s:.0f}"
                       if g.time_to_target_s is not None else f"{g.reached} of "
                       f"{len(g.results)} seeds reach it")
            k = g.batch // summary.baseline.batch
            rows.append(((g.batch, list(GPT_LABELS).index(g.scheme)),
                         f"| {g.batch} ({k}×) | {GPT_LABELS[g.scheme]} | {_num(g.delta, 3)} "
                         f"({seeds}) | {'yes' if g.holds else 'no'} | {g.steps} | {reached} |"))
    return "\n".join(lines + [line for _, line in sorted(rows)])


GPT_PROBES = (("probes/gpt-char", "`date probe recipes/gpt-char.yaml --share 0.25` (the recipe)"),
              ("probes-hf/gpt2-char", "`DateProbe` in HF's Trainer, `GPT2LMHeadModel` "
               "(`examples/hf_gpt_char.py --probe`)"))


def gpt_probe_table() -> str:
    """The forecast for gpt-char at 8× from the bundled trainer's probe and from DateProbe's
    inside HF's Trainer, each over the baseline's first 500 steps."""
    from date_engine.forecast import forecast
    from lab.results_data import probe

    lines = ["| probe | steps | B_noise at the baseline's end | B_hold (±1 s.e.) | batch 96: "
             "epochs × (steps) |", "|---|---:|---:|---:|---:|"]
    for name, label in GPT_PROBES:
        p = probe(name)
        b0, n = p.baseline["batch_size"], p.baseline["dataset_size"]
        ahead = forecast(p.curve, 8 * b0, b0, p.baseline_epochs, n)
        lines.append(f"| {label} | {p.steps} | {ahead.noise_at_end:.0f} | {ahead.holding_batch} "
                     f"({ahead.holding_low}–{ahead.holding_high}) | {ahead.factor:.2f} "
                     f"({ahead.steps}) |")
    return "\n".join(lines)


TRAINER_WAYS = {"hf": "HF's `Trainer`, default optimizer", "date-base":
                "`DateTrainer(date=False)`", "date": "`DateTrainer(date=True)`",
                "bundled": "bundled trainer (`date scale`'s)", "hand": "hand loop, fused AdamW"}


def trainer_overhead_table() -> str:
    """Per step, a GPT-2 and a BERT through HF's Trainer, DateTrainer, the bundled trainer and a
    hand loop (docs/results/bench/trainer_overhead.json, from ``python -m
    benchmarks.trainer_overhead``). The bound of ``DateTrainer(date=True)``: 1 plus what its
    optimizer step adds to the plain Trainer's, as a share of the plain Trainer's step; of
    ``DateTrainer(date=False)``: 1.05."""
    document = json.loads((RESULTS / "bench" / "trainer_overhead.json").read_text())
    lines = ["| model | way | ms a step | × HF's Trainer | bound | optimizer step, ms | peak MiB |",
             "|---|---|---:|---:|---:|---:|---:|"]
    plain = {row["model"]: row for row in document["rows"] if row["way"] == "hf"}
    for row in document["rows"]:
        name = {"gpt2": "GPT-2", "bert": "BERT"}[row["model"]]
        hf = plain[row["model"]]
        share = 1 + (row["optimizer_ms"] - hf["optimizer_ms"]) / hf["step_ms"]
        bound = {"date-base": "1.050", "date": f"{share:.3f}"}.get(row["way"], "")
        lines.append(f"| {name}, {row['parameters'] / 1e6:.1f} M | {TRAINER_WAYS[row['way']]} | "
                     f"{row['step_ms']:.0f} | {row['vs_hf']:.3f} | {bound} | "
                     f"{row['optimizer_ms']:.1f} | {row['peak_rss_mib']:.0f} |")
    # the ratios' cost alone: date=True against date=False, the same trainer, round by round
    pairs = []
    for model, name in (("gpt2", "GPT-2"), ("bert", "BERT")):
        rounds = [r for r in document["rounds"] if r["hf"]["model"] == model]
        step = statistics.median(r["date"]["step_ms"] - r["date-base"]["step_ms"] for r in rounds)
        opt = statistics.median(r["date"]["optimizer_ms"] - r["date-base"]["optimizer_ms"]
                                for r in rounds)
        pairs.append(f"{name} {round(step):+d} ms a step ({opt:+.1f} ms optimizer step)")
    lines.append(f"\n`date=True` less `date=False`, paired by round (median of {len(rounds)}): "
                 f"{'; '.join(pairs)}.")
    return "\n".join(lines)


BRANCH_STUDIES = (
    ("gpt-char", "gpt-char-768", (("gpt-char-branches", "epochs from the noise curve"),
                                  ("gpt-char-branches-scaled", "epochs from the noise curve"),
                                  ("gpt-char-branches-measured", "from the critical batch"),
                                  ("gpt-char-branches-96", "")), 3),
    ("Fashion-MNIST", "fashion-4096", (("fashion-branches", ""),), 2),
    ("MNIST", "lenet-mnist-4096", (("lenet-mnist-branches", ""),), 2),
    ("lstm-mnist-adam (held out)", "lstm-mnist-adam-4096", (("lstm-mnist-adam-branches", ""),),
     2),
)
"""(study, its probe in docs/results/branch-probes, its sweeps each with how its budget was
planned — before hold and ramp read the measured critical batch, or after — and the digits its
Δ is given to). A sweep not yet stored is left out."""


def _branch_probe(name: str) -> dict:
    return json.loads((RESULTS / "branch-probes" / f"{name}.json").read_text())


def _moment(name: str) -> str:
    return {"scaled": "the rule's second moment", "fixed": "the baseline's second moment"}[name]


def branch_forecast_table() -> str:
    """What each study's branches measured: its checkpoints and branches, the critical batch at
    each checkpoint, the settings taken at the target, and what that forecasts for it."""
    lines = ["| study | target | checkpoints (samples) | branches × samples | critical batch | "
             "settings at the target | forecast for the target |",
             "|---|---:|---|---:|---|---|---|"]
    for study, probe_name, _, _ in BRANCH_STUDIES:
        probe = _branch_probe(probe_name)
        target, critical = probe["target_batch"], probe["critical_batch"]
        s = probe["settings"]
        how = "stable, lowest loss" if s["stable"] else "none stable at its peak; lowest loss"
        keeps = next((c["at_samples"] for c in critical if c["batch"] >= target), None)
        points = ", ".join(f"{c['at_samples']:,}" for c in critical)
        batches = ", ".join(f"{c['batch']:,}" for c in critical)
        lines.append(
            f"| {study} | {target:,} ({target // probe['baseline']['batch_size']}×) | "
            f"{points} | {len(probe['branches'])} × {probe['branch_cost']['samples']:,} | "
            f"{batches} | k^{s['lr_exponent']:g}, "
            f"{_moment(s['second_moment'])} ({how}, of {s['tried']}) | "
            + (f"keeps up from sample {keeps:,}" if keeps is not None else
               f"does not keep up; the largest that did: {critical[-1]['batch']:,}") + " |")
    return "\n".join(lines)


def branch_cells_table() -> str:
    """The cells of the branches study: the target batch on the plan its probe's branches give,
    and the batch they named as the largest that kept up, each against its sweep's baseline."""
    lines = ["| study | batch (k) | plan | baseline | Δ (seeds) | holds | the branches said | "
             "data |", "|---|---:|---|---:|---:|---|---|---|"]
    for study, probe_name, names, digits in BRANCH_STUDIES:
        probe = _branch_probe(probe_name)
        target, named = probe["target_batch"], probe["critical_batch"][-1]["batch"]
        s = probe["settings"]
        for name, how in names:
            if not (RESULTS / "sweeps" / f"{name}.jsonl").exists():
                continue
            summary = sweep(name)
            base = summary.baseline
            overrides = sweep_rows(name)[0]["settings"].get("overrides", ())
            moment = "scaled" if "date.second_moment=scaled" in overrides else s["second_moment"]
            for g in summary.groups:
                budget = g.scheme.partition("+")[2] or "same-epochs"
                budget += f" ({how})" if how and budget != "same-epochs" else ""
                plan = (f"{budget}, measured k^{s['lr_exponent']:g}, {_moment(moment)}"
                        + (" (set)" if moment != s["second_moment"] else "")
                        if g.batch == target else f"{budget}, the rule's with its probe")
                said = ("does not keep up" if g.batch == target and named < target else
                        "keeps up" if g.batch == target else
                        "the largest that kept up" if g.batch == named else "—")
                seeds = ", ".join(_num(r.metric - base.mean, digits) for r in g.results
                                  if r.metric is not None)
                lines.append(
                    f"| {study} | {g.batch:,} ({g.batch // base.batch}×) | {plan} | "
                    f"{base.mean:.{digits + 1}f} | {_num(g.delta, digits)} ({seeds}) | "
                    f"{'yes' if g.holds else 'no'} | {said} | {_link(name, '')} |")
    return "\n".join(lines)


TABLES: dict[str, Callable[[], str]] = {
    "branch-forecasts": branch_forecast_table,
    "branch-cells": branch_cells_table,
    "trainer-overhead": trainer_overhead_table,
    "gpt-char": gpt_char_table,
    "gpt-probe": gpt_probe_table,
    "schedule-shape": shape_table,
    "hf-adapter": hf_adapter_table,
    "readme-accuracy": readme_table,
    "rules": lambda: rules_table(""),
    "cap": cap_table,
    "exponent": exponent_table,
    "ramp": lambda: ramp_table(""),
    "seed-by-seed": seed_by_seed_table,
    "budgets": budgets_table,
    "held-out": lambda: holdout.table() + "\n\n" + holdout.summary(),
    "nothing-held": holdout.nothing_held_table,
    "lr-check": lambda: holdout.lr_check_table() + "\n\n" + holdout.lr_check_summary(),
    "probe-lengths": lambda: holdout.probe_lengths_table() + "\n\n"
    + holdout.probe_lengths_summary(),
    "other-baselines": holdout.other_baselines_table,
}

FILES = ("README.md", "docs/results.md", "docs/results-transformers.md",
         "docs/results-branches.md", "docs/noise.md",
         "docs/integrations.md", "docs/performance.md")
_BLOCK = re.compile(r"(<!-- generated: ([\w-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)


def render(text: str) -> str:
    """``text`` with every generated block rewritten from the data."""
    return _BLOCK.sub(lambda m: m.group(1) + TABLES[m.group(2)]() + "\n" + m.group(4), text)


def stale(root: Path = ROOT) -> list[str]:
    """'FILE: NAME' for each generated table whose text differs from what the data gives."""
    out = []
    for name in FILES:
        text = (root / name).read_text()
        for m in _BLOCK.finditer(text):
            if m.group(3) != TABLES[m.group(2)]() + "\n":
                out.append(f"{name}: {m.group(2)}")
    return out


def main(argv: list[str]) -> int:
    if "--check" in argv:
        differ = stale()
        for line in differ:
            print(f"{line}: edited by hand or stale; run python -m lab.results_tables")
        return 1 if differ else 0
    for name in FILES:
        path = ROOT / name
        path.write_text(render(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
