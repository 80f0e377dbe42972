"""What a sweep's cells measured, read back from their folders, and what it adds up to.

Per cell: the final eval metric, steps, wall and training time, the eval curve (step, training
seconds, metric) and the training-loss curve, read from its run folder
(:class:`~date_engine.runfolder.RunFolder`).

Per (batch, scheme): the mean and spread over seeds (for grid schemes, of the LR with the best
mean), the difference to the baseline, and time-to-accuracy: the first evaluation at which the
metric reaches the target — the baseline's mean final metric within the tolerance — in optimizer
steps and in training seconds (evaluations left out). Speedup is the baseline's time to the target
over the cell's, both measured on the machine that ran the sweep.

Side by side: at each batch the reference scheme (``date`` where it was swept, else the first
asked for) against every other, seed by seed — cells of one seed share the initialisation and the
data order, so their difference leaves out most of what the seeds vary — with a 95% Student-t
interval on the mean difference. Where the interval holds 0 the sweep cannot tell the two apart.
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from date_engine.errors import DateError
from date_engine.runfolder import RunFolder
from date_engine.sweep.grid import Cell
from date_engine.sweep.schemes import BASELINE

__all__ = ["CellResult", "Group", "Paired", "SideBySide", "SweepSummary", "Tolerance", "paired",
           "read_cell", "summarize"]


@dataclass(frozen=True)
class Tolerance:
    """How far below the baseline (above, for lower-is-better metrics) a result may land and still
    count as holding accuracy: an absolute amount in the metric's units, or a fraction of it."""

    value: float
    relative: bool

    @classmethod
    def parse(cls, text: str) -> Tolerance:
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(%?)\s*", text)
        if not match:
            raise DateError(
                f"--tolerance: '{text}' is not a tolerance; write an amount in the metric's "
                "units (0.3) or a percentage of the baseline's metric (5%)."
            )
        number = float(match.group(1))
        return cls(number / 100 if match.group(2) else number, bool(match.group(2)))

    def amount(self, reference: float) -> float:
        return abs(reference) * self.value if self.relative else self.value

    def target(self, reference: float, higher_is_better: bool) -> float:
        """The worst metric that still counts as reaching ``reference``."""
        return (
            reference - self.amount(reference)
            if higher_is_better
            else reference + self.amount(reference)
        )

    def __str__(self) -> str:
        return f"{self.value * 100:g}%" if self.relative else f"{self.value:g}"


@dataclass
class CellResult:
    cell: Cell
    status: str
    """done | diverged | failed | partial | pending."""
    metric: float | None = None
    steps: int = 0
    total_steps: int = 0
    epochs: float = 0.0
    peak_lr: float | None = None
    warmup_epochs: float | None = None
    wall_s: float | None = None
    """Wall time of the last attempt's training loop, as the trainer's summary reports it."""
    train_s: float | None = None
    """Training seconds over all attempts, evaluations left out."""
    samples_per_s: float | None = None
    evals: list[tuple[int, float | None, float]] = field(default_factory=list)
    """(step, training seconds, metric) of every evaluation."""
    losses: list[tuple[float, float]] = field(default_factory=list)
    """(epoch, training loss) of every logged step."""
    reached_step: int | None = None
    reached_s: float | None = None

    def reach(self, target: float, higher_is_better: bool) -> None:
        """Set the first evaluation at which the metric reaches ``target`` (a result read back
        from stored data, which keeps no evaluations, keeps what it was stored with)."""
        if not self.evals:
            return
        self.reached_step = self.reached_s = None
        for step, seconds, value in self.evals:
            if (
                value is not None
                and math.isfinite(value)
                and (value >= target if higher_is_better else value <= target)
            ):
                self.reached_step, self.reached_s = step, seconds
                return

    def row(self) -> dict[str, Any]:
        """One line of results.csv."""
        return {
            "scheme": self.cell.scheme,
            "batch": self.cell.batch,
            "grid_lr": self.cell.lr,
            "seed": self.cell.seed,
            "status": self.status,
            "metric": self.metric,
            "steps": self.steps,
            "total_steps": self.total_steps,
            "epochs": self.epochs,
            "peak_lr": self.peak_lr,
            "warmup_epochs": self.warmup_epochs,
            "train_s": self.train_s,
            "wall_s": self.wall_s,
            "samples_per_s": self.samples_per_s,
            "steps_to_target": self.reached_step,
            "time_to_target_s": self.reached_s,
        }


