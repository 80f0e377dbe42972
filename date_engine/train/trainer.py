"""The training loop of ``date scale``: one :class:`Trainer` per process, identical on every
process.

set up   the recipe's data → the run: the plan and batch split the command derived (the one
         ``date plan`` shows; a dry run steps it with :meth:`RunPlan.dry_run`) → the model, the
         optimizer the plan names, the loss scaler → the newest checkpoint, when resuming
         (:mod:`~date_engine.train.resume`) → DDP
loop     per optimizer step i: lr(i); the micro-batches forward and backward; one agreement of
         the processes (non-finite loss? a stop asked for? a checkpoint due?); the update; the
         log line; a measured ramp's move, evaluation and checkpoint when due
finish   a checkpoint, the final evaluation, summary.json

Every question about a step — its LR, its split, the samples through it, the last step — is
the run's (``Trainer.run``, a :class:`~date_engine.runplan.RunPlan`), held once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from typing import Any

import torch
import torch.distributed as dist
from rich.console import Console
from rich.text import Text

from date_engine.checks import check_dataset_size
from date_engine.errors import DateError
from date_engine.noise import NoiseScale
from date_engine.optim.build import optimizer_for
from date_engine.planning import plan_for
from date_engine.ramp import Change, Follower
from date_engine.recipes import DataOptions, RecipeData, get_recipe
from date_engine.runfolder import RunFolder, RunLock, RunSummary
from date_engine.runplan import RunPlan
from date_engine.schedule import set_lr
from date_engine.spec import parse_spec
from date_engine.train import checkpoint as ckpt
from date_engine.train import fit, guard, resume
from date_engine.train.config import RunConfig
from date_engine.train.evaluate import evaluate
from date_engine.train.reporting import RunLogger
from date_engine.train.runtime import Runtime, setup, shard_units, teardown
from date_engine.train.sampling import loader
from date_engine.train.step import StepRunner, agree
from date_engine.view.console import error_line, nonfinite_message, note_line

__all__ = ["EXIT_NONFINITE", "Trainer", "run"]

EXIT_NONFINITE = 3


def run(config: RunConfig) -> int:
    """Train as one process of the job; returns the process's exit code."""
    runtime = setup(config.precision, config.backend, config.compile, force_cpu=config.dry_run,
                    parallel=config.spec.get("train", {}).get("parallel", "ddp"))
    console = (Console(stderr=config.print_json, highlight=False)
               if runtime.is_main and not config.quiet else Console(quiet=True))
    # SIGINT/SIGTERM/SIGUSR1 are this run's until the process group is left: a signal that
    # reaches one process after the job agreed to stop (the launcher signals its workers one after
    # another) must not kill it in the job's last collectives, where its peers would fail with it
    stop = _StopRequest()
    trainer = None
    try:
        trainer = Trainer(config, runtime, console, stop)
        return trainer.train()
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
        stop.restore()


