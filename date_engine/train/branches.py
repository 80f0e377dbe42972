"""The probe's branches, trained: each a ``date scale`` run resumed from a copy of one of the
probe's own checkpoints under the plan for its batch (``--force-replan``: the weights go on at
the step of that plan their samples reach, on its schedule; a setting at the target at its peak
LR, held), evaluated where it stops (:mod:`date_engine.branches` says what is measured and how
it is read).

A branch's folder is ``branches/<name>/``: its run, and ``branch.json`` once it has finished, so
that an interrupted probe trains only the branches it has not. A branch's checkpoints go once it
is read (a model's state per branch would fill a disk); its metrics stay.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from date_engine.branches import Branch, exponents_below
from date_engine.errors import PlanError
from date_engine.forecast import NoiseCurve
from date_engine.planning import plan_for
from date_engine.runfolder import RunFolder
from date_engine.runplan import RunPlan
from date_engine.spec import parse_spec
from date_engine.spikes import SpikeWatch
from date_engine.train.config import RunConfig
from date_engine.train.launch import LaunchOptions, launch
from date_engine.train.trainer import EXIT_NONFINITE

__all__ = ["BranchJob", "branch_jobs", "branch_plan", "branch_spec", "link_or_copy",
           "run_branch"]


@dataclass(frozen=True)
class BranchJob:
    """One branch to train: from which checkpoint, at which batch, under which settings."""

    name: str
    checkpoint: Path
    at_samples: int
    batch: int
    samples: int
    role: str
    seed: int
    lr_exponent: float | None = None
    second_moment: str = "scaled"


def branch_spec(spec: dict[str, Any], seed: int, second_moment: str) -> dict[str, Any]:
    """The spec a branch trains: the probed one in the baseline's epochs (no probe, so that the
    plan at each batch is the rule's), every step logged, its data order's seed, the
    second-moment decay asked for, and no spike guard (a spike is a measurement here)."""
    out = json.loads(json.dumps(spec))
    date = out.setdefault("date", {})
    date.pop("probe", None)
    date["budget"] = "same-epochs"
    date["second_moment"] = second_moment
    train = out.setdefault("train", {})
    train.update(log_every=1, seed=seed, spike_guard=False)  # a spike is what it measures
    train.pop("eval_every", None)
    return out


def branch_plan(spec: dict[str, Any], source: str, batch: int, nproc: int, recipe: Any,
                micro_batch: int | None = None, curve: NoiseCurve | None = None) -> RunPlan:
    """The run a branch at ``batch`` trains (:func:`branch_spec`'s spec): in the baseline's
    epochs with the probe's own ``curve`` (its LR check decides the exponent, as in the plan a
    user gets from this probe), or — where LEGW's warmup would outlast those epochs — in the
    epochs the curve forecasts (``--budget hold``)."""
    parsed = parse_spec(spec, source=source)
    try:
        return plan_for(parsed, batch, devices=nproc, recipe=recipe, micro_batch=micro_batch,
                        noise_curve=curve)
    except PlanError:
        if curve is None:
            raise
        return plan_for(parsed, batch, devices=nproc, recipe=recipe, micro_batch=micro_batch,
                        noise_curve=curve, budget="hold")


def branch_jobs(points: list[tuple[Path, int]], ladder: tuple[int, ...], samples: int,
                seed: int, plan_exponent: float, adaptive: bool) -> list[BranchJob]:
    """Every branch of a probe: from each checkpoint (path, samples seen) the baseline's batch
    under two data orders and each larger batch of the ladder, on the plan for that batch from
    the step its samples reach; from the last, the target at its planned peak LR held constant,
    at each exponent :func:`~date_engine.branches.exponents_below` gives and, for an adaptive
    optimizer, under the rule's second moment and the baseline's."""
    b0, target = ladder[0], ladder[-1]
    jobs = []
    for i, (path, at) in enumerate(points):
        jobs += [BranchJob(f"p{i}-b{b0}-s{s}", path, at, b0, samples, "baseline", seed + s)
                 for s in (0, 1)]
        jobs += [BranchJob(f"p{i}-b{b}", path, at, b, samples, "ladder", seed,
                           plan_exponent if b == target else None) for b in ladder[1:]]
    path, at = points[-1]
    last = len(points) - 1
    for p in exponents_below(plan_exponent):
        for moment in ("scaled", "fixed") if adaptive else ("scaled",):
            jobs.append(BranchJob(f"p{last}-b{target}-peak-p{p:g}-{moment}", path, at, target,
                                  samples, "setting", seed, p, moment))
    return jobs


def run_branch(job: BranchJob, probed: RunConfig, recipe: Any, folder: Path, nproc: int,
               curve: NoiseCurve | None) -> tuple[Branch | None, int]:
    """Train ``job`` into ``folder``/<name> (or read its branch.json, if it has finished);
    returns the raw branch (not yet judged against the baseline's) and the training's exit
    code (0 when it went non-finite: that is a measurement)."""
    here = folder / job.name
    done = here / "branch.json"
    if done.exists():
        return Branch(**json.loads(done.read_text())), 0
    spec = branch_spec(probed.spec, job.seed, job.second_moment)
    run = branch_plan(spec, probed.spec_path, job.batch, nproc, recipe,
                      probed.micro_batch if job.batch == probed.batch else None, curve)
    plan = run.plan
    start = run.steps_within(job.at_samples)
    steps = max(math.ceil(job.samples / job.batch), 2)
    if start + steps > plan.total_iterations:  # a short plan: its LR at the start goes on
        longer = start + steps
        plan = dataclasses.replace(plan, total_iterations=longer,
                                   total_epochs=longer * job.batch / plan.dataset_size)
        run = run._replace(plan=plan)
    lr, constant = plan.lr(start + 1), start + steps > run.plan.total_iterations
    if job.role == "setting":  # the peak, at the exponent tried
        planned = math.log(plan.peak_lr / plan.baseline_lr) / math.log(plan.scale)
        lr, constant = plan.peak_lr * plan.scale ** (job.lr_exponent - planned), True
    run_dir = here / "run"
    target = RunFolder(run_dir)
    shutil.rmtree(here, ignore_errors=True)  # a branch stopped halfway starts over
    target.checkpoint_dir.mkdir(parents=True)
    link_or_copy(job.checkpoint, target.checkpoint_dir / job.checkpoint.name)
    config = dataclasses.replace(
        probed, spec=spec, batch=job.batch, run=run.to_dict(), output_dir=str(run_dir),
        micro_batch=run.split.micro_batch, resume=True, force_replan=True,
        max_steps=start + steps, max_seconds=None, measure_noise=False, measure_pairs=False,
        branch_lr=lr if constant else None, brief=True, quiet=True,
        evaluate_at=(start + steps // 2, start + steps) if job.role == "baseline" else
        (start + steps,))
    code = launch(config, LaunchOptions(nproc=nproc))
    if code not in (0, EXIT_NONFINITE):
        return None, code
    records = [r for r in target.read_metrics() if r.get("step", 0) > start]
    branch = _measured(job, records, start, steps, lr, code == EXIT_NONFINITE,
                       recipe.metric_name, job.batch * steps)
    shutil.rmtree(target.checkpoint_dir, ignore_errors=True)
    done.write_text(json.dumps(dataclasses.asdict(branch), indent=2) + "\n")
    return branch, 0


def _measured(job: BranchJob, records: list[dict[str, Any]], start: int, steps: int, lr: float,
              diverged: bool, metric_name: str, samples: int) -> Branch:
    """A branch's loss (its second half's mean), its metric at the stop and any spike."""
    trained = [r for r in records if "loss" in r]
    watch, why = SpikeWatch(settle=max(min(steps // 4, 20), 2)), ""
    for r in trained:
        why = watch.observe(r["loss"], r.get("grad_norm"))
        if why:
            why = f"step {r['step'] - start} of {steps}: {why}"
            break
    half = [r["loss"] for r in trained if r["step"] > start + steps / 2]
    loss = None if diverged or not half else sum(half) / len(half)
    first = [r["loss"] for r in trained if r["step"] <= start + max(steps // 10, 1)]
    begun = sum(first) / len(first) if first and math.isfinite(sum(first)) else None
    halfway = [r["loss"] for r in trained if start + steps / 4 < r["step"] <= start + steps / 2]
    half_loss = sum(halfway) / len(halfway) if halfway and not diverged else None
    at_half = [r["eval"] for r in records if "eval" in r and r["step"] == start + steps // 2]
    half_metric = at_half[0].get(metric_name) if at_half and not diverged else None
    evals = [r["eval"] for r in records if "eval" in r and r["step"] == start + steps]
    metric = evals[-1].get(metric_name) if evals and not diverged else None
    if metric is not None and not math.isfinite(metric):
        metric = None
    return Branch(job.at_samples, job.batch, lr, samples, steps, loss, metric,
                  stable=loss is not None and not why, keeps_up=False, role=job.role,
                  seed=job.seed, lr_exponent=job.lr_exponent,
                  second_moment=job.second_moment, why=why or ("" if loss is not None else
                                                               "its loss went non-finite"),
                  start_loss=begun, half_loss=half_loss, half_metric=half_metric)


def link_or_copy(source: Path, dest: Path) -> None:
    """``dest`` as a hard link to ``source`` (a copy where the file system has none): removing
    one (a run's checkpoint rotation) leaves the other."""
    try:
        os.link(source, dest)
    except OSError:
        shutil.copyfile(source, dest)
