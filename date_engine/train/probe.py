"""``date probe``'s training: the baseline itself, for a share of its steps, split into
micro-batches so that every step measures the gradient noise scale; then the LR check, the same
steps again at twice the baseline's LR; then probe.json (:mod:`date_engine.probe`)."""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

from date_engine.branches import (
    BranchCost,
    branch_cost,
    choose_settings,
    critical_batches,
    judge,
    ladder,
    setting_count,
)
from date_engine.catalog import entry
from date_engine.errors import DateError, PlanError
from date_engine.planning import plan_for
from date_engine.probe import (
    DEFAULT_BRANCH_POINTS,
    DEFAULT_POINTS,
    DEFAULT_SHARE,
    LR_CHECK_FACTOR,
    LRCheck,
    Probe,
    baseline_identity,
    probe_points,
    second_half_loss,
)
from date_engine.runfolder import RunFolder
from date_engine.runplan import largest_divisor
from date_engine.spec import parse_spec
from date_engine.train.branches import (
    branch_jobs,
    branch_plan,
    branch_spec,
    link_or_copy,
    run_branch,
)
from date_engine.train.config import RunConfig
from date_engine.train.launch import LaunchOptions, launch
from date_engine.train.trainer import EXIT_NONFINITE

__all__ = ["ProbeOptions", "branch_budget", "check_probe", "measuring_micro_batch",
           "probe_folder", "probe_state", "run_probe"]


@dataclass(frozen=True)
class ProbeOptions:
    """How ``date probe`` trains: which share of the baseline, within how long, split how."""

    share: float = DEFAULT_SHARE
    points: int = DEFAULT_POINTS
    max_minutes: float | None = None
    nproc: int = 1
    micro_batch: int | None = None
    resume: bool = False
    """Continue the interrupted probe in the folder (:func:`probe_state`)."""
    lr_check: bool = True
    """Train the probe's steps again at LR_CHECK_FACTOR × the baseline's LR (:class:`LRCheck`)."""
    target_batch: int | None = None
    """Branch from the probe's checkpoints at batches up to this one (:mod:`date_engine.branches`);
    None: no branches."""
    branch_points: int = DEFAULT_BRANCH_POINTS
    """Checkpoints to branch from, spread over the probe's steps (fewer where the budget needs)."""
    branch_samples: int | None = None
    """The branches' budget in samples, all together (default: :func:`branch_cost`'s)."""


def probe_state(folder: Path, spec: Any) -> str:
    """What ``folder`` holds: "empty" (no probe yet), "finished" (probe.json), "interrupted"
    (a probe of ``spec`` stopped with a checkpoint before probe.json) or "other" (a probe's
    training of another spec, or a run folder that is no probe's)."""
    if (folder / "probe.json").exists():
        return "finished"
    run = RunFolder(folder / "run")
    if not run.root.exists() or not (run.checkpoints() or run.plan_path.exists()):
        return "empty"
    try:
        asked = RunConfig.read(run.config_path).spec
    except (OSError, TypeError, ValueError):
        return "other"
    if asked != spec.model_dump(mode="json", exclude_none=True):
        return "other"
    return "interrupted" if run.checkpoints() else "empty"


def probe_folder(output_dir: Path | None, recipe: str, spec: Any) -> tuple[Path, bool]:
    """Where the probe goes, and whether it continues an interrupted one there: ``output_dir``,
    else the first of runs/<recipe>-probe, -2, -3, ... that holds no finished probe. A folder
    whose probe was stopped before probe.json is continued from its checkpoint when it probed
    this spec; a finished probe, or an interrupted one of another spec, is refused for
    ``output_dir`` and passed over otherwise."""
    from date_engine.checks import output_folder
    from date_engine.runfolder import folder_versions

    candidates = [output_dir] if output_dir is not None else \
        folder_versions(Path(f"runs/{recipe}-probe"))
    for folder in candidates:
        state = probe_state(folder, spec)
        if state in ("empty", "interrupted"):
            return output_folder(folder, "--output-dir"), state == "interrupted"
        if output_dir is None:
            continue
        if state == "finished":
            raise DateError(f"{folder} already holds a finished probe ({folder / 'probe.json'}); "
                            f"use it with date plan SPEC --batch B --probe "
                            f"{folder / 'probe.json'}, or choose another --output-dir.")
        raise DateError(f"{folder} holds an interrupted probe of another spec ({folder / 'run'}); "
                        "choose another --output-dir, or remove that folder.")
    raise DateError(f"runs/{recipe}-probe: every numbered folder is taken; pass --output-dir.")


def check_probe(spec: Any, world_size: int, micro_batch: int | None) -> None:
    """Refuse what a probe cannot measure: under fsdp no process holds its own gradient, and a
    split of one gradient per step measures no noise."""
    measuring_micro_batch(spec.baseline.batch_size, world_size, micro_batch)
    if spec.train.parallel == "fsdp":
        raise DateError("date probe measures the gradient noise scale, which train.parallel: "
                        "fsdp does not show (each process holds a shard of the averaged "
                        "gradient); probe the baseline under ddp (--set train.parallel=ddp): an "
                        "fsdp run reads that probe.")


