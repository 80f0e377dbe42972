"""The training loop of ``date scale``: one per process, identical on every process.

Per optimizer step i = 1..I of the plan: set the learning rate to lr(i); run ``accumulation_steps``
micro-batches forward and backward (DDP's ``no_sync`` on all but the last, so gradients are
all-reduced once per step); one DATE step; one agreement among the processes on whether to stop
(non-finite loss, SIGINT/SIGTERM). Checkpoints at the plan's interval and at the end; evaluation at
the end (and every ``eval_every`` steps).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import shutil
import signal
import tempfile
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from rich.console import Console

from date_engine.errors import DataMissing, DateError
from date_engine.optim.build import build_optimizer
from date_engine.plan import Plan, derive_plan
from date_engine.recipes import DataOptions, Recipe, RecipeData, get_recipe
from date_engine.schedule import set_lr
from date_engine.spec import Spec, parse_spec
from date_engine.train import checkpoint as ckpt
from date_engine.train.config import RunConfig
from date_engine.train.reporting import MetricsLog, ProgressView
from date_engine.train.runtime import Runtime, setup, teardown
from date_engine.train.sampling import MicroBatchSampler

__all__ = ["EXIT_NONFINITE", "Summary", "run"]

EXIT_NONFINITE = 3
DRY_RUN_MICRO_BATCH, DRY_RUN_ACCUMULATION, DRY_RUN_STEPS = 2, 2, 2


@dataclass
class Summary:
    recipe: str
    steps: int
    total_steps: int
    stopped_by: str | None
    """None when the run finished; else what stopped it: 'max-steps', 'SIGINT', 'SIGTERM'."""
    metric_name: str
    metric: float | None
    wall_time_s: float
    samples_per_s: float
    checkpoint: str | None
    plan: dict[str, Any]


def run(config: RunConfig) -> int:
    """Train as one process of the job; returns the process's exit code."""
    runtime = setup(config.precision, config.backend, config.compile, force_cpu=config.dry_run)
    console = Console(stderr=False, highlight=False) if runtime.is_main else Console(quiet=True)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        return _Run(config, runtime, console).train()
    except DateError as exc:
        if runtime.is_main:
            err.print(f"[red]error:[/] {exc}")
        return 2
    finally:
        teardown(runtime)


def resolve_micro_batch(explicit: int | None, spec: Spec, recipe: Recipe, batch: int,
                        world_size: int) -> int | None:
    """The command line's, else the spec's micro-batch (both checked by the plan), else the
    recipe's default fitted to the batch: the largest divisor of each process's share not above it."""
    if explicit is not None:
        return explicit
    if spec.train.micro_batch is not None:
        return spec.train.micro_batch
    if batch % world_size:
        return None  # derive_plan explains what would divide
    share = batch // world_size
    return max(d for d in range(1, min(share, recipe.default_micro_batch) + 1) if share % d == 0)


def plan_for(config: RunConfig, spec: Spec, recipe: Recipe, dataset_size: int | None = None) -> Plan:
    """The plan of this run, from the spec, the recipe's data set size and the command line."""
    n = spec.baseline.dataset_size or recipe.dataset_size or dataset_size
    if n is not None and spec.baseline.dataset_size is None:
        spec = spec.model_copy(update={"baseline": spec.baseline.model_copy(update={"dataset_size": n})})
    micro = resolve_micro_batch(config.micro_batch, spec, recipe, config.batch, config.world_size)
    return derive_plan(spec, config.batch, world_size=config.world_size, micro_batch=micro)


class _StopRequest:
    """SIGINT/SIGTERM set a flag; the loop stops after the step in flight. A second SIGINT stops at once."""

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