def read_cell(cell: Cell, folder: Path, metric_name: str) -> CellResult:
    """What ``folder`` (a cell's run folder) says about the cell, however far it got."""
    files = RunFolder(folder)
    result = CellResult(cell, "pending")
    run = files.read_plan()
    if run is not None:
        plan = run.plan
        result.total_steps, result.epochs = plan.total_iterations, plan.total_epochs
        result.peak_lr, result.warmup_epochs = plan.peak_lr, plan.warmup_epochs
    for record in files.read_metrics():
        if "eval" in record:
            value = record["eval"].get(metric_name)
            result.evals.append((record["step"], record.get("time_s"), value))
        elif "loss" in record:
            result.losses.append((record["epoch"], record["loss"]))
            result.steps = max(result.steps, record["step"])
            result.train_s = record.get("time_s", result.train_s)
    summary = files.read_summary()
    if files.read_failure() is not None:
        result.status = "diverged"
    elif summary is not None and summary.finished:
        result.status = "done"
        result.metric, result.steps = summary.metric, summary.steps
        result.wall_s, result.samples_per_s = summary.wall_time_s, summary.samples_per_s
        if result.evals and result.evals[-1][1] is not None:
            result.train_s = result.evals[-1][1]
    elif files.checkpoints():
        result.status = "partial"
    return result


@dataclass
class Group:
    """The cells of one (batch, scheme) over seeds; for grid schemes, those of the kept LR."""

    scheme: str
    batch: int
    results: list[CellResult]
    grid_lr: float | None = None
    tried: dict[float, float | None] = field(default_factory=dict)
    """Grid schemes: each LR's mean metric (None: a seed diverged or did not finish)."""
    mean: float | None = None
    std: float | None = None
    delta: float | None = None
    """mean − baseline mean."""
    holds: bool | None = None
    """Within the tolerance of the baseline (or better)."""
    steps: int = 0
    train_s: float | None = None
    """Mean training seconds of the whole run (evaluations left out), when every seed finished."""
    reached: int = 0
    """Seeds that reached the target."""
    time_to_target_s: float | None = None
    """Mean over seeds, when every seed reached the target."""
    steps_to_target: float | None = None
    speedup: float | None = None
    """Baseline time-to-target / this group's."""

    @property
    def complete(self) -> bool:
        return all(r.status in ("done", "diverged") for r in self.results)


T_975 = (12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
         2.2010, 2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
         2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423)
"""Student's t at 0.975 for 1 to 30 degrees of freedom (two-sided 95%)."""
Z_975 = 1.959964
"""The normal quantile at 0.975: t_975's limit."""


def t_975(df: int) -> float:
    """Student's t quantile at 0.975; beyond the table, its Cornish–Fisher expansion (error under
    1e-4 from 30 degrees of freedom on)."""
    if df < 1:
        raise ValueError("a t interval needs at least one degree of freedom")
    if df <= len(T_975):
        return T_975[df - 1]
    z = Z_975
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