def measuring_micro_batch(batch: int, world_size: int, micro_batch: int | None) -> int:
    """The micro-batch a probe splits the baseline's batch into: ``micro_batch`` if given, else
    each process's whole share when there are several processes, and half of it (or its
    largest divisor below that) on one — two gradients per step are enough to measure, and each
    further split slows the probe (docs/noise.md); refuses a split that sees one."""
    share = batch // world_size if batch % world_size == 0 else 0
    if micro_batch is None:
        parts = 1 if world_size > 1 else 2
        micro_batch = largest_divisor(share, share // parts)
    if share and world_size * share // micro_batch < 2:
        raise DateError(f"the probe needs two or more micro-batch gradients per step to measure "
                        f"the noise scale; with {world_size} process(es) and --micro-batch "
                        f"{micro_batch} the baseline's batch {batch} is one. Use a --micro-batch "
                        f"of {max(share // 2, 1)} or less.")
    return micro_batch


def run_probe(spec_path: Path, spec: Any, recipe: Any, options: ProbeOptions, folder: Path,
              command: str = "") -> tuple[Probe | None, int]:
    """Train the probe into ``folder``/run (with a target batch, in stages that leave a
    checkpoint at each point branched from, kept in ``folder``/points), check the LR, train the
    branches, and write ``folder``/probe.json. Returns the probe (None if the run stopped before
    measuring enough) and the training's exit code."""
    batch = spec.baseline.batch_size
    micro = measuring_micro_batch(batch, options.nproc, options.micro_batch)
    run = plan_for(spec, batch, devices=options.nproc, micro_batch=micro, recipe=recipe)
    plan, split = run.plan, run.split
    steps = min(max(math.ceil(options.share * plan.total_iterations), 2 * options.points),
                plan.total_iterations)
    cost = branch_budget(spec, recipe, options) if options.target_batch else None
    stops = [max(round(steps * (i + 1) / cost.points), 1) for i in range(cost.points)] \
        if cost else [steps]
    run_dir = folder / "run"
    folder.mkdir(parents=True, exist_ok=True)
    config = RunConfig(
        spec=spec.model_dump(mode="json", exclude_none=True), spec_path=str(spec_path),
        recipe=recipe.name if ":" not in (spec.recipe or "") else spec.recipe, batch=batch,
        world_size=options.nproc, micro_batch=micro, output_dir=str(run_dir),
        run=run.to_dict(), max_steps=steps,
        max_seconds=options.max_minutes * 60 if options.max_minutes else None,
        precision=spec.train.precision, measure_pairs=True, resume=options.resume,
        brief=True)
    began = time.perf_counter()
    trained_in = RunFolder(run_dir)
    points: list[tuple[Path, int]] = []
    code = 0
    for stop in stops:
        kept = folder / "points" / trained_in.checkpoint_path(stop).name
        summary = trained_in.read_summary()
        if not kept.exists() and not (summary is not None and summary.stopped_by == "time-limit"):
            code = launch(dataclasses.replace(config, max_steps=stop, resume=bool(
                trained_in.checkpoints())), LaunchOptions(nproc=options.nproc))
            if code:
                break
            summary = trained_in.read_summary()
            if cost is not None and summary is not None and summary.steps == stop:
                kept.parent.mkdir(exist_ok=True)
                link_or_copy(trained_in.checkpoint_path(stop), kept)
        if kept.exists():
            points.append((kept, run.samples_through(stop)))
    summary = trained_in.read_summary()
    points_measured = probe_points(trained_in.read_metrics(), options.points)
    usable = [p for p in points_measured if p.noise_scale is not None]
    if code or summary is None or len({p.epoch for p in usable}) < 2:
        return None, code or 1
    check = None
    if options.lr_check:
        check, code = _lr_check(config, recipe, summary.steps, folder / "lr-check", options)
        if code:
            return None, code
    probe = Probe(
        baseline=baseline_identity(spec, plan.dataset_size),
        baseline_epochs=plan.total_epochs, steps=summary.steps,
        baseline_steps=plan.total_iterations, epochs=plan.epoch(summary.steps),
        micro_batch=split.micro_batch, world_size=split.world_size,
        accumulation_steps=split.accumulation_steps,
        wall_seconds=round(summary.wall_time_s or (time.perf_counter() - began), 3),
        points=points_measured, command=command, run_dir=str(run_dir), lr_check=check)
    if cost is not None and points:  # on the plans this probe's own curve gives
        branched, code = _branches(config, recipe, options, cost, points, folder / "branches",
                                   probe.curve)
        if code:
            return None, code
        probe = dataclasses.replace(probe, **branched)
    probe.write(folder / "probe.json")
    return probe, 0


def branch_budget(spec: Any, recipe: Any, options: ProbeOptions) -> BranchCost:
    """The branches' points and length within the budget: one baseline run, or a tenth of the
    target's in the baseline's epochs, whichever is larger (``options.branch_samples`` given:
    that); a DateError where not one point fits, before anything trains."""
    mapping = spec.model_dump(mode="json", exclude_none=True)
    plan = plan_for(spec, spec.baseline.batch_size, devices=options.nproc, recipe=recipe).plan
    baseline = plan.total_iterations * plan.baseline_batch
    rule = entry(spec.baseline.optimizer.name).batch_rule
    p = max(rule.lr_exponent, rule.probed_exponent or 0) if rule is not None else 0.5
    try:  # the target in the baseline's epochs; where LEGW cannot fit them, as long (a hold
        target = branch_plan(branch_spec(mapping, spec.train.seed, "scaled"), "",  # is longer)
                             options.target_batch, options.nproc, recipe).plan.total_iterations \
            * options.target_batch
    except PlanError:
        target = baseline
    return branch_cost(spec.baseline.batch_size, options.target_batch, options.branch_points,
                       setting_count(p, _adaptive(spec)), baseline, target,
                       options.branch_samples)


def _adaptive(spec: Any) -> bool:
    """The rule scales this optimizer's second-moment decay (so both are branched)."""
    rule = entry(spec.baseline.optimizer.name).batch_rule
    return rule is not None and rule.second_moment is not None and spec.date.rule == "date"


def _branches(probed: RunConfig, recipe: Any, options: ProbeOptions, cost: BranchCost,
              points: list[tuple[Path, int]], folder: Path, curve: Any
              ) -> tuple[dict[str, Any], int]:
    """Train every branch (:func:`branch_jobs`), judge them, and return probe.json's fields:
    ``target_batch``, ``branches``, ``critical_batch``, ``settings``, ``branch_cost``."""
    spec = parse_spec(probed.spec, source=probed.spec_path)
    target = options.target_batch
    rungs = ladder(spec.baseline.batch_size, target)
    planned = branch_plan(branch_spec(probed.spec, spec.train.seed, "scaled"), probed.spec_path,
                          target, options.nproc, recipe, curve=curve).plan
    raw, said = [], Console(stderr=True, highlight=False)
    jobs = branch_jobs(points, rungs, cost.samples, spec.train.seed, planned.lr_exponent,
                       _adaptive(spec))
    for job in jobs:
        branch, code = run_branch(job, probed, recipe, folder, options.nproc, curve)
        if code:
            return {}, code
        raw.append(branch)
        said.print(f"branch {len(raw)} of {len(jobs)}, batch {job.batch:,} from sample "
                   f"{job.at_samples:,}" + (f" at its peak LR ×k^{job.lr_exponent:g}, "
                                            f"{job.second_moment} second moment"
                                            if job.role == "setting" else "")
                   + f": {branch.steps:,} steps, loss "
                   + ("non-finite" if branch.loss is None else f"{branch.loss:.4g}"),
                   markup=False, soft_wrap=True)
    judged = judge(raw, recipe.higher_is_better)
    return {"target_batch": target, "branches": judged,
            "critical_batch": critical_batches(judged),
            "settings": choose_settings(judged, target), "branch_cost": cost}, 0


def _lr_check(probed: RunConfig, recipe: Any, steps: int, run_dir: Path,
              options: ProbeOptions) -> tuple[LRCheck | None, int]:
    """Train the probe's ``steps`` again into ``run_dir`` at LR_CHECK_FACTOR × the baseline's LR
    (same seed, split and schedule; no noise measured) and compare the second halves' losses."""
    spec = dict(probed.spec, baseline=dict(probed.spec["baseline"]))
    spec["baseline"]["lr"] = LR_CHECK_FACTOR * spec["baseline"]["lr"]
    run = plan_for(parse_spec(spec, source=probed.spec_path), probed.batch,
                   devices=probed.world_size, micro_batch=probed.micro_batch, recipe=recipe)
    config = dataclasses.replace(probed, spec=spec, run=run.to_dict(), output_dir=str(run_dir),
                                 max_steps=steps,
                                 max_seconds=None, measure_noise=False, measure_pairs=False,
                                 resume=options.resume and bool(RunFolder(run_dir).checkpoints()))
    code = launch(config, LaunchOptions(nproc=options.nproc))
    own = second_half_loss(RunFolder(probed.output_dir).read_metrics(), steps)
    if code == EXIT_NONFINITE and own is not None:  # twice the LR diverged: no faster
        return LRCheck(LR_CHECK_FACTOR, None, own), 0
    if code:
        return None, code
    checked = second_half_loss(RunFolder(run_dir).read_metrics(), steps)
    if checked is None or own is None:  # train.log_every longer than half the probe
        return None, 0
    return LRCheck(LR_CHECK_FACTOR, checked, own), 0
