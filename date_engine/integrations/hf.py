"""The plan in Hugging Face's ``Trainer`` (``pip install -e '.[hf]'`` in the clone).

::

    from date_engine import baseline_from_hf, plan_for
    from date_engine.integrations.hf import DateTrainer, training_arguments

    spec = baseline_from_hf(args, train_samples=len(train), world_size=1)  # the run that works
    run = plan_for(spec, batch=8192, devices=64)
    scaled = training_arguments(run, base=args)     # the plan's fields; every other field kept
    trainer = DateTrainer(model=model, args=scaled, train_dataset=train, plan=run)
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
import math
from typing import Any

from date_engine.errors import DateError, expect
from date_engine.integrations import ADAPTER_RATIOS, hf_arguments, mismatches, require
from date_engine.runplan import RunPlan

transformers = require("transformers", "hf")
require("accelerate", "hf")

__all__ = ["DateProbe", "DateTrainer", "training_arguments"]

_PLAN_ARGS = "training_arguments(run, base=args) sets them"


def training_arguments(run: RunPlan, output_dir: str | None = None, *, base: Any = None,
                       **overrides: Any) -> transformers.TrainingArguments:
    """``TrainingArguments`` with the fields the plan sets (:func:`~date_engine.integrations.
    hf_arguments`: the batch split, steps, LR, schedule and warmup, clipping, the optimizer's
    options), every other field of ``base`` (the baseline's own arguments: logging, saving,
    precision, seeds, ...) or HF's defaults, then ``overrides``."""
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
    return transformers.TrainingArguments(**fields)


class DateTrainer(transformers.Trainer):
    """``transformers.Trainer`` that trains with a date_engine plan: ``plan=`` a RunPlan (from
    ``date_engine.plan_for``). ``date``: DATE's per-layer ratios over the base optimizer (True)
    or the base optimizer alone (False); by default the adapters' measured choice,
    :data:`~date_engine.integrations.ADAPTER_RATIOS` (docs/integrations.md)."""

    def __init__(self, *args: Any, plan: RunPlan, date: bool | None = None,
                 **kwargs: Any) -> None:
        expect(plan, RunPlan, "DateTrainer: plan", "a RunPlan (date_engine.plan_for(...))")
        expect(date, (bool, type(None)), "DateTrainer: date", "True, False or None")
        if kwargs.get("optimizers", (None, None)) != (None, None):
            raise DateError("DateTrainer builds the plan's optimizer and scheduler; leave "
                            "optimizers= out.")
        self.plan, self.use_date = plan, ADAPTER_RATIOS if date is None else date
        super().__init__(*args, **kwargs)

    def create_optimizer(self, model: Any = None) -> Any:
        from date_engine.api import optimizer_for

        if self.optimizer is None:
            self.optimizer = optimizer_for(model if model is not None else self.model, self.plan,
                                           date=self.use_date)
        return self.optimizer

    def create_scheduler(self, num_training_steps: int, optimizer: Any = None) -> Any:
        from date_engine.api import scheduler_for

        if self.lr_scheduler is None:
            self.lr_scheduler = scheduler_for(optimizer or self.optimizer, self.plan)
            self._created_lr_scheduler = True
        return self.lr_scheduler

    def train(self, *args: Any, **kwargs: Any) -> Any:
        self.check_plan()
        return super().train(*args, **kwargs)

    def check_plan(self) -> None:
        """Refuse, in one sentence with the values to set, settings that train another batch,
        another number of steps or another LR curve than the plan's."""
        a = self.args
        if a.auto_find_batch_size:
            raise DateError("auto_find_batch_size halves the per-device batch without raising "
                            "gradient_accumulation_steps, so the global batch would leave the "
                            "plan's; set auto_find_batch_size=False and give the micro-batch "
                            "that fits (date plan --devices N --micro-batch M prints the "
                            "accumulation that keeps the batch).")
        want = hf_arguments(self.plan)
        wrong = mismatches(self.plan, a.world_size, a.per_device_train_batch_size,
                           a.gradient_accumulation_steps, a.max_steps)
        if wrong:
            raise DateError(
                f"the Trainer's settings do not train the plan: {'; '.join(wrong)}; set "
                f"per_device_train_batch_size={want['per_device_train_batch_size']}, "
                f"gradient_accumulation_steps={want['gradient_accumulation_steps']} and "
                f"max_steps={want['max_steps']} on {self.plan.split.world_size} processes "
                f"({_PLAN_ARGS}).")
        if contradictions := _lr_contradictions(a, want):
            raise DateError(f"the Trainer's arguments contradict the plan's LR curve, which "
                            f"DateTrainer trains instead: {'; '.join(contradictions)} "
                            f"({_PLAN_ARGS}).")


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


class DateProbe(transformers.TrainerCallback):
    """Measures the gradient noise scale of the baseline HF's Trainer runs, and writes
    ``path`` (probe.json) when training ends: the baseline is read from the Trainer's own
    arguments over ``train_samples`` samples (:func:`~date_engine.baseline_from_hf`), so the
    probe matches the plans made from them. Each process needs two or more micro-batches per
    step (``gradient_accumulation_steps`` ≥ 2: split the same batch). ``share``: stop the run
    after that share of its steps, as ``date probe`` does (default: measure the whole run). The
    probe has no LR check (``date probe`` trains a second run for it; docs/noise.md)."""

    def __init__(self, path: str, *, train_samples: int, share: float | None = None) -> None:
        expect(path, str, "DateProbe: path", "where to write probe.json (str)")
        expect(train_samples, int, "DateProbe: train_samples", "the training samples (int)")
        self.path, self.train_samples, self.share = path, train_samples, share
        self.meter: Any = None
        self.probe: Any = None
        """The probe written (a :class:`~date_engine.probe.Probe`), None before the end or
        where too few steps were measured."""

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None,
                       **kwargs: Any) -> None:
        from accelerate.state import GradientState

        from date_engine.api import plan_for
        from date_engine.integrations.configs import baseline_from_hf
        from date_engine.integrations.probing import InRunProbe

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
