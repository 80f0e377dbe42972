"""The baseline read from the configuration a run already has, not typed in again.

:func:`baseline_from_hf` reads Hugging Face's ``TrainingArguments`` (the object, or the JSON that
``TrainingArguments.to_json_string()`` writes): the global batch, the LR, the warmup, the length,
the optimizer and its β/ε/λ, the schedule and its kwargs, the clipping and HF's weight-decay
exemptions, counted as HF's Trainer counts them. :func:`baseline_from_timm` reads the
``args.yaml`` timm's train.py writes beside every run, its LR as timm computed it at the
baseline's batch (``lr_base`` scaled by timm once, not again). :func:`baseline_from_file` picks
the reader by the file (``date plan --from``). Torch-free.

Every field is read through one checked reader (:class:`~date_engine.fields.Fields`): its type,
finiteness, range and meaning (a ratio stays a ratio, a schedule ends at or below its peak), each
failure one sentence naming the field as the configuration names it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from date_engine.errors import SpecError
from date_engine.fields import MOST, Fields, counts
from date_engine.spec import Spec, parse_spec

__all__ = ["BaselineRead", "baseline_from_file", "baseline_from_hf", "baseline_from_timm",
           "hf_optimizer_name", "hf_steps", "read_baseline"]

_OPTIMIZERS = {"adamw": "adamw", "sgd": "sgd", "adagrad": "adagrad", "rmsprop": "rmsprop"}
"""HF's ``optim`` names (by prefix: ``adamw_torch``, ``adamw_torch_fused``, ...) -> catalog names
of optimizers that run the same update."""

_HF_DEFAULTS: dict[str, Any] = {
    "learning_rate": 5e-5, "num_train_epochs": 3.0, "max_steps": -1,
    "gradient_accumulation_steps": 1, "warmup_steps": 0, "warmup_ratio": 0.0,
    "weight_decay": 0.0, "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_epsilon": 1e-8,
    "max_grad_norm": 1.0, "lr_scheduler_type": "linear", "optim": "adamw_torch",
    "dataloader_drop_last": False}
"""TrainingArguments' defaults (transformers 4.46 to 5.x) of the fields read, for a dict that
leaves some out."""

def hf_steps(args: Any, train_samples: int, world_size: int = 1) -> int:
    """The optimizer steps HF's Trainer runs: ``max_steps`` where positive, else
    ⌈epochs · steps per epoch⌉ with a process's dataloader of ⌈⌈n / world⌉ / per-device⌉
    batches (``dataloader_drop_last`` off) and a step per ``gradient_accumulation_steps`` of them,
    the last partial one included."""
    return _hf_steps(Fields(args, "TrainingArguments", _HF_DEFAULTS), train_samples, world_size)


def _hf_steps(f: Fields, train_samples: int, world_size: int) -> int:
    max_steps = f.number("max_steps", low=-1, whole=True)
    if max_steps > 0:
        return max_steps
    per_device = f.count("per_device_train_batch_size")
    accumulation = f.count("gradient_accumulation_steps")
    per_rank = math.ceil(train_samples / world_size)
    batches = per_rank // per_device if f.flag("dataloader_drop_last") else \
        math.ceil(per_rank / per_device)
    if batches == 0:
        raise SpecError(f"{f.source}: per_device_train_batch_size {per_device} with "
                        f"dataloader_drop_last leaves no batch of the {per_rank} samples each "
                        f"process reads; give a smaller per-device batch.")
    per_epoch = max(batches // accumulation + int(batches % accumulation > 0), 1)
    epochs = f.number("num_train_epochs", low=0.0, high=1e6, above=True)
    steps = math.ceil(epochs * per_epoch)
    if steps > MOST:
        raise SpecError(f"{f.source}: num_train_epochs {epochs:g} gives {steps:,} optimizer "
                        f"steps, more than {MOST:,.0f}; give fewer epochs or max_steps.")
    return steps


def baseline_from_hf(args: Any, train_samples: int, world_size: int = 1) -> Spec:
    """The spec of the baseline a ``TrainingArguments`` (or its JSON as a dict) trains on
    ``train_samples`` samples over ``world_size`` processes: B0 = world × per-device ×
    accumulation, η0, the warmup (steps, or a share of training: ``warmup_steps`` below 1 or
    ``warmup_ratio``), the length, the optimizer with its β/ε/λ, the schedule and its kwargs,
    ``max_grad_norm`` and HF's exemption of biases and norm weights from weight decay. Fields a
    dict leaves out take TrainingArguments' defaults. Raises SpecError naming what it cannot
    read or carry."""
    counts("baseline_from_hf", train_samples, world_size)
    if not isinstance(args, Mapping) and not hasattr(args, "per_device_train_batch_size"):
        raise SpecError(f"baseline_from_hf: args must be a TrainingArguments or its JSON as a "
                        f"dict, got {type(args).__name__}.")
    f = Fields(args, "TrainingArguments", _HF_DEFAULTS)
    batch = world_size * f.count("per_device_train_batch_size") * \
        f.count("gradient_accumulation_steps")
    steps = _hf_steps(f, train_samples, world_size)
    warmup = f.number("warmup_steps")
    field = "warmup_steps" if warmup else "warmup_ratio"
    if warmup >= 1:  # steps, whole ones as HF's get_warmup_steps counts them (10.7 -> 10)
        warmup_steps = int(warmup)
    else:  # transformers 5: a share of training below 1; transformers 4: warmup_ratio
        warmup_steps = math.ceil(steps * (warmup or f.number("warmup_ratio", high=1.0)))
    kind = f.text("lr_scheduler_type", "linear")
    if kind == "constant":
        warmup_steps = 0  # HF's constant schedule has no warmup, whatever warmup_steps says
    if warmup_steps >= steps:
        raise SpecError(f"TrainingArguments: {field} {f.raw(field)!r} warms up for "
                        f"{warmup_steps} steps of the run's {steps}, so it never trains at its "
                        f"peak; give a warmup shorter than the run.")
    lr = f.number("learning_rate", high=1e6, above=True)
    baseline = {"batch_size": batch, "lr": lr, "iterations": steps,
                "warmup_epochs": warmup_steps * batch / train_samples,
                "dataset_size": train_samples, "optimizer": _optimizer(f),
                "schedule": _schedule(f, kind, steps, lr)}
    raw: dict[str, Any] = {"baseline": baseline}
    clip = f.number("max_grad_norm", high=1e6)
    if clip > 0:
        raw["train"] = {"grad_clip": clip}
    return parse_spec(raw, source="TrainingArguments")


def hf_optimizer_name(optim: str) -> str | None:
    """The catalog's name of the update HF's ``optim`` runs (by prefix: ``adamw_torch_fused`` ->
    adamw), or None where none here is the same."""
    return next((ours for theirs, ours in _OPTIMIZERS.items() if optim.startswith(theirs)), None)


def _optimizer(f: Fields) -> dict[str, Any]:
    optim = f.text("optim", "adamw_torch")
    name = hf_optimizer_name(optim)
    if name is None:
        raise SpecError(f"TrainingArguments: optim {optim!r} has no counterpart here; train the "
                        f"baseline with one of adamw_torch, sgd, adagrad, rmsprop, or describe it "
                        f"in a spec (docs/integrations.md).")
    options: dict[str, Any] = {"name": name, "weight_decay": f.number("weight_decay", high=1e3),
                               "decay_biases_and_norms": False}
    if name == "adamw":
        options["betas"] = [f.number("adam_beta1", high=1.0), f.number("adam_beta2", high=1.0)]
        options["eps"] = f.number("adam_epsilon", high=1.0, above=True)
    return options


def _schedule(f: Fields, kind: str, steps: int, lr: float) -> dict[str, Any]:
    key = "lr_scheduler_kwargs"
    kwargs = f.mapping(key)
    if kind == "linear":
        return {"name": "linear", "index": "torch", "final_fraction": 0.0}
    if kind == "cosine" and kwargs.raw("num_cycles", 0.5) == 0.5:
        return {"name": "cosine"}
    if kind == "cosine_with_min_lr":
        if "min_lr" in kwargs:
            return {"name": "cosine", "final_lr": kwargs.number("min_lr", high=lr)}
        return {"name": "cosine", "final_fraction": kwargs.number("min_lr_rate", 0.0, high=1.0)}
    if kind == "polynomial":
        return {"name": "polynomial", "power": kwargs.number("power", 1.0, high=1e3, above=True),
                "final_lr": kwargs.number("lr_end", 1e-7, high=lr)}
    if kind in ("constant", "constant_with_warmup"):
        return {"name": "constant"}
    if kind == "inverse_sqrt" and "timescale" not in kwargs:
        return {"name": "inverse_sqrt"}
    if kind == "warmup_stable_decay" and "num_decay_steps" in kwargs:
        return {"name": "wsd",
                "decay_fraction": kwargs.number("num_decay_steps", low=1, high=steps,
                                                whole=True) / steps,
                "decay_shape": kwargs.text("decay_type", "cosine"),
                "final_fraction": kwargs.number("min_lr_ratio", 0.0, high=1.0)}
    raise SpecError(f"TrainingArguments: lr_scheduler_type {kind!r} with "
                    f"{dict(kwargs.args) or 'no kwargs'} has no counterpart here; the schedules "
                    f"read are linear, cosine, cosine_with_min_lr, polynomial, "
                    f"constant(_with_warmup), inverse_sqrt and warmup_stable_decay with "
                    f"num_decay_steps.")


# ---------------------------------------------------------------------------------------- timm

_TIMM_OPTIMIZERS = {"sgd": "nesterov", "nesterov": "nesterov", "momentum": "momentum",
                    "adam": "adam", "adamw": "adamw", "lamb": "lamb", "lars": "lars",
                    "adagrad": "adagrad"}
"""timm's ``opt`` -> the catalog's name of the same update (timm's sgd is Nesterov momentum)."""


def timm_lr(args: Mapping[str, Any], world_size: int = 1) -> float:
    """The peak LR timm's train.py trains ``args`` with: ``lr`` where given, else ``lr_base``
    scaled from ``lr_base_size`` to the global batch (√ for Ada*/LAMB optimizers, linear for the
    rest, or ``lr_base_scale``)."""
    return _timm_lr(Fields(args, "args.yaml"), world_size)


def _timm_lr(f: Fields, world_size: int) -> float:
    if "lr" in f:
        return f.number("lr", high=1e6, above=True)
    batch = f.count("batch_size") * world_size * f.count("grad_accum_steps", 1)
    ratio = batch / f.count("lr_base_size", 256)
    scale = f.text("lr_base_scale", "") or (
        "sqrt" if any(o in f.text("opt", "sgd").lower() for o in ("ada", "lamb")) else "linear")
    if scale not in ("sqrt", "linear"):
        raise f.refuse("lr_base_scale", "sqrt or linear", scale)
    base = f.number("lr_base", 0.1, high=1e6, above=True)
    lr = base * (ratio ** 0.5 if scale == "sqrt" else ratio)
    if not 0 < lr <= 1e6:  # scaled past what a float or a learning rate holds
        raise SpecError(f"args.yaml: lr_base {base:g}, scaled {ratio:g}× from lr_base_size to "
                        f"the batch, gives lr {lr:g}; give lr itself.")
    return lr


def baseline_from_timm(args: Mapping[str, Any], train_samples: int, world_size: int = 1) -> Spec:
    """The spec of the baseline timm's ``args.yaml`` (as a dict) trains on ``train_samples``
    samples over ``world_size`` processes: B0 = world × batch_size × grad_accum_steps, η0 as
    :func:`timm_lr` (timm's own scaling of lr_base read, not applied again at the new batch), the
    warmup and length in epochs, the schedule (cosine, step, multistep, poly) ending at
    ``min_lr``, the optimizer with its β/ε/λ and momentum, ``clip_grad`` and timm's exemption of
    biases and norms from weight decay. Raises SpecError naming what it cannot read or carry."""
    counts("baseline_from_timm", train_samples, world_size)
    if not isinstance(args, Mapping) or "batch_size" not in args or "epochs" not in args:
        raise SpecError("baseline_from_timm: args must be timm's args.yaml as a dict (with "
                        "batch_size and epochs).")
    f = Fields(args, "args.yaml")
    for key, most in (("cooldown_epochs", 0), ("lr_cycle_limit", 1)):
        if f.number(key, 0, high=1e6) > most:
            raise SpecError(f"args.yaml: {key} {args[key]} has no counterpart here; train the "
                            f"baseline without it, or describe it in a spec.")
    batch = world_size * f.count("batch_size") * f.count("grad_accum_steps", 1)
    lr = _timm_lr(f, world_size)
    epochs = f.number("epochs", high=1e6, above=True)
    warmup = f.number("warmup_epochs", 0, high=1e6)
    if warmup >= epochs:
        raise SpecError(f"args.yaml: warmup_epochs {warmup:g} is not shorter than epochs "
                        f"{epochs:g}, so the run never trains at its peak; give a shorter warmup.")
    baseline: dict[str, Any] = {
        "batch_size": batch, "lr": lr, "epochs": epochs, "warmup_epochs": warmup,
        "dataset_size": train_samples, "optimizer": _timm_optimizer(f),
        "schedule": _timm_schedule(f, lr)}
    raw: dict[str, Any] = {"baseline": baseline}
    if baseline["optimizer"]["name"] in ("lamb", "lars"):  # their own per-layer trust ratio
        raw["date"] = {"layer_ratio": {"mode": "off"}}
    clip = f.number("clip_grad", 0, high=1e6)
    if clip and f.text("clip_mode", "norm") == "norm":
        raw["train"] = {"grad_clip": clip}
    return parse_spec(raw, source="args.yaml")


def _timm_optimizer(f: Fields) -> dict[str, Any]:
    opt = f.text("opt", "sgd").lower()
    if opt not in _TIMM_OPTIMIZERS:
        raise SpecError(f"args.yaml: opt {opt!r} has no counterpart here; the optimizers read are "
                        f"{', '.join(_TIMM_OPTIMIZERS)}.")
    name = _TIMM_OPTIMIZERS[opt]
    options: dict[str, Any] = {"name": name, "weight_decay": f.number("weight_decay", 0, high=1e3),
                               "decay_biases_and_norms": False}
    if name in ("nesterov", "momentum"):
        options["momentum"] = f.number("momentum", 0.9, high=1.0)
    if name in ("adam", "adamw", "lamb"):
        if "opt_betas" in f:
            options["betas"] = f.numbers("opt_betas", 2, high=1.0)
        if "opt_eps" in f:
            options["eps"] = f.number("opt_eps", high=1.0, above=True)
    return options


def _timm_schedule(f: Fields, lr: float) -> dict[str, Any]:
    sched = f.text("sched", "cosine")
    end = {"final_lr": f.number("min_lr", 0.0, high=lr)}
    rate = {"high": 1.0, "above": True}
    if sched == "cosine":
        return {"name": "cosine", **end}
    if sched == "poly":
        return {"name": "polynomial", "power": f.number("decay_rate", 0.1, high=1e3, above=True),
                **end}
    if sched == "step":
        return {"name": "step", "every_epochs": f.number("decay_epochs", 90, high=1e6, above=True),
                "factor": f.number("decay_rate", 0.1, **rate)}
    if sched == "multistep":
        return {"name": "multistep", "milestones": f.numbers("decay_milestones", high=1e6),
                "factor": f.number("decay_rate", 0.1, **rate)}
    raise SpecError(f"args.yaml: sched {sched!r} has no counterpart here; the schedules read are "
                    f"cosine, poly, step and multistep.")


def baseline_from_file(path: str | Path, train_samples: int, world_size: int = 1) -> Spec:
    """The baseline of a run's own configuration file (a path, as str or Path), by its kind
    (:func:`read_baseline`); what it sets that the plan cannot carry is said as a warning."""
    import warnings

    read = read_baseline(path, train_samples, world_size)
    for line in read.lost:
        warnings.warn(f"{path}: {line}", stacklevel=2)
    return read.spec


@dataclass(frozen=True)
class BaselineRead:
    """A baseline read from another tool's configuration: the spec, where its values came from
    (spec field -> words, for the plan's "from" column) and what the file sets that the plan
    cannot carry (one line each)."""

    spec: Spec
    sources: dict[str, str] = field(default_factory=dict)
    lost: tuple[str, ...] = ()


_KINDS = ("HF's TrainingArguments JSON (*.json), timm's args.yaml or a Megatron-Bridge YAML "
          "(*.yaml), a nanoGPT config (*.py), or Megatron-LM flags or its launch script (*.sh, "
          "*.txt, *.args)")


def read_baseline(path: str | Path, train_samples: int, world_size: int = 1) -> BaselineRead:
    """The baseline of a run's own configuration file: ``*.json`` — HF's TrainingArguments as
    ``to_json_string()`` writes them; ``*.yaml``/``*.yml`` — timm's args.yaml, or a
    Megatron-Bridge config (sections train, optimizer, scheduler); ``*.py`` — a nanoGPT config,
    read without running it; ``*.sh``, ``*.txt``, ``*.args`` — Megatron-LM's flags, or a launch
    script holding them (:mod:`date_engine.stacks`). ``world_size``: the processes the run used,
    where its configuration counts a per-device batch (HF, timm)."""
    import json

    import yaml

    from date_engine.files import read_small_text

    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise SpecError(f"baseline_from_file: path must be the configuration file's path (str or "
                        f"Path), got {path!r}.")
    path = Path(path)
    text = read_small_text(path, "--from", f"give {_KINDS}", error=SpecError)
    if path.suffix == ".json":
        try:
            args = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path}: not JSON ({e.msg}, line {e.lineno}); write it with "
                            f"TrainingArguments.to_json_string().") from None
        if not isinstance(args, dict) or "per_device_train_batch_size" not in args:
            raise SpecError(f"{path}: not TrainingArguments (no per_device_train_batch_size); "
                            f"write it with TrainingArguments.to_json_string().")
        return BaselineRead(baseline_from_hf(args, train_samples, world_size))
    if path.suffix == ".py":
        from date_engine.stacks.nanogpt import (
            baseline_from_nanogpt,
            nanogpt_sources,
            read_pyconfig_text,
        )

        config = read_pyconfig_text(text, str(path))
        return BaselineRead(baseline_from_nanogpt(config, train_samples),
                            nanogpt_sources(config))
    if path.suffix in (".sh", ".txt", ".args"):
        from date_engine.stacks.megatron import baseline_from_megatron, parse_flags

        spec, lost = baseline_from_megatron(parse_flags(text, str(path)), train_samples)
        return BaselineRead(spec, lost=tuple(lost))
    if path.suffix in (".yaml", ".yml"):
        try:
            args = yaml.safe_load(text)
        except yaml.YAMLError:
            raise SpecError(f"{path}: not YAML; give the args.yaml of a timm run or a "
                            "Megatron-Bridge config.") from None
        if isinstance(args, Mapping) and any(isinstance(args.get(k), Mapping)
                                             for k in ("train", "optimizer", "scheduler")):
            from date_engine.stacks.megatron import baseline_from_megatron, bridge_flags

            spec, lost = baseline_from_megatron(bridge_flags(args, str(path)), train_samples)
            return BaselineRead(spec, lost=tuple(lost))
        return BaselineRead(baseline_from_timm(args, train_samples, world_size))
    raise SpecError(f"{path}: --from reads {_KINDS}; got a {path.suffix or 'suffix-less'} file.")