class Trainer:
    """One process's run of ``date scale``."""

    def __init__(self, config: RunConfig, runtime: Runtime, console: Console,
                 stop: _StopRequest) -> None:
        self.config, self.rt, self.console = config, runtime, console
        self.stop = stop
        self.spec = parse_spec(config.spec, source=config.spec_path)
        self.recipe = get_recipe(config.recipe)
        self.options = self.recipe.parse_options(self.spec.model)
        self.seed = self.spec.train.seed
        self.folder = RunFolder(config.output_dir)
        self.restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self.done: int | None = 0
        """The last step whose update is complete (None while an update is in flight)."""
        self._lock: RunLock | None = None
        self.run: RunPlan
        """What this process trains: the plan and the split of its batch (a dry run's, or one a
        measured ramp's move re-derived)."""

    @property
    def plan(self):
        return self.run.plan

    # ------------------------------------------------------------------ set up

    def train(self) -> int:
        """Train the run; returns the process's exit code."""
        for note in self.rt.notes:
            self.console.print(note_line(note), soft_wrap=True)
        if self.restart and (failed := resume.earlier_failure(self.folder)) is not None:
            return _error(f"{failed['message']} (not retried on restart)", self.rt,
                          failed["exit_code"])
        resume.seed_everything(self.seed)
        data = self.recipe.load_data(DataOptions(data_dir=self.spec.train.data_dir,
                                                 seed=self.seed), self.options, self.config.dry_run)
        self.run = self._derive(data)
        self._lock = resume.take_lock(self.rt, self.folder, self.config.rerun_command)
        if fit.wanted(self.spec, self.config):  # train.micro_batch: auto
            self.run = fit.with_micro_batch(self.run, self.recipe, self.options, data, self.rt,
                                            self.folder, self.config.resume or self.restart > 0,
                                            self.console)
        if self.config.dry_run:
            self.run = self.run.dry_run()
        found = self._checkpoint_to_resume(data)  # every refusal happens before anything is written
        if found is not None and self._mismatch(found) is None and resume.already_finished(
                found, self.run, self.folder, self.recipe, self.console, self.rt.is_main):
            return 0
        self.noise = noise_scale(self.run, self.rt.sharded, self.config)
        self.follower = Follower(self.noise, self.plan, self.rt.world_size) \
            if self.run.follows_noise else None
        self._announce(data)
        steps, point = self._build(data, found)
        try:
            summary = self._train(steps, data, point)
        finally:
            steps.close()
        if summary is None:
            return EXIT_NONFINITE
        self._finish(summary)
        if self.rt.distributed:
            dist.barrier()  # leave together: no process tears down while another still talks
        # the first signal this process got, in the loop or after the job agreed to stop (a
        # peer's came first): 130 / 143 on every process
        return 128 + signal.Signals[self.stop.signal].value if self.stop.signal else 0

    def _build(self, data: RecipeData, found: ckpt.Found | None):
        """The model (sharded under fsdp), the plan's optimizer and the step runner, restored from
        ``found``; and the point the run continues from."""
        torch.manual_seed(self.seed)  # the same initial weights on every process
        model = self.recipe.build_model(self.options).to(self.rt.device)
        model = self.rt.shard(model, (self.recipe.shard_units or shard_units)(model))
        optimizer = optimizer_for(model, self.plan)
        scaler = self.rt.grad_scaler()
        mismatch = found and self._mismatch(found)
        point = resume.restore(found, model, optimizer, scaler, self.noise, self.run,
                               mismatch, self.seed, self.rt.rank, self.console)
        self.guard = guard.guard_for(self.spec.train, self.run.dry_steps is not None, found,
                                     mismatch)
        steps = StepRunner(model, self.rt.wrap(model), optimizer, scaler, self.recipe, data,
                           self.rt, self.run.step_split.accumulation_steps,
                           measure_noise=self.noise is not None,
                           measure_pairs=self.config.measure_pairs,
                           measure_norm=self.guard is not None)
        resume.continue_pairs(point, steps, self.noise, found)
        return steps, point

    def close(self) -> None:
        """Let the next writer of the run folder in (the process's exit would too)."""
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _derive(self, data: RecipeData) -> RunPlan:
        """The run (:func:`run_for`); a note on the data loaded is said once."""
        run, note = run_for(self.config, self.spec, self.recipe, data)
        if note and self.rt.is_main:
            self.console.print(note_line(note), soft_wrap=True)
        return run

    def _replanned(self, data: RecipeData, changes: tuple[Change, ...]) -> RunPlan:
        """The run of a measured ramp that made ``changes``: its plan derived again from the
        noise curve the run's plan holds (no probe.json read again), split as the run is."""
        split = self.run.split
        return plan_for(self.spec, self.plan.target_batch, devices=split.world_size,
                        micro_batch=split.micro_batch, recipe=self.recipe,
                        dataset_size=len(data.train), ramp_changes=changes,
                        noise_curve=self.plan.noise_curve, measured=self.plan.measured)

    def _announce(self, data: RecipeData) -> None:
        """Show the plan and write the run's record (rank 0)."""
        if not self.rt.is_main:
            return
        from date_engine.view.progress import run_notes

        for line in run_notes(self.config, self.recipe.name, self.run, self._stop_at(),
                              self.folder.root, data.note, self.noise, self.rt.backend,
                              self.console.width, self.recipe.parameter_count(self.options)
                              if self.run.split.sharded else None):
            self.console.print(line, soft_wrap=isinstance(line, Text))  # the plan's tables wrap
        self.folder.write_record(self.spec.model_dump(mode="json", exclude_none=True),
                                 self.config.to_json(record=True), self.run)

    # ------------------------------------------------------------------ resume

    def _checkpoint_to_resume(self, data: RecipeData) -> ckpt.Found | None:
        """The checkpoint this run continues from (:func:`resume.find`); a measured ramp takes
        on the moves up its checkpoint's run had made; another plan's is refused."""
        cfg = self.config
        found = resume.find(self.folder, cfg.resume or self.restart > 0,
                            cfg.resume and not self.restart, self.console, self.rt.is_main)
        if found is None:
            return None
        if self.run.follows_noise and (changes := resume.saved_changes(found.payload["plan"])):
            with contextlib.suppress(ValueError):  # changes of another plan: refused below
                self.run = self._replanned(data, changes)
        if not cfg.force_replan and (kept := resume.kept_plan(
                found, self.run, self.spec, self.console if self.rt.is_main else None)):
            self.run = kept
        # a layout this run cannot read is refused first: --force-replan cannot help there
        ckpt.check_layout(found, self.run.split.sharded, self.spec.train.parallel)
        mismatch = self._mismatch(found)
        if mismatch and not cfg.force_replan:
            raise ckpt.refuse(found.path, mismatch)
        return found

    def _mismatch(self, found: ckpt.Found) -> str | None:
        payload = found.payload  # the saved plan as this version writes it: defaults filled in
        return ckpt.describe_mismatch(RunPlan.from_dict(payload["plan"]).to_dict(),
                                      self.run.to_dict(), payload["spec_fingerprint"],
                                      self.spec.fingerprint())

    # ------------------------------------------------------------------ the loop

    def _stop_at(self) -> int:
        """The step this attempt stops after: the last, or --max-steps."""
        last, most = self.run.last_step, self.config.max_steps
        return min(last, most) if most else last

    def _train(self, steps: StepRunner, data: RecipeData,
               point: resume.ResumePoint) -> RunSummary | None:
        train = self.spec.train
        log = RunLogger(
            self.rt, self.console, self.folder, total_steps=self.run.last_step, start=point.step,
            resumed=point.resumed, log_every=train.log_every, dataset_size=self.plan.dataset_size,
            samples_through=lambda s: self.run.samples_through(s),  # moves change the run
            batch_at=(lambda s: self.run.split_at(s).batch) if self.plan.ramp else None,
            window=point.window, time_before=point.train_seconds,
            expect_until=self._stop_at() if self.config.brief else None)  # date probe's
        # a dry run writes (and reads back) the one checkpoint at its end: a model that does not
        # fit one step's checkpoint in memory or on disk fails there as the run would
        policy = ckpt.CheckpointPolicy(self.run.dry_steps or train.checkpoint_every,
                                       train.checkpoint_minutes)
        began, self.done = time.perf_counter(), point.step
        stopped_by = self._loop(steps, data, log, policy, point.step)
        if stopped_by == "non-finite":
            log.close()
            return None
        step, last = self.done, self.run.last_step
        if stopped_by is None and self._stop_at() < last:
            stopped_by = "max-steps"
        try:
            path = self._save(step, steps, log)
        except ckpt.NonFiniteState:  # the loss read finite to the end, the state did not stay so
            self._nonfinite(step, None)
            log.close()
            return None
        if self.run.dry_steps and self.rt.is_main:  # a dry run reads back what it wrote
            ckpt.read_back(self.folder, step)
        metric = None
        if (step == last or step in self.config.evaluate_at) and data.eval is not None:
            metric = evaluate(self.rt, self.recipe, steps.model, data, step, log)
        log.close()
        wall = time.perf_counter() - began
        samples = self.run.samples_through(step) - self.run.samples_through(point.step)
        return RunSummary(self.recipe.name, step, last, stopped_by, self.recipe.metric_name,
                          metric, wall, samples / wall if wall > 0 else 0.0,
                          str(path) if path else None, self.run.to_dict(),
                          list(self.guard.rollbacks) if self.guard is not None else [])

    def _loop(self, steps: StepRunner, data: RecipeData, log: RunLogger,
              policy: ckpt.CheckpointPolicy, start: int) -> str | None:
        """Steps start+1 .. the stop. Returns what stopped them early ('SIGINT', 'SIGTERM',
        'time-limit', 'signal', 'non-finite') or None."""
        rt, stop, self.saved, step, self.rng_before = self.rt, self.stop, start, start, None
        self.batches = iter(self._loader(data, start))
        steps.model.train()
        try:
            while step < self._stop_at():
                step += 1
                lr, split = self._begin(step, steps)
                loss = steps.forward_backward(self.batches)
                grad_norm = steps.unscale_and_clip(self.plan.grad_clip, log.is_logging(step))
                out_of_time = _out_of_time(self.config, rt, log)
                verdict = agree(rt, loss, stop.signal is not None or out_of_time,
                                policy.time_due(rt.is_main), steps.noise_sample(grad_norm),
                                grad_norm, steps.state_sum(), watch=self.guard is not None)
                if isinstance(judged := guard.after_verdict(self, step, loss, verdict, steps,
                                                            data, log), str):
                    return judged
                if judged is not None:  # the spike guard went back to this step
                    step = judged
                    continue
                self._update(steps, step)
                log.after_step(step, lr, loss, grad_norm, steps.optimizer,
                               self.noise and self.noise.observe(verdict.noise, split))
                self._follow(step, data, log)
                self._maybe_evaluate(step, steps.model, data, log)
                if verdict.stop:
                    return stop.signal or ("time-limit" if out_of_time else "signal")
                self._maybe_save(step, steps, log, policy, verdict.save)
        except ckpt.NonFiniteState:  # a checkpoint was due; the state behind a finite loss is not
            return self._nonfinite(step, None)
        except BaseException:
            self._save_on_the_way_out(step, steps, log)
            raise
        finally:
            stop.settle()
            log.close_view()
        return None

    def _update(self, steps: StepRunner, step: int) -> None:
        self.done = None  # inside the update: no consistent state to save until it ends
        steps.update()
        self.done = step

    def _maybe_evaluate(self, step: int, model, data: RecipeData, log: RunLogger) -> None:
        every = self.spec.train.eval_every
        asked = step in self.config.evaluate_at and step != self._stop_at()
        if (asked or (every and step % every == 0)) and step != self.run.last_step:
            evaluate(self.rt, self.recipe, model, data, step, log)

    def _maybe_save(self, step: int, steps: StepRunner, log: RunLogger,
                    policy: ckpt.CheckpointPolicy, time_due: bool) -> None:
        """A checkpoint when the policy says one is due (every N steps, or minutes, agreed)."""
        if self.guard is not None and self.guard.suspicious:
            return  # a state the spike guard may roll back from is not one to roll back to
        if step != self._stop_at() and policy.due(step, time_due):
            self._save(step, steps, log)
            self.saved = step
            policy.saved()

    def _begin(self, step: int, steps: StepRunner):
        """Keep the random state after step - 1 (for a checkpoint of it written on the way
        out); set step ``step``'s LR and split; say where a ramp's batch grows. Returns both."""
        self.rng_before = ckpt.capture_rng(numpy=False) if not self.rt.distributed else None
        lr = set_lr(steps.optimizer, self.plan, step, constant=self.config.branch_lr,
                    scale=self.guard.lr_scale if self.guard is not None else 1.0)
        split = self.run.split_at(step)
        steps.accumulation = split.accumulation_steps  # a ramp's stage may change it
        if (stage := self.run.stage_starting(step)) is not None and self.rt.is_main:
            why = (f"the measured noise scale reached {stage.noise_at_start:,.0f}"
                   if stage.measured else "where the plan puts it")
            self.console.print(note_line(
                f"step {step}: the batch grows to {split.batch} ({why}; LR {lr:.5g}; "
                f"{self.plan.total_iterations} steps in all)"), soft_wrap=True)
        return lr, split

    def _follow(self, step: int, data: RecipeData, log: RunLogger) -> None:
        """A measured ramp's move after ``step``: the plan of a run that made it, from step + 1
        on (plan.json rewritten; the sample stream goes on where it was)."""
        change = self.follower and self.follower.after(step, self.plan.ramp, self.plan.ramp_reach)
        if change is None:
            return
        self.run = self._replanned(data, self.plan.ramp_changes + (change,))
        log.retotal(self.run.last_step)
        if self.rt.is_main:
            self.folder.write_plan(self.run)
        del self.batches  # the old loader's workers go
        self.batches = iter(self._loader(data, step))

    def _save_on_the_way_out(self, step: int, steps: StepRunner, log: RunLogger) -> None:
        """Anything unexpected (an exception, a second Ctrl-C): keep the work of the steps
        completed since the last checkpoint. Only a lone process can: the others of a job may be
        stuck in a collective."""
        if self.rt.distributed or self.done is None or self.done <= self.saved:
            return
        rng = self.rng_before if self.done == step - 1 else None  # None: the state now
        with contextlib.suppress(ckpt.NonFiniteState):
            path = self._save(self.done, steps, log, rng=rng)
            Console(stderr=True).print(f"saved {path} (step {self.done}) before stopping")

    def _loader(self, data: RecipeData, start: int) -> torch.utils.data.DataLoader:
        """This process's micro-batches for steps start+1 .. the stop."""
        rank = self.rt.rank
        return loader(data, self.run, rank, self.seed, start, self._stop_at(),
                      self.spec.train.num_workers, self.rt.pin_memory,
                      resume.process_seed(self.seed, rank, start))

    # ------------------------------------------------------------------ checkpoints, the end

    def _save(self, step: int, steps: StepRunner, log: RunLogger, rng=None):
        """The checkpoint of ``step`` (:func:`checkpoint.save_run`)."""
        return ckpt.save_run(self.rt, self.folder, step, self.run, steps.model,
                             steps.optimizer, steps.scaler, self.noise, log, seed=self.seed,
                             spec_fingerprint=self.spec.fingerprint(), recipe=self.recipe.name,
                             keep=self.spec.train.keep_checkpoints, rng=rng,
                             pair_gradient=steps.previous_gradient,
                             guard=self.guard.state_dict() if self.guard is not None else None)

    def _nonfinite(self, step: int, loss: torch.Tensor | None) -> str:
        """Report a non-finite stop: the loss or gradients of ``step`` (``loss`` given), or the
        state after ``step`` (``loss`` None). Returns the stop's name."""
        last = ckpt.newest_valid(self.folder)
        return self._fail(nonfinite_message(step, None if loss is None else loss.item(),
                                            last and (last.path, last.payload["step"])), step)

    def _fail(self, message: str, step: int) -> str:
        """Say why the run stops at ``step`` and record it (FAILED.json: not retried on a
        restart); returns the stop's name."""
        if self.rt.is_main:
            _error(message)
            self.folder.write_failure(message, EXIT_NONFINITE, step,
                                      os.environ.get("TORCHELASTIC_RUN_ID"))
        return "non-finite"

    def _finish(self, summary: RunSummary) -> None:
        if not self.rt.is_main:
            return
        from date_engine.view.progress import end_notes

        for line in end_notes(summary, self.plan, self.run.step_split, self.config):
            self.console.print(line, soft_wrap=isinstance(line, Text))
        self.folder.write_summary(summary)
        if self.config.draws_curves:
            from date_engine.view.plots import run_curves

            run_curves(self.folder.read_metrics(), self.recipe.metric_name,
                       self.folder.curves_path, self.plan)


