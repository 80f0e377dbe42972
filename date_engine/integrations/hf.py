"""The plan in Hugging Face's ``Trainer`` (``pip install -e '.[hf]'`` in the clone).

::

    from date_engine import baseline_from_hf, plan_for
    from date_engine.integrations.hf import DateTrainer, training_arguments

    spec = baseline_from_hf(args, train_samples=len(train), world_size=1)  # the run that works
    run = plan_for(spec, batch=8192, devices=64)
    scaled = training_arguments(run, base=args)     # the plan's fields; every other field kept
    trainer = DateTrainer(model=model, args=scaled, train_dataset=train, run=run)
    trainer.train()                                  # torchrun --nproc-per-node ... as usual

:class:`DateTrainer` overrides ``create_optimizer`` and ``create_scheduler`` (HF refuses
``optimizers=(...)`` under FSDP): the plan's optimizer and its LR at every optimizer step. At
``train()``, before any step, it refuses settings that would train something else: a global batch
or a length other than the plan's, ``auto_find_batch_size``, and a learning rate, schedule or
warmup other than the plan's (HF's would be replaced without a word).

:class:`DateProbe` is ``date probe`` for a baseline trained in HF's Trainer: a callback that
measures the gradient noise scale during the baseline's own run and writes probe.json, which
``plan_for(spec, batch, probe=...)`` and ``date plan --from args.json --probe`` read::

    args = TrainingArguments(..., per_device_train_batch_size=6, gradient_accumulation_steps=2)
    Trainer(model=model, args=args, train_dataset=train,
            callbacks=[DateProbe("probe.json", train_samples=len(train))]).train()
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any

from date_engine.errors import DateError, expect
from date_engine.files import write_durably
from date_engine.integrations import ADAPTER_RATIOS, hf_arguments, mismatches, require
from date_engine.runplan import RunPlan

transformers = require("transformers", "hf")
require("accelerate", "hf")

__all__ = ["DateProbe", "DateTrainer", "last_checkpoint", "training_arguments"]

_PLAN_ARGS = "training_arguments(run, base=args) sets them"


def training_arguments(run: RunPlan, output_dir: str | None = None, *, base: Any = None,
                       **overrides: Any) -> transformers.TrainingArguments:
    """``TrainingArguments`` with the fields the plan sets (:func:`~date_engine.integrations.
    hf_arguments`: the batch split, steps, LR, schedule and warmup, clipping, the optimizer's
    options), every other field of ``base`` (the baseline's own arguments: logging, saving,
    precision, seeds, ...) or HF's defaults, then ``overrides``; of ``base``'s class
    (``Seq2SeqTrainingArguments`` stays one)."""
    expect(run, RunPlan, "training_arguments: run", "a RunPlan (date_engine.plan_for(...))")
    kept: dict[str, Any] = {}
    if base is not None:
        expect(base, transformers.TrainingArguments, "training_arguments: base",
               "the baseline's TrainingArguments")
        kept = {f.name: getattr(base, f.name) for f in dataclasses.fields(base) if f.init}
        kept.pop("warmup_ratio", None)  # transformers 4: the plan's warmup is in warmup_steps
        kept.update(lr_scheduler_kwargs={}, num_train_epochs=3.0)  # the plan's replace them
    fields = {**kept, **hf_arguments(run), **overrides}
    if output_dir is not None:
        fields["output_dir"] = output_dir
    if fields.get("output_dir") is None:
        raise DateError("training_arguments: give output_dir, or base= arguments that have one.")
    kind = transformers.TrainingArguments if base is None else type(base)  # Seq2Seq's too
    return kind(**fields)


COMPLETE = "date_complete.json"
"""Written last into each checkpoint folder :class:`DateTrainer` saves (the plan's summary): a
folder without it, beside folders with it, was cut short and is never resumed from."""


def last_checkpoint(output_dir: str | os.PathLike) -> str | None:
    """The newest complete ``checkpoint-N`` folder in ``output_dir`` (None if there is none): what
    a requeued job resumes from. Where any folder carries DateTrainer's completion mark, only those
    that do count; otherwise those HF finished (its trainer_state.json is written after the
    weights, optimizer and scheduler). A folder passed over is named in a warning."""
    import warnings

    folder = Path(output_dir)
    if not folder.is_dir():
        return None
    found = sorted((int(m.group(1)), p) for p in folder.iterdir()
                   if p.is_dir() and (m := re.fullmatch(r"checkpoint-(\d+)", p.name)))
    mark = COMPLETE if any((p / COMPLETE).is_file() for _, p in found) else "trainer_state.json"
    for _, path in reversed(found):
        if (path / mark).is_file():
            return str(path)
        warnings.warn(f"{path}: cut short while it was saved (no {mark}); resuming from an "
                      f"earlier checkpoint.", stacklevel=2)
    return None


class DateTrainer(transformers.Trainer):
    """``transformers.Trainer`` that trains with a date_engine plan: ``run=`` a RunPlan (from
    ``date_engine.plan_for``). ``date``: DATE's per-layer ratios over the base optimizer (True)
    or the base optimizer alone (False); by default the adapters' measured choice,
    :data:`~date_engine.integrations.ADAPTER_RATIOS` (docs/integrations.md).

    Before the first step it refuses, in one sentence naming both values, every argument that
    contradicts the plan (:meth:`check_plan`), and a checkpoint saved under another plan, unless
    ``replan=True``: then the run continues at the step of this plan that has trained on as many
    samples. ``resume_from_checkpoint=True`` takes the newest complete checkpoint
    (:func:`last_checkpoint`); each checkpoint it saves ends with a completion mark."""

    def __init__(self, *args: Any, run: RunPlan | None = None, date: bool | None = None,
                 replan: bool = False, **kwargs: Any) -> None:
        if "plan" in kwargs:
            raise DateError("DateTrainer takes the RunPlan as run= (plan= was its old name); "
                            "write DateTrainer(..., run=run).")
        expect(run, RunPlan, "DateTrainer: run", "a RunPlan (date_engine.plan_for(...))")
        expect(date, (bool, type(None)), "DateTrainer: date", "True, False or None")
        expect(replan, bool, "DateTrainer: replan", "True or False")
        if kwargs.get("optimizers", (None, None)) != (None, None):
            raise DateError("DateTrainer builds the plan's optimizer and scheduler; leave "
                            "optimizers= out.")
        self.run, self.use_date, self.replan = run, ADAPTER_RATIOS if date is None else date, \
            replan
        self._replanned_step: int | None = None
        super().__init__(*args, **kwargs)

    def create_optimizer(self, model: Any = None) -> Any:
        from date_engine.optim.build import optimizer_for

        if self.optimizer is None:
            self.optimizer = optimizer_for(model if model is not None else self.model, self.run,
                                           date=self.use_date)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        from date_engine.schedule import scheduler_for

        if self.lr_scheduler is None:
            self.lr_scheduler = scheduler_for(optimizer or self.optimizer, self.run,
                                              replan=self.replan)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def train(self, resume_from_checkpoint: str | bool | None = None, *args: Any,
              **kwargs: Any) -> Any:
        self.check_plan()
        if resume_from_checkpoint is True:
            resume_from_checkpoint = last_checkpoint(self.args.output_dir)
            if resume_from_checkpoint is None:
                raise DateError(f"resume_from_checkpoint=True: {self.args.output_dir} holds no "
                                f"complete checkpoint; start the run with "
                                f"resume_from_checkpoint=None.")
        if resume_from_checkpoint:
            self._replanned_step = self._check_checkpoint(str(resume_from_checkpoint))
            if self._replanned_step is not None and \
                    not hasattr(transformers.Trainer, "_init_training_state"):
                raise DateError(f"replan=True moves HF's step count through Trainer."
                                f"_init_training_state, which transformers "
                                f"{transformers.__version__} lacks; upgrade transformers.")
        return super().train(resume_from_checkpoint or None, *args, **kwargs)

    def _check_checkpoint(self, path: str) -> int | None:
        """Refuse a checkpoint saved under another plan (unless ``replan``); the step of this
        plan the run continues at where it was replanned, else None."""
        import torch

        from date_engine.schedule import resumed_step

        state_file = Path(path) / "scheduler.pt"
        if not state_file.is_file():
            raise DateError(f"{path}: no scheduler.pt, so not a checkpoint HF's Trainer saved "
                            f"whole; give a checkpoint-N folder it wrote.")
        state = torch.load(state_file, weights_only=True)
        step = resumed_step(self.run.plan, state, self.replan)
        return None if step == state["last_epoch"] else step

    def _init_training_state(self, max_steps: int, steps_per_epoch: int, *rest: Any) -> Any:
        epochs, skipped = super()._init_training_state(max_steps, steps_per_epoch, *rest)
        step = self._replanned_step
        if step is None:
            return epochs, skipped
        # continued under a new plan: at its step that has trained on as many samples, the
        # data's position counted in its batches
        self.state.global_step = step
        skipped = 0 if self.args.ignore_data_skip else \
            (step % steps_per_epoch) * self.args.gradient_accumulation_steps
        return step // steps_per_epoch, skipped

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            folder = Path(self._get_output_dir(trial)) / f"checkpoint-{self.state.global_step}"
            write_durably(folder / COMPLETE, json.dumps(self.run.plan.summary()))

    def check_plan(self) -> None:
        """Refuse, in one sentence with the values to set, settings that train another batch,
        another number of steps, another LR curve, optimizer or clipping than the plan's."""
        a = self.args
        if a.auto_find_batch_size:
            raise DateError("auto_find_batch_size halves the per-device batch without raising "
                            "gradient_accumulation_steps, so the global batch would leave the "
                            "plan's; set auto_find_batch_size=False and give the micro-batch "
                            "that fits (date plan --devices N --micro-batch M prints the "
                            "accumulation that keeps the batch).")
        want = hf_arguments(self.run)
        wrong = mismatches(self.run, a.world_size, a.per_device_train_batch_size,
                           a.gradient_accumulation_steps, a.max_steps)
        if wrong:
            raise DateError(
                f"the Trainer's settings do not train the plan: {'; '.join(wrong)}; set "
                f"per_device_train_batch_size={want['per_device_train_batch_size']}, "
                f"gradient_accumulation_steps={want['gradient_accumulation_steps']} and "
                f"max_steps={want['max_steps']} on {self.run.split.world_size} processes "
                f"({_PLAN_ARGS}).")
        if contradictions := _lr_contradictions(a, want):
            raise DateError(f"the Trainer's arguments contradict the plan's LR curve, which "
                            f"DateTrainer trains instead: {'; '.join(contradictions)} "
                            f"({_PLAN_ARGS}).")
        if contradictions := _optimizer_contradictions(a, self.run, want):
            raise DateError(f"the Trainer's arguments contradict the plan's optimizer or "
                            f"clipping: {'; '.join(contradictions)} ({_PLAN_ARGS}).")


def _lr_contradictions(args: Any, want: dict[str, Any]) -> list[str]:
    """The LR settings of ``args`` that differ from the plan's (``want``), as 'name X (the plan:
    Y)'. A warmup given as a ratio counts as HF counts it."""
    out = []
    if not math.isclose(args.learning_rate, want["learning_rate"], rel_tol=1e-9):
        out.append(f"learning_rate {args.learning_rate!r} (the plan: {want['learning_rate']!r})")
    kind = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    if kind != want["lr_scheduler_type"]:
        out.append(f"lr_scheduler_type {kind!r} (the plan: {want['lr_scheduler_type']!r})")
    warmup = args.get_warmup_steps(want["max_steps"])
    if warmup != want["warmup_steps"]:
        out.append(f"{warmup} warmup steps (the plan: {want['warmup_steps']})")
    return out


def _optimizer_contradictions(args: Any, run: RunPlan, want: dict[str, Any]) -> list[str]:
    """The arguments of ``args`` that HF's loop or optimizer would use against the plan, as
    'name X (the plan: Y)': the clipping (HF's loop clips with max_grad_norm), the optimizer
    named by ``optim`` where it is not HF's default, β, ε, λ and the schedule's kwargs."""
    from date_engine.baselines import hf_optimizer_name

    defaults = {f.name: f.default for f in dataclasses.fields(transformers.TrainingArguments)}
    options, name = run.plan.optimizer.options, run.plan.optimizer.name
    out = []

    def differs(field: str, planned: Any, shown: Any = None) -> None:
        given = getattr(args, field)
        if not math.isclose(float(given), float(planned), rel_tol=1e-9, abs_tol=0.0):
            out.append(f"{field} {given!r} (the plan: {repr(planned) if shown is None else shown})")

    differs("max_grad_norm", want["max_grad_norm"],
            None if want["max_grad_norm"] else "0.0, no clipping")
    optim = str(getattr(args.optim, "value", args.optim))
    default = str(getattr(defaults["optim"], "value", defaults["optim"]))
    theirs = hf_optimizer_name(optim)
    same = theirs == name or (theirs == "adamw" and name == "adam"
                              and not options.get("weight_decay"))
    if optim != default and not same:
        out.append(f"optim {optim!r} (the plan trains {name}, which DateTrainer builds)")
    betas = options.get("betas") or (defaults["adam_beta1"], defaults["adam_beta2"])
    differs("adam_beta1", betas[0])
    differs("adam_beta2", betas[1])
    differs("adam_epsilon", options.get("eps", defaults["adam_epsilon"]))
    differs("weight_decay", options.get("weight_decay", 0.0))
    kwargs = args.lr_scheduler_kwargs or {}
    if isinstance(kwargs, str):
        kwargs = json.loads(kwargs or "{}")
    if dict(kwargs) != want.get("lr_scheduler_kwargs", {}):
        out.append(f"lr_scheduler_kwargs {dict(kwargs)!r} (the plan: "
                   f"{want.get('lr_scheduler_kwargs', {})!r})")
    return out


class DateProbe(transformers.TrainerCallback):
    """Measures the gradient noise scale of the baseline HF's Trainer runs, and writes
    ``path`` (probe.json) when training ends: the baseline is read from the Trainer's own
    arguments over ``train_samples`` samples (:func:`~date_engine.baseline_from_hf`), so the
    probe matches the plans made from them. Each process needs two or more micro-batches per
    step (``gradient_accumulation_steps`` ≥ 2: split the same batch). ``share``: stop the run
    after that share of its steps, as ``date probe`` does (default: measure the whole run). The
    probe has no LR check (``date probe`` trains a second run for it; docs/noise.md)."""

    def __init__(self, path: str, *, train_samples: int, share: float | None = None) -> None:
        from date_engine.integrations.probing import check_probe_args

        check_probe_args(path, share)
        expect(train_samples, int, "DateProbe: train_samples", "the training samples (int)")
        self.path, self.train_samples, self.share = path, train_samples, share
        self.meter: Any = None
        self.probe: Any = None
        """The probe written (a :class:`~date_engine.probe.Probe`), None before the end or
        where too few steps were measured."""

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        from accelerate.state import GradientState

        from date_engine.baselines import baseline_from_hf
        from date_engine.integrations.probing import InRunProbe
        from date_engine.planning import plan_for

        if getattr(args, "fsdp", None) or getattr(args, "deepspeed", None):
            raise DateError("DateProbe measures whole gradients, which FSDP and DeepSpeed shard; "
                            "train the baseline it probes under DDP or on one process.")
        spec = baseline_from_hf(args, self.train_samples, args.world_size)
        run = plan_for(spec, batch=spec.baseline.batch_size, devices=args.world_size,
                       micro_batch=args.per_device_train_batch_size)
        gradients = GradientState()  # HF's loop sets sync_gradients for each micro-batch
        self.meter = InRunProbe(spec, run, self.path, lambda: gradients.sync_gradients,
                                share=self.share, run_dir=args.output_dir or "")
        self.meter.attach(model)
        self._micro_batches = 0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._micro_batches = 0

    def on_substep_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._micro_batches += 1

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self.meter.end_step(self._micro_batches + 1):
            control.should_training_stop = True

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None,
               **kwargs: Any) -> None:
        if logs and "loss" in logs:
            self.meter.loss(logs["loss"])

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.meter.detach()
        self.probe = self.meter.write()
