"""The training loop of ``date scale``: one :class:`Trainer` per process, identical on every
process.

set up   the recipe's data → the plan and batch split (:func:`~date_engine.plan.resolve_plan`,
         the one ``date plan`` shows) → the model, the optimizer the plan names, the loss
         scaler → the newest checkpoint, when resuming → DDP
loop     per optimizer step i: lr(i); the micro-batches forward and backward; one agreement of
         the processes (non-finite loss? a stop asked for? a checkpoint due?); the update; the
         log line; evaluation and checkpoint when due
finish   a checkpoint, the final evaluation, summary.json
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console

from date_engine.errors import DataMissing, DateError
from date_engine.noise import NoiseEstimate, NoiseScale
from date_engine.optim.build import build_optimizer
from date_engine.plan import BatchSplit, RunPlan, resolve_plan
from date_engine.ramp import Change, ladder, move
from date_engine.recipes import DataOptions, RecipeData, get_recipe
from date_engine.runfolder import RunFolder, RunLock, RunSummary
from date_engine.schedule import set_lr
from date_engine.spec import parse_spec
from date_engine.train import checkpoint as ckpt
from date_engine.train.config import RunConfig
from date_engine.train.reporting import RunLogger
from date_engine.train.runtime import Runtime, setup, teardown
from date_engine.train.sampling import MicroBatchSampler
from date_engine.train.step import StepRunner, Verdict, agree, to_device
from date_engine.view.console import error_line, note_line

__all__ = ["EXIT_NONFINITE", "Trainer", "run", "stream_sizes"]

EXIT_NONFINITE = 3
DATASET_SIZE_SLACK = 0.1
"""How far baseline.dataset_size may be from the training data's length before a run is refused
(a spec may give an approximate size, as gnmt's does for WMT)."""
# A dry run keeps the plan and replaces its batch split: 2 samples per pass, 2 passes per step,
# 2 optimizer steps.
DRY_RUN_MICRO_BATCH, DRY_RUN_ACCUMULATION, DRY_RUN_STEPS = 2, 2, 2


def run(config: RunConfig) -> int:
    """Train as one process of the job; returns the process's exit code."""
    runtime = setup(config.precision, config.backend, config.compile, force_cpu=config.dry_run)
    console = (
        Console(stderr=config.print_json, highlight=False)
        if runtime.is_main
        else Console(quiet=True)
    )
    trainer = None
    try:
        trainer = Trainer(config, runtime, console)
        return trainer.run()
    except DateError as exc:
        if runtime.is_main:
            _error(str(exc))
        return 2
    except OSError as exc:  # a full disk, a folder taken away: which file, and no traceback
        if runtime.is_main:
            _error(f"{exc.filename or 'writing the run'}: {exc.strerror}; make room or fix the "
                   "folder, then run the same command with --resume (the newest checkpoint "
                   "written before it stands).")
        return 1
    finally:
        if trainer is not None:
            trainer.close()
        teardown(runtime)


def process_seed(seed: int, rank: int, step: int = 0) -> int:
    """The seed of one process's own random stream (dropout, augmentation, loader workers).

    ``seed`` itself seeds the initial weights, the same on every process; each process then
    draws from ``seed + 1 + rank``. A run continued under another plan (``--force-replan``) at
    step s adds 7919·s (a prime stride, so no two (rank, step) pairs of a job share a seed).
    """
    return seed + 1 + rank + 7919 * step


@dataclass(frozen=True)
class ResumePoint:
    """Where training starts: the step, and what the checkpoint carried besides the weights."""

    step: int = 0
    resumed: bool = False
    window: tuple[float, int] = (0.0, 0)
    """The (loss sum, steps) this process had not logged yet."""
    train_seconds: float = 0.0



class _NonFiniteState(Exception):
    """The model's or optimizer's state is not finite (found when a checkpoint was to be
    written)."""

class Trainer:
    """One process's run of ``date scale``."""

    def __init__(self, config: RunConfig, runtime: Runtime, console: Console) -> None:
        self.config, self.rt, self.console = config, runtime, console
        self.spec = parse_spec(config.spec, source=config.spec_path)
        self.recipe = get_recipe(config.recipe)
        self.options = self.recipe.parse_options(self.spec.model)
        self.seed = self.spec.train.seed
        self.folder = RunFolder(config.output_dir)
        self.restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.done: int | None = 0
        """The last step whose update is complete (None while an update is in flight)."""
        self._lock: RunLock | None = None
        self._made_folder = False

    # ------------------------------------------------------------------ set up

    def run(self) -> int:
        for note in self.rt.notes:
            self.console.print(note_line(note), soft_wrap=True)
        if self.restart and (code := self._earlier_failure()) is not None:
            return code
        _seed_everything(self.seed)
        data = self._data()
        self.planned = self._resolve(data)
        self.plan, self.split = self.planned.plan, self._split_to_train()
        self._take_lock()
        found = self._checkpoint_to_resume(data)  # every refusal happens before anything is written
        if found is not None and self._already_finished(found):
            return 0
        self.noise = self._noise_scale()
        self._announce(data)

        torch.manual_seed(self.seed)  # the same initial weights on every process
        model = self.recipe.build_model(self.options).to(self.rt.device)
        optimizer = build_optimizer(model.named_parameters(), self.plan.optimizer,
                                    self.plan.peak_lr)
        scaler = self.rt.grad_scaler()
        point = self._restore(found, model, optimizer, scaler)
        steps = StepRunner(model, self._wrap(model), optimizer, scaler, self.recipe, data, self.rt,
                           self.split.accumulation_steps, measure_noise=self.noise is not None,
                           measure_pairs=self.config.measure_pairs)
        try:
            summary = self._train(steps, data, point)
        finally:
            steps.close()
        if summary is None:
            return EXIT_NONFINITE
        self._finish(summary)
        if self.rt.distributed:
            dist.barrier()  # leave together: no process tears down while another still talks
        if summary.stopped_by in ("SIGINT", "SIGTERM"):
            return 128 + signal.Signals[summary.stopped_by].value
        return 0

    def close(self) -> None:
        """Let the next writer of the run folder in (the process's exit would too); a folder
        this run made and left with nothing but its lock (a refused --resume, say) goes."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None
            root = self.folder.root
            if self._made_folder and {p.name for p in root.iterdir()} <= {"LOCK"}:
                with contextlib.suppress(OSError):
                    self.folder.lock_path.unlink(missing_ok=True)
                    root.rmdir()

    def _data(self) -> RecipeData:
        options = DataOptions(data_dir=self.spec.train.data_dir, seed=self.seed)
        try:
            return self.recipe.build_data(options, self.options)
        except DataMissing as exc:
            if not self.config.dry_run:
                raise
            data = self.recipe.build_data(
                dataclasses.replace(options, synthetic=True), self.options
            )
            data.note = (
                f"{exc} The dry run steps on generated samples of the recipe's shapes instead."
            )
            return data

    def _resolve(self, data: RecipeData, changes: tuple[Change, ...] = ()) -> RunPlan:
        """The plan and split ``date plan`` shows for this command: plan.json of the run (with a
        measured ramp's ``changes``, the plan of a run that made them)."""
        cfg = self.config
        planned = resolve_plan(
            self.spec,
            cfg.batch,
            cfg.world_size,
            cfg.micro_batch,
            self.recipe,
            dataset_size=len(data.train),
            ramp_changes=changes,
        )
        if changes:  # a re-derivation during the run: the data was checked and noted at its start
            return planned
        n, source = planned.plan.dataset_size, planned.plan.dataset_size_source
        held = len(data.train)
        if data.note or n == held:  # generated samples of a dry run stand in for the data
            return planned
        if cfg.batch > held:
            raise DateError(f"batch {cfg.batch} is larger than the training data "
                            f"({held} samples in {self.spec.train.data_dir or 'the default data'});"
                            f" choose --batch {held} or less, or point train.data_dir at the "
                            "whole data set.")
        if source.startswith("recipe"):  # the recipe's nominal size: every epoch figure would lie
            raise DateError(f"the training data holds {held} samples, not the {n} {source} "
                            f"assumes; set baseline.dataset_size: {held} (or point train.data_dir "
                            "at the whole data set).")
        if abs(n - held) > DATASET_SIZE_SLACK * held:  # every epoch count would be off by n/held
            other = self.spec.recipe not in (None, self.recipe.name, cfg.recipe)
            hint = (f" (the spec names recipe {self.spec.recipe}: is it a spec of another "
                    "recipe?)") if other else ""
            raise DateError(f"{source} says {n:,} training samples but the data of recipe "
                            f"{self.recipe.name} holds {held:,}{hint}: every epoch count of the "
                            f"plan would be off by {n / held:.3g}×. Set baseline.dataset_size: "
                            f"{held}, or point train.data_dir at the whole data set.")
        if self.rt.is_main:
            self.console.print(note_line(f"the plan counts epochs of {n} samples ({source}) but "
                                         f"the training set holds {held}."), soft_wrap=True)
        return planned

    def _follows_noise(self) -> bool:
        """A measured batch ramp: the run moves up as its own noise scale says."""
        return bool(self.plan.ramp) and self.plan.ramp_mode == "measured" \
            and not self.config.dry_run

    def _noise_scale(self) -> NoiseScale | None:
        """The run's gradient noise scale, measured when a step sees more than one micro-batch
        gradient (more processes or accumulation steps; a measured ramp's stages always do);
        averaged over a fixed share of the run's samples."""
        if self._follows_noise():
            if not self.config.measure_noise:
                raise DateError("date.ramp: measured follows the noise scale the run measures, "
                                "which this run was asked not to; set date.ramp: planned.")
        elif self.split.world_size * self.split.accumulation_steps < 2 \
                or not self.config.measure_noise:
            return None
        # the plan's samples: what a ramp's LR spans, whatever moves a measured one makes
        return NoiseScale(NoiseScale.half_life_for(
            self.plan.total_epochs * self.plan.dataset_size))

    def _split_at(self, step: int) -> BatchSplit:
        """The split of optimizer step ``step``: a ramp stage's, the planned one, or a dry run's."""
        return self.split if self.config.dry_run else self.planned.split_at(step)

    def _samples_through(self, step: int) -> int:
        """Global samples trained on by the end of optimizer step ``step``."""
        if self.config.dry_run:
            return step * self.split.batch
        return int(self.plan.samples_through(step))

    def _split_to_train(self) -> BatchSplit:
        """The planned split; a dry run keeps the plan and steps with a tiny split instead."""
        if self.config.dry_run:
            return BatchSplit(DRY_RUN_MICRO_BATCH, self.rt.world_size, DRY_RUN_ACCUMULATION)
        return self.planned.split

    def _announce(self, data: RecipeData) -> None:
        """Show the plan and write the run's record (rank 0)."""
        if not self.rt.is_main:
            return
        from date_engine.view.plan import describe_split, render_plan

        cfg = self.config
        if cfg.brief:
            stop = self._stop_at()
            self.console.print(
                f"training the first {stop:,} of the baseline's {self.plan.total_iterations:,} "
                f"optimizer steps ({self.recipe.name}, batch "
                f"{describe_split(self.planned.split)}) into {self.folder.root}",
                soft_wrap=True, markup=False, highlight=False)
        else:
            title = f"date scale {cfg.spec_path} — recipe {self.recipe.name}"
            self.console.print(render_plan(self.plan, self.planned.split, title,
                                           chart_width=min(self.console.width - 14, 72)))
        if data.note:
            self.console.print(note_line(data.note), soft_wrap=True)
        if self.noise is None and cfg.measure_noise and not cfg.dry_run and not self.plan.ramp \
                and not cfg.brief:
            self.console.print(note_line(
                "the gradient noise scale is not measured: each step sees one gradient (one "
                "process, no accumulation); a --micro-batch below the batch measures it."),
                soft_wrap=True)
        if cfg.dry_run:
            self.console.print(
                f"[bold]dry run:[/] the plan above is valid; now {DRY_RUN_STEPS} optimizer steps "
                f"of {describe_split(self.split)} on the CPU "
                f"({self.rt.backend or 'one process'}), writing only to a temporary folder.",
                soft_wrap=True,
            )
        self.folder.write_record(
            self.spec.model_dump(mode="json", exclude_none=True), cfg.to_json(), self.planned
        )
        if self._follows_noise():
            self.console.print(note_line(
                "the batch ramp follows the noise scale this run measures: each stage above "
                "starts where its batch is reached, at the latest where the table puts it, and "
                "every earlier start shortens the run (plan.json is rewritten at each)."),
                soft_wrap=True)

    def _wrap(self, model: torch.nn.Module) -> torch.nn.Module:
        wrapped = model
        if self.rt.distributed:
            wrapped = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[self.rt.device] if self.rt.device.type == "cuda" else None
            )
        if self.rt.compile:
            wrapped = torch.compile(wrapped)
        return wrapped

    # ------------------------------------------------------------------ resume

    def _earlier_failure(self) -> int | None:
        """After a restart by torchrun: a deterministic failure (a non-finite loss) would recur."""
        record = self.folder.read_failure()
        if not record or record.get("run_id") != os.environ.get("TORCHELASTIC_RUN_ID"):
            return None
        if self.rt.is_main:
            _error(f"{record['message']} (not retried on restart)")
        return record["exit_code"]

    def _take_lock(self) -> None:
        """One writer per run folder: rank 0 takes its lock for the whole run, and clears what
        killed checkpoint writes left; every process learns whether it could."""
        error = None
        if self.rt.is_main:
            self._made_folder = not self.folder.root.exists()
            try:
                self._lock = self.folder.lock(self.config.rerun_command or "date scale")
                ckpt.remove_partial_writes(self.folder)
            except DateError as exc:
                error = str(exc)
        self._agree(error)

    def _agree(self, error: str | None) -> None:
        """Raise rank 0's ``error`` on every process, so that none waits for one that left."""
        if self.rt.distributed:
            box = [error]
            dist.broadcast_object_list(box, src=0)
            error = box[0]
        if error:
            raise DateError(error)

    def _checkpoint_to_resume(self, data: RecipeData) -> ckpt.Found | None:
        """The checkpoint this run continues from, or None for a fresh start; refuses a new run
        into a folder with checkpoints, --resume without one, and another plan's checkpoint. A
        measured ramp takes on the moves up its checkpoint's run had made."""
        cfg = self.config
        wanted = cfg.resume or self.restart > 0
        found = ckpt.newest_valid(self.folder) if not cfg.dry_run else None
        if found is not None and found.skipped and self.rt.is_main:
            for line in found.skipped:
                self.console.print(f"[yellow]warning:[/] skipped {line}", soft_wrap=True)
        if not wanted:
            if found is not None:
                raise DateError(
                    f"{self.folder.root} already holds checkpoints ({found.path.name}); pass "
                    "--resume to continue that run, or --output-dir to start a new one.")
            return None
        if found is None:
            if cfg.resume and not self.restart:
                raise DateError(f"--resume: no checkpoint in {self.folder.checkpoint_dir}; run "
                                "without --resume to start from the beginning.")
            return None
        if self._follows_noise() and (changes := _ramp_changes(found.payload["plan"])):
            with contextlib.suppress(ValueError):  # changes of another plan: refused below
                self._replan(data, changes)
        mismatch = self._mismatch(found)
        if mismatch and not cfg.force_replan:
            raise ckpt.refuse(found.path, mismatch)
        return found

    def _replan(self, data: RecipeData, changes: tuple[Change, ...]) -> None:
        """Train on with the plan of a measured ramp that made ``changes``."""
        self.planned = self._resolve(data, changes)
        self.plan = self.planned.plan

    def _climb(self, step: int) -> Change | None:
        """A measured ramp, after ``step``: the move up to the largest rung the run's noise scale
        has passed, from step + 1 on (None to stay, or where the plan moves there anyway). Every
        process decides alike: the noise scale comes from the step's all-reduce. It moves only
        once its noise scale has been measurable and risen from its lowest (docs/noise.md)."""
        if not self._follows_noise() or self.noise is None or not self.noise.trusted:
            return None
        plan = self.plan  # its rungs are those derive_plan laddered, multiples of the processes
        rungs = ladder(plan.target_batch, plan.baseline_batch, self.split.world_size)
        return move(plan.ramp, rungs, step, self.noise.scale, plan.ramp_reach)

    def _mismatch(self, found: ckpt.Found) -> str | None:
        payload, planned = found.payload, RunPlan(self.plan, self.split).to_dict()
        return ckpt.describe_mismatch(payload["plan"], planned, payload["spec_fingerprint"],
                                      self.spec.fingerprint())

    def _already_finished(self, found: ckpt.Found) -> bool:
        """A resumed run whose checkpoint is its plan's last step: nothing to train. Its
        summary.json is written again if it was lost, from the final evaluation in
        metrics.jsonl; without that evaluation the run goes on to evaluate (False)."""
        last = self.plan.total_iterations
        if self._mismatch(found) or found.payload["step"] < last:
            return False
        summary = self.folder.read_summary()
        if summary is None or not summary.finished:
            evals = [r["eval"] for r in self.folder.read_metrics()
                     if "eval" in r and r.get("step") == last]
            if not evals:
                self.console.print(note_line(
                    f"{self.folder.root} trained to its last step ({found.path.name}) but holds "
                    "no final evaluation; evaluating that checkpoint."), soft_wrap=True)
                return False
            if self.rt.is_main:
                seconds = float(found.payload.get("train_seconds", 0.0))
                samples = self._samples_through(last)
                self.folder.write_summary(RunSummary(
                    self.recipe.name, last, last, None, self.recipe.metric_name,
                    evals[-1].get(self.recipe.metric_name), seconds,
                    samples / seconds if seconds > 0 else 0.0, str(found.path),
                    self.planned.to_dict()))
            self.console.print(f"{self.folder.root} already finished: {found.path.name} is step "
                               f"{last} of {last}; its summary.json was missing and is written "
                               "again from that checkpoint and the final evaluation in "
                               "metrics.jsonl (its wall time is the training time).",
                               soft_wrap=True)
            return True
        self.console.print(f"{self.folder.root} already finished: {found.path.name} is step "
                           f"{found.payload['step']} of {last}; nothing to do.", soft_wrap=True)
        return True

    def _restore(self, found: ckpt.Found | None, model, optimizer, scaler) -> ResumePoint:
        """Load ``found`` into the model, optimizer and loss scaler; seed this process's own
        random stream (the checkpoint's, or a fresh one)."""
        rt = self.rt
        if found is None:
            _seed_everything(process_seed(self.seed, rt.rank))  # dropout etc. differ per process
            return ResumePoint()
        payload = found.payload
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        if scaler is not None and payload.get("scaler"):
            scaler.load_state_dict(payload["scaler"])
        self.console.print(f"resuming from {found.path} (step {payload['step']})", soft_wrap=True)
        if mismatch := self._mismatch(found):  # --force-replan: as many samples, the new plan
            start = self._steps_within(payload["samples_seen"])
            _seed_everything(process_seed(self.seed, rt.rank, start))
            self.console.print(note_line(f"--force-replan: {mismatch}; continuing its weights at "
                                         f"step {start} of the new plan "
                                         f"({payload['samples_seen']} samples seen)."),
                               soft_wrap=True)
            return ResumePoint(start, resumed=True)
        if self.noise is not None and payload.get("noise"):
            self.noise.load_state_dict(payload["noise"])
        mine = payload["ranks"][rt.rank]
        ckpt.restore_rng(mine["rng"])
        return ResumePoint(payload["step"], True, tuple(mine["log_window"]),
                           float(payload.get("train_seconds", 0.0)))

    def _steps_within(self, samples: int) -> int:
        """The most optimizer steps of this plan that train on no more than ``samples``."""
        low, high = 0, self.plan.total_iterations
        while low < high:
            mid = (low + high + 1) // 2
            low, high = (mid, high) if self._samples_through(mid) <= samples else (low, mid - 1)
        return low

    # ------------------------------------------------------------------ the loop

    def _last(self) -> int:
        """The run's last optimizer step (a measured ramp moves it with every change)."""
        return DRY_RUN_STEPS if self.config.dry_run else self.plan.total_iterations

    def _stop_at(self) -> int:
        """The step this attempt stops after: the last, or --max-steps."""
        last, most = self._last(), self.config.max_steps
        return min(last, most) if most else last

    def _train(self, steps: StepRunner, data: RecipeData, point: ResumePoint) -> RunSummary | None:
        cfg, train = self.config, self.spec.train
        log = RunLogger(
            self.rt,
            self.console,
            self.folder,
            total_steps=self._last(),
            start=point.step,
            resumed=point.resumed,
            log_every=train.log_every,
            samples_through=self._samples_through,
            batch_at=(lambda s: self._split_at(s).batch) if self.plan.ramp else None,
            dataset_size=self.plan.dataset_size,
            window=point.window,
            time_before=point.train_seconds,
        )
        # a dry run writes (and reads back) the one checkpoint at its end: a model that does not
        # fit one step's checkpoint in memory or on disk fails there as the run would
        policy = ckpt.CheckpointPolicy(
            DRY_RUN_STEPS if cfg.dry_run else train.checkpoint_every, train.checkpoint_minutes
        )
        began, self.done = time.perf_counter(), point.step
        stopped_by = self._loop(steps, data, log, policy, point.step)
        if stopped_by == "non-finite":
            log.close()
            return None
        step, last = self.done, self._last()
        if stopped_by is None and self._stop_at() < last:
            stopped_by = "max-steps"
        try:
            path = self._save(step, steps, log)
        except _NonFiniteState:  # the loss read finite to the end, the state did not stay so
            self._nonfinite(step, None)
            log.close()
            return None
        if cfg.dry_run and self.rt.is_main:
            _verify_checkpoint(self.folder, step)
        metric = None
        if step == last and data.eval is not None:
            metric = self._evaluate(steps.model, data, step, log)
        log.close()
        wall = time.perf_counter() - began
        samples = self._samples_through(step) - self._samples_through(point.step)
        return RunSummary(
            self.recipe.name,
            step,
            last,
            stopped_by,
            self.recipe.metric_name,
            metric,
            wall,
            samples / wall if wall > 0 else 0.0,
            str(path) if path else None,
            self.planned.to_dict(),
        )

    def _loop(
        self,
        steps: StepRunner,
        data: RecipeData,
        log: RunLogger,
        policy: ckpt.CheckpointPolicy,
        start: int,
    ) -> str | None:
        """Steps start+1 .. the stop. Returns what stopped them early ('SIGINT', 'SIGTERM',
        'non-finite') or None."""
        rt, train = self.rt, self.spec.train
        stop, saved, rng_before, step = _StopRequest(), start, None, start
        batches: Iterator[Any] = iter(self._loader(data, start, self._stop_at()))
        steps.model.train()
        try:
            while step < self._stop_at():
                step += 1
                # the random state after step - 1, for a checkpoint of it written on the way out
                rng_before = ckpt.capture_rng(numpy=False) if not rt.distributed else None
                lr = set_lr(steps.optimizer, self.plan, step)
                split = self._split_at(step)
                steps.accumulation = split.accumulation_steps  # a ramp's stage may change it
                stage = self.plan.stage_at(step)
                if stage is not None and step == stage.first_step > 1 and rt.is_main \
                        and not self.config.dry_run:
                    why = (f"the measured noise scale reached {stage.noise_at_start:,.0f}"
                           if stage.measured else "where the plan puts it")
                    self.console.print(note_line(
                        f"step {step}: the batch grows to {split.batch} ({why}; LR {lr:.5g}; "
                        f"{self.plan.total_iterations} steps in all)"), soft_wrap=True)
                loss = steps.forward_backward(batches)
                grad_norm = steps.unscale_and_clip(train.grad_clip, log.is_logging(step))
                out_of_time = self._out_of_time(log)
                verdict = agree(rt, loss, stop.signal is not None or out_of_time,
                                policy.time_due(rt.is_main), steps.noise_sample(grad_norm),
                                grad_norm, steps.state_sum())
                if verdict.state_nonfinite:  # the last update broke the state: nothing to keep
                    self._nonfinite(step - 1, None)
                    return "non-finite"
                if verdict.nonfinite:  # keep the work since the last checkpoint, if it is finite
                    if self.done > saved:
                        with contextlib.suppress(_NonFiniteState):
                            self._save(self.done, steps, log, rng=rng_before)
                    self._nonfinite(step, loss)
                    return "non-finite"
                self.done = None  # inside the update: no consistent state to save until it ends
                steps.update()
                self.done = step
                log.after_step(step, lr, loss, grad_norm, steps.optimizer,
                               self._measured(verdict, split))
                if (change := self._climb(step)) is not None:
                    self._replan(data, self.plan.ramp_changes + (change,))
                    log.retotal(self._last())
                    if rt.is_main:
                        self.folder.write_plan(self.planned)
                    del batches  # the old loader's workers go; the stream goes on where it was
                    batches = iter(self._loader(data, step, self._stop_at()))
                if train.eval_every and step % train.eval_every == 0 and step != self._last():
                    self._evaluate(steps.model, data, step, log)
                if verdict.stop:
                    return stop.signal or ("time-limit" if out_of_time else "signal")
                if step != self._stop_at() and policy.due(step, verdict.save):
                    self._save(step, steps, log)
                    saved = step
                    policy.saved()
        except _NonFiniteState:  # a checkpoint was due, and the state behind a finite loss is not
            self._nonfinite(step, None)
            return "non-finite"
        except BaseException:
            # Anything unexpected (an exception, a second Ctrl-C): keep the work of the steps
            # completed since the last checkpoint. Only a lone process can: the others of a job
            # may be stuck in a collective.
            if not rt.distributed and self.done is not None and self.done > saved:
                rng = rng_before if self.done == step - 1 else None  # None: the state now
                with contextlib.suppress(_NonFiniteState):
                    path = self._save(self.done, steps, log, rng=rng)
                    Console(stderr=True).print(f"saved {path} (step {self.done}) before stopping")
            raise
        finally:
            stop.restore()
            log.close_view()
        return None

    def _out_of_time(self, log: RunLogger) -> bool:
        """Rank 0's clock says the run's ``max_seconds`` of training (``date probe
        --budget-minutes``) are spent."""
        limit = self.config.max_seconds
        return bool(limit) and self.rt.is_main and log.train_seconds() >= limit

    def _measured(self, verdict: Verdict, split: BatchSplit) -> NoiseEstimate | None:
        """Fold the step's noise sample in; the smoothed estimate after it (None if unmeasured,
        or left as it was at a ramp stage whose steps see one gradient)."""
        if self.noise is None or verdict.noise is None:
            return None
        if split.world_size * split.accumulation_steps > 1:
            small_sq, big_sq, *pair = verdict.noise
            self.noise.update(small_sq, big_sq, split.micro_batch, split.batch,
                              pair[0] if pair else None)
        return self.noise.estimate

    def _loader(self, data: RecipeData, start: int, stop_at: int) -> torch.utils.data.DataLoader:
        """This process's micro-batches for steps start+1 .. stop_at, resumable at any step (a
        ramp's stages one after the other)."""
        rank, world = self.rt.rank, self.split.world_size
        if self.config.dry_run:  # the dry run's tiny split at every step
            sizes = [(self.split.micro_batch, (stop_at - start) * self.split.accumulation_steps)]
        else:
            sizes = stream_sizes(self.planned, start, stop_at)
        first = sizes[0] if sizes else (self.split.micro_batch, 0)
        sampler = MicroBatchSampler(
            len(data.train),
            first[0],
            world,
            rank,
            self.seed,
            start=self._samples_through(start) // world,
            count=first[1],
            then=sizes[1:],
        )
        return torch.utils.data.DataLoader(
            data.train,
            batch_sampler=sampler,
            collate_fn=data.collate,
            num_workers=self.spec.train.num_workers,
            pin_memory=self.rt.device.type == "cuda",
            generator=torch.Generator().manual_seed(process_seed(self.seed, rank, start)),
        )

    # ------------------------------------------------------------------ checkpoints, evaluation

    def _save(self, step: int, steps: StepRunner, log: RunLogger, rng=None):
        """Write the checkpoint of ``step`` (collective: every process sends its RNG states and
        its unlogged losses). Returns the path on rank 0, else None. Raises
        :class:`_NonFiniteState` on every process when the model's or optimizer's state is not
        finite: no checkpoint may promise a state training cannot go on from."""
        rt = self.rt
        if not ckpt.finite(steps.model.state_dict(), steps.optimizer.state_dict()):
            raise _NonFiniteState  # the replicas are equal, so every process raises it
        mine = {
            "rng": rng if rng is not None else ckpt.capture_rng(),
            "log_window": log.window_state(),
        }
        states = [None] * rt.world_size if rt.distributed else [mine]
        if rt.distributed:
            dist.all_gather_object(states, mine)
        if not rt.is_main:
            return None
        payload = {
            "format": ckpt.FORMAT,
            "step": step,
            "samples_seen": self._samples_through(step),
            "train_seconds": log.train_seconds(),
            "sampler": {
                "samples_per_process": self._samples_through(step) // self.split.world_size,
                "seed": self.seed,
            },
            "model": steps.model.state_dict(),
            "optimizer": steps.optimizer.state_dict(),
            "scaler": steps.scaler.state_dict() if steps.scaler is not None else None,
            "noise": self.noise.state_dict() if self.noise is not None else None,
            "ranks": states,
            "plan": RunPlan(self.plan, self.split).to_dict(),
            "spec_fingerprint": self.spec.fingerprint(),
            "recipe": self.recipe.name,
        }
        return ckpt.save_atomic(self.folder, step, payload, self.spec.train.keep_checkpoints)

    @torch.no_grad()
    def _evaluate(self, model, data: RecipeData, step: int, log: RunLogger) -> float:
        """The recipe's metric over the whole evaluation set, shared out over the processes."""
        rt = self.rt
        with log.evaluating(step, self.recipe.metric_name) as result:
            model.eval()
            shard = list(range(rt.rank, len(data.eval), rt.world_size))
            loader = torch.utils.data.DataLoader(
                data.eval,
                batch_sampler=torch.utils.data.BatchSampler(shard, 256, drop_last=False),
                collate_fn=data.collate,
                generator=torch.Generator().manual_seed(0),
            )
            totals: dict[str, float] = {}
            for batch in loader:
                with rt.autocast():
                    stats = self.recipe.evaluate(model, to_device(batch, rt.device), data)
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + float(value)
            if rt.distributed:
                keys = sorted(totals)
                values = torch.tensor(
                    [totals[k] for k in keys], dtype=torch.float64, device=rt.device
                )
                dist.all_reduce(values)
                totals = dict(zip(keys, values.tolist()))
            model.train()
            result[self.recipe.metric_name] = self.recipe.metric(totals)
            if self.recipe.details is not None:
                result.update(self.recipe.details(totals))
        return result[self.recipe.metric_name]

    def _nonfinite(self, step: int, loss: torch.Tensor | None) -> None:
        """Report a non-finite stop: the loss or gradients of ``step`` (``loss`` given), or the
        state after ``step`` (``loss`` None)."""
        last = ckpt.newest_valid(self.folder)
        where = (f"the last good checkpoint is {last.path} (step {last.payload['step']})" if last
                 else "no finite state was left to write a checkpoint of")
        if loss is None:
            what = (f"the weights or optimizer state became non-finite by step {step} (the loss "
                    "stayed finite); stopped")
        else:
            value = loss.item()
            what = (f"the loss became non-finite ({value})" if not math.isfinite(value) else
                    f"the gradients became non-finite (the loss read {value:.4g})")
            what += f" at step {step}; stopped without taking that step"
        message = (f"{what}, and {where}. Lower baseline.lr, set train.grad_clip, or check the "
                   "data, then resume with --resume.")
        if self.rt.is_main:
            _error(message)
            self.folder.write_failure(
                message, EXIT_NONFINITE, step, os.environ.get("TORCHELASTIC_RUN_ID")
            )

    def _finish(self, summary: RunSummary) -> None:
        if not self.rt.is_main:
            return
        from date_engine.view.progress import render_summary

        dry_run, brief = self.config.dry_run, self.config.brief
        if not brief:
            self.console.print(render_summary(summary, self.plan, self.split, dry_run))
        if summary.stopped_by and self.config.rerun_command and not dry_run:
            self.console.print(f"continue with: {self.config.rerun_command} --resume",
                               soft_wrap=True, markup=False)
        self.folder.write_summary(summary)
        if not dry_run and not brief:
            from date_engine.view.plots import run_curves

            run_curves(self.folder.read_metrics(), self.recipe.metric_name,
                       self.folder.curves_path, self.plan)


def _ramp_changes(saved_plan: dict[str, Any]) -> tuple[Change, ...]:
    """The moves up a measured ramp the run that wrote ``saved_plan`` had made (none if it is not
    a plan this version reads)."""
    try:
        return RunPlan.from_dict(saved_plan).plan.ramp_changes
    except (KeyError, TypeError, ValueError):
        return ()


def stream_sizes(planned: RunPlan, start: int, stop_at: int) -> list[tuple[int, int]]:
    """(micro-batch, how many) a process reads, in order, for steps start+1 .. stop_at: one
    entry, or one per batch ramp stage those steps touch."""
    sizes, step = [], start + 1
    while step <= stop_at:
        split, stage = planned.split_at(step), planned.plan.stage_at(step)
        last = min(stop_at, stage.last_step) if stage is not None else stop_at
        sizes.append((split.micro_batch, (last - step + 1) * split.accumulation_steps))
        step = last + 1
    return sizes


class _StopRequest:
    """SIGINT/SIGTERM set a flag; the loop stops after the step in flight. A second SIGINT stops at
    once."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self._previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. inside a test runner's worker thread)
                pass

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def _error(message: str) -> None:
    Console(stderr=True, highlight=False, soft_wrap=True).print(error_line(message))


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed % 2**32)


def _verify_checkpoint(folder: RunFolder, step: int) -> None:
    """A dry run reads back what it wrote."""
    found = ckpt.newest_valid(folder)
    if found is None or found.payload["step"] != step:
        raise DateError(f"dry run: the checkpoint written at step {step} could not be read back")
