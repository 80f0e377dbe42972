"""The plan inside trainers people already use: Hugging Face's ``Trainer``, Lightning, accelerate.

Each adapter takes a :class:`~date_engine.runplan.RunPlan` (from :func:`date_engine.plan_for`)
and installs everything it derived: the optimizer (DATE over the base, with the plan's β2, ε, λ),
the LR schedule stepped once per optimizer step, and the split of the batch (per-device batch ×
devices × accumulation), checked against the trainer's own settings before the first step.

This module is torch-free: the settings each tool takes, as plain values (``date plan --emit``
prints them). The adapters are :mod:`date_engine.integrations.hf` (``pip install -e
'.[hf]'`` in the clone) and :mod:`date_engine.integrations.lightning` (``'.[lightning]'``);
accelerate needs no adapter (docs/integrations.md).
"""

from __future__ import annotations

import importlib
import json
import math
import shlex
from typing import Any

from date_engine.errors import DateError
from date_engine.runplan import RunPlan

__all__ = ["ADAPTER_RATIOS", "CANNOT_EXPRESS", "EMIT_TARGETS", "JOB_TARGETS", "STACK_TARGETS",
           "hf_arguments",
           "hf_caveat", "hf_flags", "hf_optim", "hf_schedule", "lightning_settings", "mismatches",
           "require", "split_settings"]

ADAPTER_RATIOS = False
"""Whether ``DateTrainer`` and Lightning's ``optimizers_for`` apply DATE's per-layer ratios when
not told (``date=``). Off: inside HF's Trainer they lost to the base optimizer on a GPT-2 and a
BERT at 8× (docs/integrations.md), as they did on the project's own ViT and BERT studies."""

JOB_TARGETS = ("slurm", "slurm-cpu", "k8s", "k8s-cpu")
"""The ``--emit`` targets that write a job (a Slurm script, a Kubeflow TrainJob) that trains the
plan with ``date scale`` or the user's ``--command`` (slurm, k8s: one GPU a process; -cpu: none)."""

STACK_TARGETS = ("nanogpt", "megatron", "megatron-rampup", "megatron-bridge")
"""The ``--emit`` targets that write the plan as another stack's own configuration
(:mod:`date_engine.stacks`)."""

EMIT_TARGETS = ("hf-args", "lightning", "accelerate", "json", *STACK_TARGETS, *JOB_TARGETS)
"""What ``date plan --emit`` writes: settings for another trainer, or a job."""

_WHERE = "(docs/integrations.md)"
CANNOT_EXPRESS = (f"settings alone cannot carry DATE's per-layer ratios or the plan's exact LR "
                  f"curve: install them with the optimizer and scheduler objects {_WHERE}.")


