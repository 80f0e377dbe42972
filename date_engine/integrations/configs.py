"""The baseline read from the configuration a run already has, not typed in again.

:func:`baseline_from_hf` reads Hugging Face's ``TrainingArguments`` (the object, or the JSON that
``TrainingArguments.to_json_string()`` writes): the global batch, the LR, the warmup, the length,
the optimizer and its β/ε/λ, the schedule and its kwargs, the clipping and HF's weight-decay
exemptions, counted as HF's Trainer counts them. Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from date_engine.errors import SpecError
from date_engine.spec import Spec, parse_spec

__all__ = ["baseline_from_hf", "hf_steps"]

_OPTIMIZERS = {"adamw": "adamw", "sgd": "sgd", "adagrad": "adagrad", "rmsprop": "rmsprop"}
"""HF's ``optim`` names (by prefix: ``adamw_torch``, ``adamw_torch_fused``, ...) -> catalog names
of optimizers that run the same update."""


def _value(args: Any, key: str, default: Any = None) -> Any:
    value = args.get(key, default) if isinstance(args, Mapping) else getattr(args, key, default)
    return getattr(value, "value", value)  # HF's enums (SchedulerType, OptimizerNames)


def hf_steps(args: Any, train_samples: int, world_size: int = 1) -> int:
    """The optimizer steps HF's Trainer runs: ``max_steps`` where positive, else
    ⌈epochs · steps per epoch⌉ with a process's dataloader of ⌈⌈n / world⌉ / per-device⌉
    batches (``dataloader_drop_last`` off) and a step per ``gradient_accumulation_steps`` of them,
    the last partial one included."""
    max_steps = int(_value(args, "max_steps", -1) or -1)
    if max_steps > 0:
        return max_steps
    per_device = int(_value(args, "per_device_train_batch_size"))
    accumulation = int(_value(args, "gradient_accumulation_steps", 1))
    per_rank = math.ceil(train_samples / world_size)
    batches = per_rank // per_device if _value(args, "dataloader_drop_last", False) else \
        math.ceil(per_rank / per_device)
    per_epoch = max(batches // accumulation + int(batches % accumulation > 0), 1)
    return math.ceil(float(_value(args, "num_train_epochs", 3.0)) * per_epoch)


def baseline_from_hf(args: Any, train_samples: int, world_size: int = 1) -> Spec:
    """The spec of the baseline a ``TrainingArguments`` (or its JSON as a dict) trains on
    ``train_samples`` samples over ``world_size`` processes: B0 = world × per-device ×
    accumulation, η0, the warmup (steps, or a fraction of training below 1), the length, the
    optimizer with its β/ε/λ, the schedule and its kwargs, ``max_grad_norm`` and HF's exemption of
    biases and norm weights from weight decay. Raises SpecError naming what it cannot carry."""
    if isinstance(train_samples, bool) or not isinstance(train_samples, int) or train_samples < 1:
        raise SpecError(f"baseline_from_hf: train_samples must be the number of training "
                        f"samples (a positive int), got {train_samples!r}.")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise SpecError(f"baseline_from_hf: world_size must be a positive int (the processes "
                        f"the baseline ran on), got {world_size!r}.")
    if not isinstance(args, Mapping) and not hasattr(args, "per_device_train_batch_size"):
        raise SpecError(f"baseline_from_hf: args must be a TrainingArguments or its JSON as a "
                        f"dict, got {type(args).__name__}.")
    batch = world_size * int(_value(args, "per_device_train_batch_size")) * \
        int(_value(args, "gradient_accumulation_steps", 1))
    steps = hf_steps(args, train_samples, world_size)
    warmup = float(_value(args, "warmup_steps", 0) or 0)
    if warmup < 1 and _value(args, "warmup_ratio"):  # transformers 4's separate field
        warmup = float(_value(args, "warmup_ratio"))
    warmup_steps = int(warmup) if warmup >= 1 else math.ceil(steps * warmup)
    if str(_value(args, "lr_scheduler_type", "linear")) == "constant":
        warmup_steps = 0  # HF's constant schedule has no warmup, whatever warmup_steps says
    lr = float(_value(args, "learning_rate"))
    baseline = {"batch_size": batch, "lr": lr, "iterations": steps,
                "warmup_epochs": warmup_steps * batch / train_samples,
                "dataset_size": train_samples, "optimizer": _optimizer(args),
                "schedule": _schedule(args, steps)}
    raw: dict[str, Any] = {"baseline": baseline}
    clip = float(_value(args, "max_grad_norm", 0) or 0)
    if clip > 0:
        raw["train"] = {"grad_clip": clip}
    return parse_spec(raw, source="TrainingArguments")


def _optimizer(args: Any) -> dict[str, Any]:
    optim = str(_value(args, "optim", "adamw_torch"))
    name = next((ours for theirs, ours in _OPTIMIZERS.items() if optim.startswith(theirs)), None)
    if name is None:
        raise SpecError(f"TrainingArguments: optim {optim!r} has no counterpart here; train the "
                        f"baseline with one of adamw_torch, sgd, adagrad, rmsprop, or describe it "
                        f"in a spec (docs/integrations.md).")
    decay = float(_value(args, "weight_decay", 0.0) or 0.0)
    options: dict[str, Any] = {"name": name, "weight_decay": decay,
                               "decay_biases_and_norms": False}
    if name == "adamw":
        options["betas"] = [float(_value(args, "adam_beta1", 0.9)),
                            float(_value(args, "adam_beta2", 0.999))]
        options["eps"] = float(_value(args, "adam_epsilon", 1e-8))
    return options


def _schedule(args: Any, steps: int) -> dict[str, Any]:
    kind = str(_value(args, "lr_scheduler_type", "linear"))
    kwargs = dict(_value(args, "lr_scheduler_kwargs", None) or {})
    if kind == "linear":
        return {"name": "linear", "index": "torch", "final_fraction": 0.0}
    if kind == "cosine" and kwargs.get("num_cycles", 0.5) == 0.5:
        return {"name": "cosine"}
    if kind == "cosine_with_min_lr":
        if "min_lr" in kwargs:
            return {"name": "cosine", "final_lr": float(kwargs["min_lr"])}
        return {"name": "cosine", "final_fraction": float(kwargs.get("min_lr_rate", 0.0))}
    if kind == "polynomial":
        return {"name": "polynomial", "power": float(kwargs.get("power", 1.0)),
                "final_lr": float(kwargs.get("lr_end", 1e-7))}
    if kind in ("constant", "constant_with_warmup"):
        return {"name": "constant"}
    if kind == "inverse_sqrt" and kwargs.get("timescale") is None:
        return {"name": "inverse_sqrt"}
    if kind == "warmup_stable_decay" and "num_decay_steps" in kwargs:
        return {"name": "wsd", "decay_fraction": int(kwargs["num_decay_steps"]) / steps,
                "decay_shape": kwargs.get("decay_type", "cosine"),
                "final_fraction": float(kwargs.get("min_lr_ratio", 0.0))}
    raise SpecError(f"TrainingArguments: lr_scheduler_type {kind!r} with {kwargs or 'no kwargs'} "
                    f"has no counterpart here; the schedules read are linear, cosine, "
                    f"cosine_with_min_lr, polynomial, constant(_with_warmup), inverse_sqrt and "
                    f"warmup_stable_decay with num_decay_steps.")
