"""The baseline read from the configuration a run already has, not typed in again.

:func:`baseline_from_hf` reads Hugging Face's ``TrainingArguments`` (the object, or the JSON that
``TrainingArguments.to_json_string()`` writes): the global batch, the LR, the warmup, the length,
the optimizer and its β/ε/λ, the schedule and its kwargs, the clipping and HF's weight-decay
exemptions, counted as HF's Trainer counts them. :func:`baseline_from_timm` reads the
``args.yaml`` timm's train.py writes beside every run, its LR as timm computed it at the
baseline's batch (``lr_base`` scaled by timm once, not again). :func:`baseline_from_file` picks
the reader by the file (``date plan --from``). Torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from date_engine.errors import SpecError
from date_engine.spec import Spec, parse_spec

__all__ = ["baseline_from_file", "baseline_from_hf", "baseline_from_timm", "hf_optimizer_name",
           "hf_steps"]

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


def _counts(where: str, train_samples: Any, world_size: Any) -> None:
    if isinstance(train_samples, bool) or not isinstance(train_samples, int) or train_samples < 1:
        raise SpecError(f"{where}: train_samples must be the number of training samples (a "
                        f"positive int), got {train_samples!r}.")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise SpecError(f"{where}: world_size must be a positive int (the processes the baseline "
                        f"ran on), got {world_size!r}.")


def baseline_from_hf(args: Any, train_samples: int, world_size: int = 1) -> Spec:
    """The spec of the baseline a ``TrainingArguments`` (or its JSON as a dict) trains on
    ``train_samples`` samples over ``world_size`` processes: B0 = world × per-device ×
    accumulation, η0, the warmup (steps, or a fraction of training below 1), the length, the
    optimizer with its β/ε/λ, the schedule and its kwargs, ``max_grad_norm`` and HF's exemption of
    biases and norm weights from weight decay. Raises SpecError naming what it cannot carry."""
    _counts("baseline_from_hf", train_samples, world_size)
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


def hf_optimizer_name(optim: str) -> str | None:
    """The catalog's name of the update HF's ``optim`` runs (by prefix: ``adamw_torch_fused`` ->
    adamw), or None where none here is the same."""
    return next((ours for theirs, ours in _OPTIMIZERS.items() if optim.startswith(theirs)), None)


def _optimizer(args: Any) -> dict[str, Any]:
    optim = str(_value(args, "optim", "adamw_torch"))
    name = hf_optimizer_name(optim)
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


# ---------------------------------------------------------------------------------------- timm

_TIMM_OPTIMIZERS = {"sgd": "nesterov", "nesterov": "nesterov", "momentum": "momentum",
                    "adam": "adam", "adamw": "adamw", "lamb": "lamb", "lars": "lars",
                    "adagrad": "adagrad"}
"""timm's ``opt`` -> the catalog's name of the same update (timm's sgd is Nesterov momentum)."""


def timm_lr(args: Mapping[str, Any], world_size: int = 1) -> float:
    """The peak LR timm's train.py trains ``args`` with: ``lr`` where given, else ``lr_base``
    scaled from ``lr_base_size`` to the global batch (√ for Ada*/LAMB optimizers, linear for the
    rest, or ``lr_base_scale``)."""
    if args.get("lr") is not None:
        return float(args["lr"])
    batch = int(args["batch_size"]) * world_size * int(args.get("grad_accum_steps") or 1)
    ratio = batch / float(args.get("lr_base_size") or 256)
    scale = args.get("lr_base_scale") or (
        "sqrt" if any(o in str(args.get("opt", "sgd")).lower() for o in ("ada", "lamb"))
        else "linear")
    return float(args.get("lr_base") or 0.1) * (ratio ** 0.5 if scale == "sqrt" else ratio)


def baseline_from_timm(args: Mapping[str, Any], train_samples: int, world_size: int = 1) -> Spec:
    """The spec of the baseline timm's ``args.yaml`` (as a dict) trains on ``train_samples``
    samples over ``world_size`` processes: B0 = world × batch_size × grad_accum_steps, η0 as
    :func:`timm_lr` (timm's own scaling of lr_base read, not applied again at the new batch), the
    warmup and length in epochs, the schedule (cosine, step, multistep, poly) ending at
    ``min_lr``, the optimizer with its β/ε/λ and momentum, ``clip_grad`` and timm's exemption of
    biases and norms from weight decay. Raises SpecError naming what it cannot carry."""
    _counts("baseline_from_timm", train_samples, world_size)
    if not isinstance(args, Mapping) or "batch_size" not in args or "epochs" not in args:
        raise SpecError("baseline_from_timm: args must be timm's args.yaml as a dict (with "
                        "batch_size and epochs).")
    for key in ("cooldown_epochs", "lr_cycle_limit"):
        if float(args.get(key) or 0) > (0 if key == "cooldown_epochs" else 1):
            raise SpecError(f"args.yaml: {key} {args[key]} has no counterpart here; train the "
                            f"baseline without it, or describe it in a spec.")
    batch = world_size * int(args["batch_size"]) * int(args.get("grad_accum_steps") or 1)
    baseline: dict[str, Any] = {
        "batch_size": batch, "lr": timm_lr(args, world_size), "epochs": float(args["epochs"]),
        "warmup_epochs": float(args.get("warmup_epochs") or 0), "dataset_size": train_samples,
        "optimizer": _timm_optimizer(args), "schedule": _timm_schedule(args)}
    raw: dict[str, Any] = {"baseline": baseline}
    if baseline["optimizer"]["name"] in ("lamb", "lars"):  # their own per-layer trust ratio
        raw["date"] = {"layer_ratio": {"mode": "off"}}
    if args.get("clip_grad") and args.get("clip_mode", "norm") == "norm":
        raw["train"] = {"grad_clip": float(args["clip_grad"])}
    return parse_spec(raw, source="args.yaml")


def _timm_optimizer(args: Mapping[str, Any]) -> dict[str, Any]:
    opt = str(args.get("opt", "sgd")).lower()
    if opt not in _TIMM_OPTIMIZERS:
        raise SpecError(f"args.yaml: opt {opt!r} has no counterpart here; the optimizers read are "
                        f"{', '.join(_TIMM_OPTIMIZERS)}.")
    name = _TIMM_OPTIMIZERS[opt]
    options: dict[str, Any] = {"name": name, "weight_decay": float(args.get("weight_decay") or 0),
                               "decay_biases_and_norms": False}
    if name in ("nesterov", "momentum"):
        options["momentum"] = float(args.get("momentum", 0.9))
    if name in ("adam", "adamw", "lamb"):
        if args.get("opt_betas"):
            options["betas"] = [float(b) for b in args["opt_betas"]]
        if args.get("opt_eps") is not None:
            options["eps"] = float(args["opt_eps"])
    return options


def _timm_schedule(args: Mapping[str, Any]) -> dict[str, Any]:
    sched = str(args.get("sched", "cosine"))
    end = {"final_lr": float(args.get("min_lr") or 0.0)}
    if sched == "cosine":
        return {"name": "cosine", **end}
    if sched == "poly":
        return {"name": "polynomial", "power": float(args.get("decay_rate", 0.1)), **end}
    if sched == "step":
        return {"name": "step", "every_epochs": float(args.get("decay_epochs", 90)),
                "factor": float(args.get("decay_rate", 0.1))}
    if sched == "multistep":
        return {"name": "multistep", "milestones": [float(m) for m in args["decay_milestones"]],
                "factor": float(args.get("decay_rate", 0.1))}
    raise SpecError(f"args.yaml: sched {sched!r} has no counterpart here; the schedules read are "
                    f"cosine, poly, step and multistep.")


def baseline_from_file(path: str | Path, train_samples: int, world_size: int = 1) -> Spec:
    """The baseline of a run's own configuration file (a path, as str or Path): ``*.json`` — HF's
    TrainingArguments as ``to_json_string()`` writes them; ``*.yaml``/``*.yml`` — timm's
    args.yaml."""
    import json

    import yaml

    from date_engine.files import read_small_text

    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise SpecError(f"baseline_from_file: path must be the configuration file's path (str or "
                        f"Path), got {path!r}.")
    path = Path(path)
    text = read_small_text(path, "--from", "give the TrainingArguments JSON "
                           "(args.to_json_string()) or timm's args.yaml", error=SpecError)
    if path.suffix == ".json":
        try:
            args = json.loads(text)
        except json.JSONDecodeError as e:
            raise SpecError(f"{path}: not JSON ({e.msg}, line {e.lineno}); write it with "
                            f"TrainingArguments.to_json_string().") from None
        if not isinstance(args, dict) or "per_device_train_batch_size" not in args:
            raise SpecError(f"{path}: not TrainingArguments (no per_device_train_batch_size); "
                            f"write it with TrainingArguments.to_json_string().")
        return baseline_from_hf(args, train_samples, world_size)
    if path.suffix in (".yaml", ".yml"):
        try:
            args = yaml.safe_load(text)
        except yaml.YAMLError:
            raise SpecError(f"{path}: not YAML that timm writes; give the args.yaml of a timm "
                            f"run.") from None
        return baseline_from_timm(args, train_samples, world_size)
    raise SpecError(f"{path}: --from reads TrainingArguments JSON (*.json) or timm's args.yaml "
                    f"(*.yaml); got a {path.suffix or 'suffix-less'} file.")