def require(module: str, extra: str) -> Any:
    """``module`` imported, or a DateError naming the pip command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DateError(f"{module} is not installed; in the date_engine clone run: pip install "
                        f"-e '.[{extra}]'") from None


def split_settings(run: RunPlan) -> dict[str, int]:
    """The split every tool needs: per-device micro-batch, devices, accumulation, optimizer
    steps."""
    if run.plan.ramp:
        raise DateError("a batch ramp (date.budget: ramp) changes the batch during the run, which "
                        "these trainers cannot follow; plan with --budget same-epochs or hold.")
    return {"per_device_batch": run.split.micro_batch, "devices": run.split.world_size,
            "accumulation_steps": run.split.accumulation_steps, "batch": run.split.batch,
            "max_steps": run.last_step}


def hf_schedule(run: RunPlan) -> tuple[str, dict[str, Any], str]:
    """HF's ``lr_scheduler_type`` and ``lr_scheduler_kwargs`` for the plan's schedule, and what
    they cannot carry of it ('' where HF runs the plan's own curve at every step)."""
    plan = run.plan
    shape, end = plan.schedule, plan.schedule.final or 0.0
    whole = plan.warmup_iterations == math.ceil(plan.warmup_iterations)
    near = "" if whole else f"HF's warmup takes whole steps ({math.ceil(plan.warmup_iterations)})"
    if shape.is_date_default or (shape.name == "linear" and shape.index == "paper"):
        return "polynomial", {"lr_end": plan.lr_floor + end * plan.peak_lr, "power": 1.0}, (
            "HF's runs a step behind")
    if shape.name in ("step", "multistep"):
        return "constant_with_warmup", {}, f"HF has no {shape.name} schedule"
    kinds: dict[str, tuple[str, dict[str, Any]]] = {
        "linear": ("linear", {}) if end == 0 else
        ("polynomial", {"lr_end": end * plan.peak_lr, "power": 1.0}),
        "cosine": ("cosine", {}) if end == 0 else ("cosine_with_min_lr", {"min_lr_rate": end}),
        "polynomial": ("polynomial", {"lr_end": end * plan.peak_lr, "power": shape.power}),
        "constant": ("constant_with_warmup", {}),
        "inverse_sqrt": ("inverse_sqrt", {}),
        "wsd": ("warmup_stable_decay", {
            "num_decay_steps": round(shape.decay_fraction * plan.total_iterations),
            "decay_type": shape.decay_shape, "min_lr_ratio": end}),
    }
    name, kwargs = kinds[shape.name]
    if shape.name == "wsd" and shape.decay_fraction * plan.total_iterations != \
            kwargs["num_decay_steps"]:
        near = "; ".join(filter(None, [near, "HF's decay takes whole steps"]))
    return name, kwargs, near


def hf_arguments(run: RunPlan) -> dict[str, Any]:
    """The ``TrainingArguments`` fields the plan sets. ``max_grad_norm`` is the plan's clipping,
    0 where it has none (HF would clip at 1.0 unless told); the schedule is HF's own where it has
    the plan's curve (:func:`hf_schedule`), which :class:`DateTrainer` replaces with the plan's."""
    split, plan = split_settings(run), run.plan
    kind, kwargs, _ = hf_schedule(run)
    args: dict[str, Any] = {
        "per_device_train_batch_size": split["per_device_batch"],
        "gradient_accumulation_steps": split["accumulation_steps"],
        "max_steps": split["max_steps"],
        "learning_rate": plan.peak_lr,
        "warmup_steps": math.ceil(plan.warmup_iterations),
        "lr_scheduler_type": kind,
        "max_grad_norm": plan.grad_clip or 0.0,
    }
    if kwargs:
        args["lr_scheduler_kwargs"] = kwargs
    options, optim = plan.optimizer.options, hf_optim(run)
    if optim is not None:  # HF's flags name Adam's options only
        args["optim"] = optim
        args["adam_beta1"], args["adam_beta2"] = options["betas"]
        args["adam_epsilon"] = options["eps"]
    if "weight_decay" in options:
        args["weight_decay"] = options["weight_decay"]
    return args


def hf_optim(run: RunPlan) -> str | None:
    """HF's ``--optim`` for the plan's base optimizer where it runs the same update: AdamW, and
    Adam without weight decay (then the same update); None for any other, which
    :class:`~date_engine.integrations.hf.DateTrainer` builds (:func:`hf_caveat` says so)."""
    name, options = run.plan.optimizer.name, run.plan.optimizer.options
    plain_adam = name == "adam" and not options.get("weight_decay")
    same = (name == "adamw" or plain_adam) and not options.get("amsgrad")
    return "adamw_torch" if same else None


def hf_caveat(run: RunPlan) -> str:
    """What HF's flags cannot carry of ``run``, in one sentence."""
    _, _, schedule = hf_schedule(run)
    missing = []
    if run.plan.optimizer.options.get("weight_decay") and not run.plan.optimizer.decay_exempt:
        missing.append("decay on biases and norms (HF spares)")
    objects = "the optimizer object"
    if schedule:
        missing.append(f"the LR curve ({schedule})")
        objects = "the optimizer and scheduler objects"
    if hf_optim(run) is None:
        missing.insert(0, f"{run.plan.optimizer.name} (HF's --optim has none)")
    if not missing:
        return f"the flags carry the plan; DATE's per-layer ratios take date=True {_WHERE}."
    return f"the flags cannot carry {', '.join(missing)}: use {objects} {_WHERE}."


def hf_flags(run: RunPlan) -> list[str]:
    """:func:`hf_arguments` as the command-line flags of HF's example scripts (run_mlm.py, ...):
    floats as their shortest exact text, so that the parsed values are the plan's."""
    flags = []
    for key, value in hf_arguments(run).items():
        text = json.dumps(value) if isinstance(value, dict) else repr(value) \
            if isinstance(value, float) else str(value)
        flags.append(f"--{key} {shlex.quote(text)}")
    return flags


def lightning_settings(run: RunPlan) -> dict[str, Any]:
    """``lightning.Trainer`` arguments and the dataloader's batch size the plan sets."""
    split = split_settings(run)
    return {"trainer": {"devices": split["devices"],
                        "accumulate_grad_batches": split["accumulation_steps"],
                        "max_steps": split["max_steps"],
                        "gradient_clip_val": run.plan.grad_clip},
            "dataloader_batch_size": split["per_device_batch"]}


def mismatches(run: RunPlan, devices: int, per_device_batch: int, accumulation: int,
               max_steps: int | None) -> list[str]:
    """What a trainer's own settings have that the plan does not, each as 'name X (the plan: Y)';
    empty when they agree."""
    split = split_settings(run)
    out = []
    if devices * per_device_batch * accumulation != split["batch"]:
        out.append(f"devices × per-device batch × accumulation = {devices} × {per_device_batch} × "
                   f"{accumulation} = {devices * per_device_batch * accumulation} samples per "
                   f"optimizer step, not the plan's {split['batch']} "
                   f"({split['devices']} × {split['per_device_batch']} × "
                   f"{split['accumulation_steps']})")
    if max_steps is not None and max_steps != split["max_steps"]:
        given = f"max_steps {max_steps}" if max_steps > 0 else "no max_steps (epochs decide)"
        out.append(f"{given} (the plan: {split['max_steps']} optimizer steps)")
    return out