@dataclass(frozen=True)
class Paired:
    """Two sets of cells compared seed by seed: a − b on the seeds both finished."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    half_width: float | None
    """Of the 95% Student-t interval on the mean difference; None with one seed."""

    def reading(self, higher_is_better: bool, tolerance: float | None = None) -> str:
        """'ahead', 'behind' (a's side of b, in the metric's better direction) where the interval
        leaves out 0; 'within' where it lies inside ±``tolerance`` (level to within what the
        sweep accepts); 'level' where it holds 0 and reaches past that; 'one seed' where there is
        no interval."""
        if self.half_width is None:
            return "one seed"
        low, high = self.mean - self.half_width, self.mean + self.half_width
        if low > 0 or high < 0:
            return "ahead" if (low > 0) == higher_is_better else "behind"
        if tolerance is not None and -tolerance < low and high < tolerance:
            return "within"
        return "level"

    def seeds_for_half_width(self, width: float) -> int | None:
        """The fewest paired seeds whose 95% interval would be ±``width`` at these seeds' spread
        of differences (Student's t): how many seeds a close call needs. None with one seed or a
        ``width`` ≤ 0; 2 where the seeds do not spread at all."""
        if len(self.differences) < 2 or width <= 0:
            return None
        spread = statistics.stdev(self.differences)
        n = max(2, math.ceil((Z_975 * spread / width) ** 2))  # t > z: never past the answer
        while t_975(n - 1) * spread / math.sqrt(n) > width:
            n += 1
        return n


def paired(a: dict[int, float], b: dict[int, float]) -> Paired | None:
    """``a`` − ``b`` over the seeds both have (seed → final metric); None if they share none."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        return None
    differences = tuple(a[s] - b[s] for s in seeds)
    mean = statistics.fmean(differences)
    half = (t_975(len(seeds) - 1) * statistics.stdev(differences) / math.sqrt(len(seeds))
            if len(seeds) > 1 else None)
    return Paired(seeds, differences, mean, half)


@dataclass(frozen=True)
class SideBySide:
    """At one batch, the reference scheme against another, seed by seed."""

    batch: int
    scheme: str
    other: str
    paired: Paired
    tolerance: float | None = None
    """The sweep's tolerance in the metric's units (None before the baseline finished)."""

    @property
    def seeds_for_tolerance(self) -> int | None:
        """Paired seeds whose 95% interval would be ±``tolerance``
        (:meth:`Paired.seeds_for_half_width`)."""
        return None if self.tolerance is None else self.paired.seeds_for_half_width(self.tolerance)

    def reading(self, higher_is_better: bool) -> str:
        return self.paired.reading(higher_is_better, self.tolerance)


@dataclass
class SweepSummary:
    metric_name: str
    higher_is_better: bool
    tolerance: Tolerance
    baseline: Group | None
    target: float | None
    groups: list[Group]
    """Every (batch, scheme), batches ascending, schemes in the order asked for."""
    schemes: list[str] = field(default_factory=list)
    """The schemes (labels, with budgets) in the order asked for."""

    def verdicts(self, schemes: list[str]) -> dict[str, str]:
        """Per scheme, a plain sentence: up to which batch accuracy holds, and the speedup there."""
        out = {}
        if self.baseline is None or self.baseline.mean is None:
            return {s: "no verdict: the baseline has not finished" for s in schemes}
        for scheme in schemes:
            groups = [
                g for g in self.groups if g.scheme == scheme and g.batch > self.baseline.batch
            ]
            done = [g for g in groups if g.complete and g.holds is not None]
            if not done:
                out[scheme] = "no verdict yet: no larger batch has finished"
                continue
            held, failed = [], None
            for g in done:
                if g.holds:
                    held.append(g)
                else:
                    failed = g
                    break
            if failed is None:
                best = held[-1]
                text = (f"holds accuracy at every batch run, up to {best.batch} "
                        f"({best.batch / self.baseline.batch:g}×)")
            elif held:
                text = (
                    f"holds accuracy up to {held[-1].batch}; at {failed.batch} it falls to "
                    f"{failed.mean:.4g} ({failed.delta:+.3g})"
                    if failed.mean is not None
                    else f"holds accuracy up to {held[-1].batch}; at {failed.batch} it diverges"
                )
            else:
                text = (
                    f"does not hold accuracy: at {failed.batch} it reaches {failed.mean:.4g} "
                    f"({failed.delta:+.3g})"
                    if failed.mean is not None
                    else f"does not hold accuracy: at {failed.batch} it diverges"
                )
            last = held[-1] if held else None
            if last is not None:
                text += f"; at {last.batch}: {self.baseline.steps / last.steps:.3g}× fewer steps, "
                text += (
                    f"{last.speedup:.2f}× faster to the target"
                    if last.speedup is not None
                    else f"no time to target ({last.reached} of {len(last.results)} seeds "
                    "reached it)"
                )
            out[scheme] = text
        return out

    def side_by_side(self) -> list[SideBySide]:
        """At each batch with two or more schemes finished on a shared seed: the reference
        (``date``'s first label, else the first scheme asked for) against each other scheme."""
        schemes = self.schemes
        if not schemes:
            return []
        reference = next((s for s in schemes if s.partition("+")[0] == "date"), schemes[0])
        tolerance = (self.tolerance.amount(self.baseline.mean)
                     if self.baseline is not None and self.baseline.mean is not None else None)
        out = []
        for batch in dict.fromkeys(g.batch for g in self.groups):
            at = {g.scheme: g for g in self.groups if g.batch == batch}
            if reference not in at:
                continue
            mine = _finished(at[reference])
            others = [s for s in schemes if s != reference and s in at]
            for scheme in others:
                if (pair := paired(mine, _finished(at[scheme]))) is not None:
                    out.append(SideBySide(batch, reference, scheme, pair, tolerance))
        return out

    def to_dict(self) -> dict[str, Any]:
        def group(g: Group | None) -> dict[str, Any] | None:
            if g is None:
                return None
            data = asdict(g)
            data["results"] = [r.row() for r in g.results]
            data["tried"] = {f"{k:g}": v for k, v in g.tried.items()}
            return data

        return {
            "metric": self.metric_name,
            "higher_is_better": self.higher_is_better,
            "tolerance": str(self.tolerance),
            "target": self.target,
            "baseline": group(self.baseline),
            "groups": [group(g) for g in self.groups],
            "side_by_side": [
                {**asdict(c), "reading": c.reading(self.higher_is_better),
                 "seeds_for_tolerance": c.seeds_for_tolerance}
                for c in self.side_by_side()
            ],
        }


def _finished(group: Group) -> dict[int, float]:
    """Seed → final metric of the group's cells that finished with one."""
    return {r.cell.seed: r.metric for r in group.results
            if r.status == "done" and r.metric is not None}


def summarize(
    results: list[CellResult],
    metric_name: str,
    higher_is_better: bool,
    tolerance: Tolerance,
    schemes: list[str],
) -> SweepSummary:
    """Group the cells by (batch, scheme), keep the best grid LR, compare with the baseline."""
    base_cells = [r for r in results if r.cell.scheme == BASELINE]
    baseline = _group(BASELINE, base_cells[0].cell.batch, base_cells) if base_cells else None
    target = None
    if baseline is not None and baseline.mean is not None:
        target = tolerance.target(baseline.mean, higher_is_better)
    for r in results:
        if target is not None:
            r.reach(target, higher_is_better)
    if baseline is not None:
        _timing(baseline, None)
    groups = []
    order = {s: i for i, s in enumerate(schemes)}
    keys = sorted(
        {(r.cell.batch, r.cell.scheme) for r in results if r.cell.scheme != BASELINE},
        key=lambda k: (k[0], order.get(k[1], len(order))),
    )
    for batch, scheme in keys:
        cells = [r for r in results if (r.cell.batch, r.cell.scheme) == (batch, scheme)]
        lrs = sorted({r.cell.lr for r in cells if r.cell.lr is not None})
        if lrs:
            tried = {lr: _group(scheme, batch, [r for r in cells if r.cell.lr == lr]) for lr in lrs}
            means = {
                lr: (g.mean if g.complete and all(r.status == "done" for r in g.results) else None)
                for lr, g in tried.items()
            }
            finished = [lr for lr, m in means.items() if m is not None]
            kept = (
                (max if higher_is_better else min)(finished, key=lambda lr: means[lr])
                if finished
                else lrs[0]
            )
            group = tried[kept]
            group.grid_lr, group.tried = kept, means
        else:
            group = _group(scheme, batch, cells)
        if baseline is not None and baseline.mean is not None and group.complete:
            if group.mean is not None:
                group.delta = group.mean - baseline.mean
                group.holds = (group.mean >= target) if higher_is_better else (group.mean <= target)
            else:
                group.holds = False  # diverged
        _timing(group, baseline)
        groups.append(group)
    return SweepSummary(metric_name, higher_is_better, tolerance, baseline, target, groups,
                        list(schemes))


def _group(scheme: str, batch: int, cells: list[CellResult]) -> Group:
    group = Group(scheme, batch, cells)
    group.steps = max((r.total_steps for r in cells), default=0)
    done = [r.metric for r in cells if r.status == "done" and r.metric is not None]
    if done and len(done) == len(cells):
        group.mean = statistics.fmean(done)
        group.std = statistics.stdev(done) if len(done) > 1 else 0.0
        if all(r.train_s is not None for r in cells):
            group.train_s = statistics.fmean(r.train_s for r in cells)
    return group


def _timing(group: Group, baseline: Group | None) -> None:
    reached = [r for r in group.results if r.reached_s is not None]
    group.reached = len(reached)
    if reached and len(reached) == len(group.results):
        group.time_to_target_s = statistics.fmean(r.reached_s for r in reached)
        group.steps_to_target = statistics.fmean(r.reached_step for r in reached)
        if baseline is not None and baseline.time_to_target_s and group.time_to_target_s > 0:
            group.speedup = baseline.time_to_target_s / group.time_to_target_s