class _Run:
    def __init__(self, config: RunConfig, runtime: Runtime, console: Console) -> None:
        self.config, self.rt, self.console = config, runtime, console
        self.spec = parse_spec(config.spec, source=config.spec_path)
        self.recipe = get_recipe(config.recipe)
        self.options = self.recipe.parse_options(self.spec.model)
        self.seed = self.spec.train.seed
        self.restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
        self._window: tuple[float, int] = (0.0, 0)  # loss sum and steps since the last log line
        # training time (evaluations left out) of earlier attempts, and this attempt's clock
        self._time_before, self._clock_start, self._eval_seconds = 0.0, time.perf_counter(), 0.0

    # ------------------------------------------------------------------ setup

    def train(self) -> int:
        cfg, rt = self.config, self.rt
        for note in rt.notes:
            self.console.print(f"[yellow]note:[/] {note}", soft_wrap=True)
        if self.restart and (code := self._earlier_failure()) is not None:
            return code
        _seed_everything(self.seed)
        data = self._data()
        plan = plan_for(cfg, self.spec, self.recipe, len(data.train))
        self._check_dataset_size(plan, data)
        run_plan, out = plan, Path(cfg.output_dir)
        if cfg.dry_run:
            run_plan = dataclasses.replace(
                plan, micro_batch=DRY_RUN_MICRO_BATCH, accumulation_steps=DRY_RUN_ACCUMULATION,
                target_batch=DRY_RUN_MICRO_BATCH * DRY_RUN_ACCUMULATION * rt.world_size)
            out = Path(tempfile.mkdtemp(prefix="date-dry-run-")) if rt.is_main else out
        self.plan, self.run_plan = plan, run_plan
        self.out = self._shared_path(out)
        last = DRY_RUN_STEPS if cfg.dry_run else plan.total_iterations
        stop_at = min(last, cfg.max_steps) if cfg.max_steps else last
        self._announce(data)

        torch.manual_seed(self.seed)  # the same initial weights on every process
        model = self.recipe.build_model(self.options).to(rt.device)
        optimizer = build_optimizer(model.named_parameters(), self.spec.baseline.optimizer,
                                    self.spec.date.layer_ratio, run_plan.peak_lr)
        scaler = rt.grad_scaler()
        start, payload = self._resume(model, optimizer, scaler)
        if payload is None:
            _seed_everything(self.seed + 1 + rt.rank)  # dropout etc. differ per process
        wrapped = model
        if rt.distributed:
            wrapped = torch.nn.parallel.DistributedDataParallel(
                model, device_ids=[rt.device] if rt.device.type == "cuda" else None)
        if rt.compile:
            wrapped = torch.compile(wrapped)
        try:
            summary = self._loop(model, wrapped, optimizer, scaler, data, start, stop_at, last)
        finally:
            if cfg.dry_run and rt.is_main:
                shutil.rmtree(self.out, ignore_errors=True)
        if summary is None:
            return EXIT_NONFINITE
        self._report(summary)
        if rt.distributed:
            dist.barrier()  # leave together: no process tears down while another still talks
        if summary.stopped_by in ("SIGINT", "SIGTERM"):
            return 128 + signal.Signals[summary.stopped_by].value
        return 0

    def _data(self) -> RecipeData:
        options = DataOptions(data_dir=self.spec.train.data_dir, seed=self.seed)
        try:
            return self.recipe.build_data(options, self.options)
        except DataMissing as exc:
            if not self.config.dry_run:
                raise
            data = self.recipe.build_data(dataclasses.replace(options, synthetic=True), self.options)
            data.note = f"{exc} The dry run steps on generated samples of the recipe's shapes instead."
            return data

    def _check_dataset_size(self, plan: Plan, data: RecipeData) -> None:
        if plan.dataset_size != len(data.train) and self.rt.is_main and not data.note:
            self.console.print(
                f"[yellow]note:[/] the plan counts epochs of {plan.dataset_size} samples "
                f"(baseline.dataset_size) but the training set holds {len(data.train)}.")

    def _shared_path(self, path: Path) -> Path:
        """Rank 0's choice of folder (a dry run's temporary one), known to every process."""
        if not self.rt.distributed:
            return path
        box = [str(path)]
        dist.broadcast_object_list(box, src=0)
        return Path(box[0])

    def _announce(self, data: RecipeData) -> None:
        if not self.rt.is_main:
            return
        from date_engine.plan_view import render_plan

        cfg = self.config
        title = f"date scale {cfg.spec_path} — recipe {self.recipe.name}"
        self.console.print(render_plan(self.plan, title, chart_width=min(self.console.width - 14, 72)))
        if data.note:
            self.console.print(f"[yellow]note:[/] {data.note}")
        if cfg.dry_run:
            p = self.run_plan
            self.console.print(
                f"[bold]dry run:[/] the plan above is valid; now {DRY_RUN_STEPS} optimizer steps of "
                f"{p.target_batch} = {p.micro_batch} × {p.world_size} × {p.accumulation_steps} on the "
                f"CPU ({self.rt.backend or 'one process'}), writing only to {self.out}.")
            return
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "spec.yaml").write_text(yaml.safe_dump(
            self.spec.model_dump(mode="json", exclude_none=True), sort_keys=False))
        cfg.write(self.out / "config.json")
        (self.out / "plan.json").write_text(json.dumps(self.plan.to_dict(), indent=2))

    # ------------------------------------------------------------------ resume

    def _earlier_failure(self) -> int | None:
        """After a restart by torchrun: a deterministic failure (a non-finite loss) would recur."""
        marker = Path(self.config.output_dir) / "FAILED.json"
        if not marker.exists():
            return None
        record = json.loads(marker.read_text())
        if record.get("run_id") != os.environ.get("TORCHELASTIC_RUN_ID"):
            return None
        if self.rt.is_main:
            Console(stderr=True).print(f"[red]error:[/] {record['message']} (not retried on restart)")
        return record["exit_code"]

    def _resume(self, model, optimizer, scaler) -> tuple[int, dict | None]:
        cfg, rt = self.config, self.rt
        wanted = cfg.resume or self.restart > 0
        found = ckpt.newest_valid(self.out) if not cfg.dry_run else None
        if not wanted:
            if found is not None:
                raise DateError(
                    f"{self.out} already holds checkpoints ({found[0].name}); pass --resume to "
                    "continue that run, or --output-dir to start a new one.")
            return 0, None
        if found is None:
            if cfg.resume and not self.restart:
                raise DateError(f"--resume: no checkpoint in {ckpt.checkpoint_dir(self.out)}; "
                                "run without --resume to start from the beginning.")
            return 0, None
        path, payload = found
        plan = self.run_plan.to_dict()
        mismatch = ckpt.describe_mismatch(payload["plan"], plan, payload["spec_fingerprint"],
                                          self.spec.fingerprint())
        if mismatch and not cfg.force_replan:
            raise ckpt.refuse(path, mismatch)
        model.load_state_dict(payload["model"])
        optimizer.load_state_dict(payload["optimizer"])
        if scaler is not None and payload.get("scaler"):
            scaler.load_state_dict(payload["scaler"])
        if mismatch:  # --force-replan: continue after as many samples under the new plan
            start = payload["samples_seen"] // self.run_plan.target_batch
            _seed_everything(self.seed + 1 + rt.rank + 7919 * start)
            self.console.print(f"[yellow]note:[/] --force-replan: {mismatch}; continuing its weights "
                               f"at step {start} of the new plan ({payload['samples_seen']} samples "
                               "seen).", soft_wrap=True)
        else:
            start = payload["step"]
            mine = payload["ranks"][rt.rank]
            ckpt.restore_rng(mine["rng"])
            self._window = tuple(mine["log_window"])
            self._time_before = float(payload.get("train_seconds", 0.0))
        self.console.print(f"resuming from {path} (step {payload['step']})", soft_wrap=True)
        return start, payload

    def _save(self, step: int, model, optimizer, scaler, rng=None) -> Path | None:
        """Write the checkpoint of ``step`` (collective: every process sends its RNG states)."""
        rt = self.rt
        states = [None] * rt.world_size if rt.distributed else None
        # what each process alone knows: its random states and the losses since the last log line
        mine = {"rng": rng if rng is not None else ckpt.capture_rng(), "log_window": self._window}
        if rt.distributed:
            dist.all_gather_object(states, mine)
        else:
            states = [mine]
        if not rt.is_main:
            return None
        payload = {
            "format": ckpt.FORMAT,
            "step": step,
            "samples_seen": step * self.run_plan.target_batch,
            "train_seconds": self._train_seconds(),
            "sampler": {"samples_per_process": step * self.run_plan.micro_batch
                        * self.run_plan.accumulation_steps, "seed": self.seed},
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scaler": scaler.state_dict() if scaler is not None else None,
            "ranks": states,
            "plan": self.run_plan.to_dict(),
            "spec_fingerprint": self.spec.fingerprint(),
            "recipe": self.recipe.name,
        }
        return ckpt.save_atomic(self.out, step, payload, self.spec.train.keep_checkpoints)

    # ------------------------------------------------------------------ the loop

    def _loop(self, model, wrapped, optimizer, scaler, data: RecipeData, start: int, stop_at: int,
              last: int) -> Summary | None:
        cfg, rt, plan, train = self.config, self.rt, self.run_plan, self.spec.train
        accumulation = plan.accumulation_steps
        sampler = MicroBatchSampler(len(data.train), plan.micro_batch, rt.world_size, rt.rank,
                                    self.seed, start=start * plan.micro_batch * accumulation,
                                    count=max(stop_at - start, 0) * accumulation)
        loader = torch.utils.data.DataLoader(
            data.train, batch_sampler=sampler, collate_fn=data.collate,
            num_workers=train.num_workers, pin_memory=rt.device.type == "cuda",
            generator=torch.Generator().manual_seed(self.seed * 1_000_003 + rt.rank * 7919 + start))
        checkpoint_every = 1 if cfg.dry_run else train.checkpoint_every
        checkpoint_seconds = train.checkpoint_minutes * 60
        last_save = time.monotonic()
        metrics = MetricsLog(self.out, resume_step=start if (start or cfg.resume) else None) \
            if rt.is_main else None
        view = ProgressView(self.console, last, start) if rt.is_main else None
        stop = _StopRequest()
        model.train()
        batches = iter(loader)
        window_start, window_steps = time.perf_counter(), self._window[1]
        loss_sum = torch.tensor(self._window[0], device=rt.device)
        run_start, checkpoint_path, stopped_by = time.perf_counter(), None, None
        self._clock_start, self._eval_seconds = run_start, 0.0
        done = start  # the last step whose optimizer update is complete
        saved = start
        try:
            for step in range(start + 1, stop_at + 1):
                rng_before = ckpt.capture_rng(numpy=False) if not rt.distributed else None
                lr = set_lr(optimizer, self.plan, step)
                step_loss = torch.zeros((), device=rt.device)
                for micro in range(accumulation):
                    batch = _to_device(next(batches), rt.device)
                    sync = micro == accumulation - 1 or not rt.distributed
                    with (nullcontext() if sync else wrapped.no_sync()), rt.autocast():
                        loss = self.recipe.loss(wrapped, batch, data) / accumulation
                    (scaler.scale(loss) if scaler is not None else loss).backward()
                    step_loss += loss.detach().float()
                logging = step % train.log_every == 0 or step == last
                grad_norm = None
                if scaler is not None:
                    scaler.unscale_(optimizer)
                if train.grad_clip is not None or logging:
                    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                                               train.grad_clip or math.inf)
                # the one host synchronisation per step: do all processes go on, and is it time to
                # save? (Rank 0's clock decides that, so that every process saves the same step.)
                due = checkpoint_every is None and rt.is_main and \
                    time.monotonic() - last_save >= checkpoint_seconds
                flags = torch.cat([
                    (~torch.isfinite(step_loss)).float().view(1),
                    torch.tensor([float(stop.signal is not None), float(due)], device=rt.device)])
                if rt.distributed:
                    dist.all_reduce(flags, op=dist.ReduceOp.MAX)
                nonfinite, stopping, save_due = (bool(v) for v in flags.tolist())
                if nonfinite:
                    self._nonfinite(step, step_loss)
                    if metrics is not None:
                        metrics.close()
                    return None
                done = None  # inside the update: no consistent state to save until it ends
                if scaler is not None:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                done = step
                loss_sum += step_loss
                window_steps += 1
                epoch = plan.epoch(step)
                if logging:
                    record = self._log_record(step, epoch, lr, loss_sum, window_steps,
                                              window_start, grad_norm, optimizer)
                    if rt.is_main:
                        metrics.write(record)
                        view.logged(record)
                        view.step(step, loss=record["loss"], rate=record["samples_per_s"])
                    loss_sum.zero_()
                    window_start, window_steps = time.perf_counter(), 0
                if view is not None:
                    view.step(step, epoch=epoch, lr=lr)
                if train.eval_every and step % train.eval_every == 0 and step != last:
                    self._eval_and_log(model, data, step, metrics)
                if stopping:
                    stopped_by = stop.signal or "signal"
                    break
                if step != stop_at and (save_due or checkpoint_every and step % checkpoint_every == 0):
                    self._window = (loss_sum.item(), window_steps)
                    checkpoint_path, saved = self._save(step, model, optimizer, scaler), step
                    last_save = time.monotonic()
        except BaseException:
            # Anything unexpected (an exception, a second Ctrl-C): keep the work of the steps
            # completed since the last checkpoint. Only a lone process can: the others of a job
            # may be stuck in a collective.
            if not rt.distributed and done is not None and done > saved:
                path = self._save(done, model, optimizer, scaler, rng=rng_before)
                Console(stderr=True).print(f"saved {path} (step {done}) before stopping")
            raise
        finally:
            stop.restore()
            if view is not None:
                view.close()
        step = done
        if stopped_by is None and stop_at < last:
            stopped_by = "max-steps"
        self._window = (loss_sum.item(), window_steps)
        checkpoint_path = self._save(step, model, optimizer, scaler)
        if cfg.dry_run and rt.is_main:
            _verify_checkpoint(checkpoint_path, step)
        metric = None
        if step == last and data.eval is not None:
            metric = self._eval_and_log(model, data, step, metrics)
        if metrics is not None:
            metrics.close()
        wall = time.perf_counter() - run_start
        samples = (step - start) * plan.target_batch
        return Summary(self.recipe.name, step, last, stopped_by, self.recipe.metric_name, metric,
                       wall, samples / wall if wall > 0 else 0.0,
                       str(checkpoint_path) if checkpoint_path else None, self.plan.to_dict())

    def _log_record(self, step, epoch, lr, loss_sum, window_steps, window_start, grad_norm,
                    optimizer) -> dict[str, Any]:
        rt = self.rt
        loss = loss_sum / max(window_steps, 1)
        if rt.distributed:
            dist.all_reduce(loss)
            loss = loss / rt.world_size
        elapsed = time.perf_counter() - window_start
        record: dict[str, Any] = {
            "step": step, "epoch": round(epoch, 6), "lr": lr, "loss": loss.item(),
            "grad_norm": grad_norm.item() if grad_norm is not None else None,
            "samples_per_s": window_steps * self.run_plan.target_batch / elapsed if elapsed > 0 else 0.0,
            "time_s": round(self._train_seconds(), 3),
        }
        ratios = getattr(optimizer, "last_ratios", None)
        if ratios is not None and ratios.numel():
            lo, mid, hi = torch.stack([ratios.min(), ratios.median(), ratios.max()]).tolist()
            record.update(ratio_min=lo, ratio_median=mid, ratio_max=hi)
        return record

    def _train_seconds(self) -> float:
        """Seconds spent training so far, over every attempt of the run, evaluations left out:
        the clock of time-to-accuracy."""
        return self._time_before + time.perf_counter() - self._clock_start - self._eval_seconds

    @torch.no_grad()
    def _eval_and_log(self, model, data: RecipeData, step: int, metrics: MetricsLog | None) -> float:
        rt = self.rt
        began = time.perf_counter()
        train_seconds = self._train_seconds()
        model.eval()
        shard = list(range(rt.rank, len(data.eval), rt.world_size))
        loader = torch.utils.data.DataLoader(
            data.eval, batch_sampler=torch.utils.data.BatchSampler(shard, 256, drop_last=False),
            collate_fn=data.collate, generator=torch.Generator().manual_seed(0))
        totals: dict[str, float] = {}
        for batch in loader:
            with rt.autocast():
                stats = self.recipe.evaluate(model, _to_device(batch, rt.device), data)
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + float(value)
        if rt.distributed:
            keys = sorted(totals)
            values = torch.tensor([totals[k] for k in keys], dtype=torch.float64, device=rt.device)
            dist.all_reduce(values)
            totals = dict(zip(keys, values.tolist()))
        model.train()
        value = self.recipe.metric(totals)
        if metrics is not None:
            metrics.write({"step": step, "eval": {self.recipe.metric_name: value},
                           "time_s": round(train_seconds, 3)})
        self._eval_seconds += time.perf_counter() - began
        return value

    def _nonfinite(self, step: int, step_loss) -> None:
        last = ckpt.newest_valid(self.out)
        where = f"the last good checkpoint is {last[0]} (step {last[1]['step']})" if last else \
            "no checkpoint was written before it"
        message = (f"the loss became non-finite ({step_loss.item()}) at step {step}; stopped "
                   f"without taking that step, and {where}. Lower baseline.lr, set train.grad_clip, "
                   "or check the data, then resume with --resume.")
        if self.rt.is_main:
            Console(stderr=True, highlight=False, soft_wrap=True).print(f"[red]error:[/] {message}")
            if not self.config.dry_run:
                (Path(self.config.output_dir) / "FAILED.json").write_text(json.dumps({
                    "message": message, "exit_code": EXIT_NONFINITE, "step": step,
                    "run_id": os.environ.get("TORCHELASTIC_RUN_ID")}))

    def _report(self, summary: Summary) -> None:
        if not self.rt.is_main:
            return
        from rich.table import Table

        table = Table(title="Summary", title_justify="left", show_header=False)
        metric = "—" if summary.metric is None else f"{summary.metric:.4g}"
        rows = [
            ("recipe", summary.recipe),
            ("steps", f"{summary.steps} of {summary.total_steps}"
                      + (f" (stopped by {summary.stopped_by})" if summary.stopped_by else "")),
            (summary.metric_name, metric),
            ("wall time", f"{summary.wall_time_s:.1f} s"),
            ("samples/s", f"{summary.samples_per_s:.0f}"),
            ("plan", f"batch {self.plan.target_batch} = {self.plan.micro_batch} × "
                     f"{self.plan.world_size} × {self.plan.accumulation_steps}, peak lr "
                     f"{self.plan.peak_lr:.4g}, warmup {self.plan.warmup_epochs:g} "
                     f"epoch{'' if self.plan.warmup_epochs == 1 else 's'}"),
            ("checkpoint", summary.checkpoint or "—"),
        ]
        for row in rows:
            table.add_row(*row)
        self.console.print(table)
        if summary.stopped_by and self.config.rerun_command and not self.config.dry_run:
            self.console.print(f"continue with: {self.config.rerun_command} --resume", soft_wrap=True)
        if not self.config.dry_run:
            (Path(self.config.output_dir) / "summary.json").write_text(
                json.dumps(dataclasses.asdict(summary), indent=2))


def _to_device(batch, device: torch.device):
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(b, device) for b in batch)
    if isinstance(batch, dict):
        return {k: _to_device(v, device) for k, v in batch.items()}
    return batch


def _seed_everything(seed: int) -> None:
    torch.manual_seed(seed)
    random.seed(seed)
    import sys

    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed(seed % 2**32)


def _verify_checkpoint(path: Path | None, step: int) -> None:
    """A dry run reads back what it wrote."""
    found = ckpt.newest_valid(path.parent.parent) if path is not None else None
    if found is None or found[1]["step"] != step:
        raise DateError(f"dry run: the checkpoint written at step {step} could not be read back")