def _out_of_time(config: RunConfig, rt: Runtime, log: RunLogger) -> bool:
    """date probe --budget-minutes: the time is up, by rank 0's clock."""
    return bool(config.max_seconds) and rt.is_main and log.train_seconds() >= config.max_seconds


def run_for(config: RunConfig, spec: Any, recipe: Any, data: RecipeData
            ) -> tuple[RunPlan, str | None]:
    """The run the command derived (``config.run``), or — where n is known only now that the
    data is loaded — the one :func:`plan_for` derives here; and a note where the data loaded is
    not the plan's n."""
    if config.run is not None:
        run = RunPlan.from_dict(config.run)
    else:
        run = plan_for(spec, config.batch, devices=config.world_size,
                       micro_batch=config.micro_batch, recipe=recipe,
                       dataset_size=len(data.train))
    if data.note:  # generated samples stand in for the data
        return run, None
    other = spec.recipe if spec.recipe not in (None, recipe.name, config.recipe) else None
    return run, check_dataset_size(run.plan.dataset_size, run.plan.dataset_size_source,
                                   len(data.train), config.batch, spec.train.data_dir,
                                   recipe.name, other)


def noise_scale(run: RunPlan, sharded: bool, config: RunConfig) -> NoiseScale | None:
    """The run's gradient noise scale, measured when a step sees more than one micro-batch
    gradient (more processes or accumulation steps; a measured ramp's stages always do);
    averaged over a fixed share of the run's samples."""
    split, plan = run.step_split, run.plan
    if sharded:  # each process holds a shard of the summed gradient only
        if config.measure_pairs:
            raise DateError("date probe measures the gradient noise scale, which "
                            "train.parallel: fsdp does not; probe with train.parallel: ddp "
                            "(the probe's model fits one device at its small batch).")
        return None
    if run.follows_noise:
        if not config.measure_noise:
            raise DateError("date.ramp: measured follows the noise scale the run measures, "
                            "which this run was asked not to; set date.ramp: planned.")
    elif split.world_size * split.accumulation_steps < 2 or not config.measure_noise:
        return None
    # the plan's samples: what a ramp's LR spans, whatever moves a measured one makes
    return NoiseScale(NoiseScale.half_life_for(plan.total_epochs * plan.dataset_size))


class _StopRequest:
    """SIGINT, SIGTERM and SIGUSR1 (what srun forwards to its tasks, and Slurm sends before a
    job's time limit with --signal) set a flag; the loop stops after the step in flight. A second
    SIGINT stops at once, until :meth:`settle`: from then on (the final checkpoint, the job's last
    collectives) signals are only noted. :meth:`restore` gives the handlers back."""

    def __init__(self) -> None:
        self.signal: str | None = None
        self.settled = False
        self._previous: dict[int, Any] = {}
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread (e.g. inside a test runner's worker thread)
                pass

    def _handle(self, signum, frame) -> None:
        if self.signal is not None and signum == signal.SIGINT and not self.settled:
            raise KeyboardInterrupt
        self.signal = self.signal or signal.Signals(signum).name

    def settle(self) -> None:
        """The loop is over: no signal interrupts what is left to do."""
        self.settled = True

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous = {}


def _error(message: str, rt: Runtime | None = None, code: int = 2) -> int:
    """Say ``message`` as an error on stderr (rank 0's only, given ``rt``); returns ``code``."""
    if rt is None or rt.is_main:
        Console(stderr=True, highlight=False, soft_wrap=True).print(error_line(message))
    return code
