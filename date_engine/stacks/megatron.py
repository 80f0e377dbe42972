"""Megatron-LM and Megatron-Bridge: their training arguments read as the baseline, the plan
written as them.

Megatron-LM reads flags (``--global-batch-size 1536 --lr 6e-5 ...``); launch scripts keep them in
bash arrays (``TRAINING_ARGS=( ... )``, examples/gpt3/train_gpt3_175b_distributed.sh). Both are
read here as text: every ``--flag`` and the values up to the next flag, the last occurrence
winning, a value the shell would fill in (``$LR``) refused where it is needed. Megatron-Bridge
reads the same quantities as YAML sections (``train.global_batch_size``, ``optimizer.lr``,
``scheduler.lr_warmup_iters``...).

What Megatron does with the names read (megatron/training/arguments.py and training.py):

- the global batch is ``--global-batch-size`` sequences of ``--seq-length`` tokens; a batch
  ramp is ``--step-batch-size-schedule "0:768 250B:1536"`` since megatron-core 0.18 (thresholds
  in tokens where the sequence length is known, K/M/B/T suffixes; it may not be given with
  ``--global-batch-size``) and ``--rampup-batch-size START INCREMENT SAMPLES`` before it (an
  increment at evenly spaced samples; 0.18 ignores it, with only a warning);
- the length is ``--train-iters`` or ``--train-samples``; the LR's warmup and decay follow the
  same unit (``--lr-warmup-iters``/``-samples``/``-fraction`` of the decay, ``--lr-decay-iters``/
  ``-samples``) and are stepped by the samples of each step, so a ramp needs the sample-based
  form: iterations × the final global batch put warmup and decay elsewhere once the batch moves
  (NVIDIA-NeMo/Megatron-Bridge#2609);
- ``--optimizer adam`` is AdamW (``--adam-beta1/2``, ``--adam-eps``, ``--weight-decay`` on all but
  biases and norms), ``--clip-grad`` the global norm; the LR warms up linearly from
  ``--lr-warmup-init`` and decays (``--lr-decay-style``) to ``--min-lr``.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from typing import Any

from date_engine.errors import SpecError
from date_engine.fields import Fields, counts
from date_engine.spec import Spec, parse_spec

__all__ = ["DEFAULTS", "Flags", "baseline_from_megatron", "bridge_flags", "emit_megatron",
           "emit_megatron_bridge", "parse_flags", "step_schedule"]

DEFAULTS: dict[str, Any] = {
    "lr-decay-style": "linear", "min-lr": 0.0, "lr-warmup-iters": 0, "lr-warmup-samples": 0,
    "lr-warmup-init": 0.0, "weight-decay": 0.01, "adam-beta1": 0.9, "adam-beta2": 0.999,
    "adam-eps": 1e-8, "clip-grad": 1.0, "optimizer": "adam", "sgd-momentum": 0.9}
"""Megatron-LM's defaults (arguments.py) of the flags read, where a file leaves them out."""

_BRIDGE = {"train.global_batch_size": "global-batch-size",
           "train.micro_batch_size": "micro-batch-size", "train.train_iters": "train-iters",
           "train.train_samples": "train-samples", "train.rampup_batch_size": "rampup-batch-size",
           "dataset.seq_length": "seq-length", "optimizer.lr": "lr", "optimizer.min_lr": "min-lr",
           "optimizer.optimizer": "optimizer", "optimizer.adam_beta1": "adam-beta1",
           "optimizer.adam_beta2": "adam-beta2", "optimizer.adam_eps": "adam-eps",
           "optimizer.weight_decay": "weight-decay", "optimizer.clip_grad": "clip-grad",
           "optimizer.sgd_momentum": "sgd-momentum",
           "scheduler.lr_decay_style": "lr-decay-style",
           "scheduler.lr_warmup_iters": "lr-warmup-iters",
           "scheduler.lr_warmup_samples": "lr-warmup-samples",
           "scheduler.lr_warmup_fraction": "lr-warmup-fraction",
           "scheduler.lr_warmup_init": "lr-warmup-init",
           "scheduler.lr_decay_iters": "lr-decay-iters",
           "scheduler.lr_decay_samples": "lr-decay-samples",
           "scheduler.lr_wsd_decay_style": "lr-wsd-decay-style",
           "scheduler.lr_wsd_decay_iters": "lr-wsd-decay-iters",
           "scheduler.lr_wsd_decay_samples": "lr-wsd-decay-samples"}
"""Megatron-Bridge's YAML names (section.field) -> the Megatron-LM flag each is."""

_SHAPES = {"constant": "constant", "linear": "linear", "cosine": "cosine", "WSD": "wsd",
           "inverse-square-root": "inverse_sqrt"}
_WSD_SHAPES = {"linear": "linear", "cosine": "cosine", "minus_sqrt": "1-sqrt"}
_SUFFIX = {"K": 10**3, "M": 10**6, "B": 10**9, "T": 10**12}


class Flags:
    """A Megatron configuration's training arguments by flag name (without ``--``), each value
    as written (a list where a flag takes several), and which names came from the file."""

    def __init__(self, values: Mapping[str, Any], source: str):
        self.values, self.source = dict(values), source

    def fields(self) -> Fields:
        """The values read, Megatron's defaults for the rest, through the one checked reader (a
        value the shell fills in, ``$LR``, is text: refused where a number is needed)."""
        return Fields({**DEFAULTS, **self.values}, self.source)

    def given(self, name: str) -> bool:
        return self.values.get(name) is not None


def parse_flags(text: str, source: str) -> Flags:
    """Every ``--flag value...`` in ``text`` (flags, or a script's argument arrays and command
    lines), comments and line continuations dropped; a value with a ``$`` is kept as text."""
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError as e:
        raise SpecError(f"{source}: its quoting does not close ({e}); give the script as the "
                        "shell reads it.") from None
    values: dict[str, Any] = {}
    name = None
    for token in tokens:
        if token.startswith("--") and len(token) > 2:
            name, _, inline = token[2:].partition("=")
            values[name] = [] if not inline else [inline]
        elif name is not None and token not in (")", "(", "\\") and not token.endswith("=("):
            values[name].append(token)
        else:
            name = None
    return Flags({k: _value(v) for k, v in values.items()}, source)


def _value(words: list[str]) -> Any:
    """A flag's words as a value: True for none, the number or name for one, a list for more."""
    if not words:
        return True
    if any("$" in w for w in words):
        return " ".join(words)
    parsed = [_number(w) for w in words]
    return parsed[0] if len(parsed) == 1 else parsed


def _number(word: str) -> Any:
    for kind in (int, float):
        try:
            return kind(word)
        except ValueError:
            pass
    return word


def bridge_flags(data: Mapping[str, Any], source: str) -> Flags:
    """A Megatron-Bridge config (its YAML as a mapping of sections) as the Megatron-LM flags its
    fields are."""
    values = {}
    for key, flag in _BRIDGE.items():
        section, name = key.split(".")
        value = data.get(section)
        if isinstance(value, Mapping) and value.get(name) is not None:
            values[flag] = value[name]
    return Flags(values, source)


def step_schedule(text: str, seq_length: int | None) -> list[tuple[int, int]]:
    """``--step-batch-size-schedule`` as megatron-core 0.18 reads it: (samples, batch) pairs,
    thresholds in tokens divided by ``seq_length`` where it is known."""
    pairs = []
    for entry in text.replace(",", " ").split():
        threshold, _, batch = entry.partition(":")
        samples = _suffixed(threshold)
        pairs.append((samples // seq_length if seq_length else samples, _suffixed(batch)))
    return sorted(pairs)


def _suffixed(word: str) -> int:
    word = word.strip().upper()
    scale = _SUFFIX.get(word[-1:], 1)
    return int(float(word[:-1] if scale > 1 else word) * scale)


def baseline_from_megatron(flags: Flags, train_samples: int) -> tuple[Spec, list[str]]:
    """The spec of the baseline a Megatron configuration (:func:`parse_flags` of its flags or
    launch script, :func:`bridge_flags` of a Bridge YAML; a file:
    :func:`~date_engine.baselines.baseline_from_file`) trains on ``train_samples`` sequences an
    epoch, and what it sets that the plan cannot carry (one line each). Raises SpecError, in one
    sentence naming the file and the flag, for a value it cannot read."""
    counts("baseline_from_megatron", train_samples, 1)
    f = flags.fields()
    lost: list[str] = []
    batch = _global_batch(flags, f, lost)
    length, unit = _length(flags, f)
    raw_base: dict[str, Any] = {"batch_size": batch, "lr": f.number("lr", high=1e6, above=True),
                                "dataset_size": train_samples,
                                "optimizer": _optimizer(f)}
    if unit == "iters":
        raw_base["iterations"] = length
    else:
        raw_base["epochs"] = length / train_samples
    samples_per_unit = batch if unit == "iters" else 1
    raw_base["warmup_epochs"] = _warmup(flags, f, length, unit) * samples_per_unit / train_samples
    raw_base["schedule"] = _schedule(flags, f, raw_base["lr"], length, unit)
    if flags.given("seq-length"):
        raw_base["tokens_per_sample"] = f.count("seq-length")
    if f.number("lr-warmup-init", high=1e6):
        lost.append(f"--lr-warmup-init {f.raw('lr-warmup-init')}: the plan warms up from 0")
    raw: dict[str, Any] = {"baseline": raw_base, "date": {"layer_ratio": {"mode": "off"}}}
    clip = f.number("clip-grad", high=1e6)
    if clip:
        raw["train"] = {"grad_clip": clip}
    return parse_spec(raw, source=flags.source), lost


def _global_batch(flags: Flags, f: Fields, lost: list[str]) -> int:
    """B0: ``--global-batch-size``, or the last batch of a ramp (which the plan does not carry:
    it derives its own)."""
    if flags.given("step-batch-size-schedule"):
        stages = step_schedule(str(f.raw("step-batch-size-schedule")),
                               f.count("seq-length") if flags.given("seq-length") else None)
        lost.append(f"the baseline's own ramp (--step-batch-size-schedule): planned from its "
                    f"last batch, {stages[-1][1]:,}")
        return stages[-1][1]
    if not flags.given("global-batch-size"):
        raise SpecError(f"{flags.source}: no --global-batch-size, so the global batch is the "
                        "micro-batch times the data-parallel size the launch decides; give "
                        "--global-batch-size.")
    if flags.given("rampup-batch-size"):
        lost.append("the baseline's own ramp (--rampup-batch-size): planned from its last "
                    "batch")
    return f.count("global-batch-size")


def _length(flags: Flags, f: Fields) -> tuple[int, str]:
    if flags.given("train-iters") == flags.given("train-samples"):
        raise SpecError(f"{flags.source}: give one of --train-iters and --train-samples (the "
                        "run's length).")
    unit = "iters" if flags.given("train-iters") else "samples"
    length = f.count(f"train-{unit}")
    decay = f.raw(f"lr-decay-{unit}")
    if decay is not None and decay != length:
        raise SpecError(f"{flags.source}: --lr-decay-{unit} {decay} is not --train-{unit} "
                        f"{length}: the decay would end before the run does and hold --min-lr, "
                        f"which the plan cannot carry; set --lr-decay-{unit} to {length}.")
    return length, unit


def _warmup(flags: Flags, f: Fields, length: int, unit: str) -> float:
    """The warmup in the length's unit: iters or samples, or a fraction of the decay."""
    if flags.given("lr-warmup-fraction"):
        return f.number("lr-warmup-fraction", high=1.0) * length
    return f.number(f"lr-warmup-{unit}", high=length)


def _schedule(flags: Flags, f: Fields, lr: float, length: int, unit: str) -> dict[str, Any]:
    style = str(f.raw("lr-decay-style"))
    if style not in _SHAPES:
        raise f.refuse("lr-decay-style", f"one of {', '.join(_SHAPES)}", style)
    end = {"final_lr": f.number("min-lr", high=lr)}
    if style == "constant":
        return {"name": "constant"}
    if style == "inverse-square-root":
        return {"name": "inverse_sqrt"}
    if style == "WSD":
        wsd = str(f.raw("lr-wsd-decay-style", "exponential"))
        if wsd not in _WSD_SHAPES:
            raise f.refuse("lr-wsd-decay-style", f"one of {', '.join(_WSD_SHAPES)}", wsd)
        decay = f.number(f"lr-wsd-decay-{unit}", high=length, above=True)
        return {"name": "wsd", "decay_fraction": decay / length,
                "decay_shape": _WSD_SHAPES[wsd], **end}
    return {"name": _SHAPES[style], **end}


def _optimizer(f: Fields) -> dict[str, Any]:
    name = str(f.raw("optimizer"))
    if name == "sgd":
        return {"name": "momentum", "momentum": f.number("sgd-momentum", high=1.0),
                "weight_decay": f.number("weight-decay", high=1e3),
                "decay_biases_and_norms": False}
    if name != "adam":
        raise f.refuse("optimizer", "adam or sgd", name)
    return {"name": "adamw", "betas": [f.number("adam-beta1", high=1.0),
                                       f.number("adam-beta2", high=1.0)],
            "eps": f.number("adam-eps", high=1.0, above=True),
            "weight_decay": f.number("weight-decay", high=1e3), "decay_biases_and_norms": False}


# ---------------------------------------------------------------------------------- written


def _settings(run) -> tuple[dict[str, Any], list[str]]:
    """The plan of ``run`` as Megatron's training arguments (flag -> value), sample-based, and
    what Megatron cannot express."""
    plan, split = run.plan, run.split
    opt = plan.optimizer
    lost = []
    if opt.layer_ratio.get("mode", "off") != "off":
        lost.append("DATE's per-layer ratios")
    if plan.ramp and len({tuple(st.options.items()) for st in plan.ramp}) > 1:
        lost.append("the optimizer's options per ramp stage (β2, ε, λ: the last stage's written)")
    if plan.ramp and len({st.peak_lr for st in plan.ramp}) > 1:
        lost.append("the peak LR per ramp stage (the last stage's written)")
    if plan.warmup_shape != "linear":
        lost.append("the quadratic warmup")
    if plan.schedule.is_date_default:
        lost.append(f"DATE's decay meeting its floor {plan.lr_floor:g} before the end (Megatron's "
                    "linear decay ends there)")
    styles = {v: k for k, v in _SHAPES.items()}
    shape = plan.schedule.name if not plan.schedule.is_date_default else "linear"
    if shape not in styles:
        raise SpecError(f"the plan's {shape} schedule has no Megatron --lr-decay-style; emit "
                        "another form (--emit json).")
    options = plan.ramp[-1].options if plan.ramp else opt.options
    peak = plan.ramp[-1].peak_lr if plan.ramp else plan.peak_lr
    final = plan.lr_floor if plan.schedule.is_date_default else \
        (plan.schedule.final or 0.0) * peak
    samples = round(plan.total_epochs * plan.dataset_size)
    values: dict[str, Any] = {
        "micro-batch-size": split.micro_batch, "train-samples": samples, "lr": peak,
        "min-lr": final, "lr-decay-style": styles[shape],
        "lr-warmup-samples": round(plan.warmup_epochs * plan.dataset_size),
        "lr-decay-samples": samples}
    if shape == "wsd":
        values["lr-wsd-decay-style"] = {v: k for k, v in _WSD_SHAPES.items()}[
            plan.schedule.decay_shape]
        values["lr-wsd-decay-samples"] = round(plan.schedule.decay_fraction * samples)
    if plan.tokens_per_sample:
        values["seq-length"] = plan.tokens_per_sample
    if opt.name in ("adam", "adamw"):
        beta1, beta2 = options.get("betas", (0.9, 0.999))
        values.update({"optimizer": "adam", "adam-beta1": beta1, "adam-beta2": beta2,
                       "adam-eps": options.get("eps", 1e-8)})
    elif opt.name in ("momentum", "sgd"):
        values.update({"optimizer": "sgd", "sgd-momentum": options.get("momentum", 0.0)})
    else:
        raise SpecError(f"the plan's optimizer {opt.name} has no Megatron --optimizer (adam, "
                        "sgd); emit another form (--emit json).")
    values["weight-decay"] = options.get("weight_decay") or 0.0
    values["clip-grad"] = plan.grad_clip or 0.0
    return values, lost


def emit_megatron(run, rampup: bool = False) -> tuple[str, list[str]]:
    """The plan of ``run`` as a bash array of Megatron-LM flags to add to a launch script, and
    what they cannot express. A ramp is ``--step-batch-size-schedule`` in tokens (megatron-core
    0.18 and later), or with ``rampup`` ``--rampup-batch-size`` (0.17 and earlier), refused in
    one sentence where that flag's even increments cannot give the plan's rungs."""
    plan = run.plan
    values, lost = _settings(run)
    if not plan.ramp:
        values["global-batch-size"] = plan.target_batch
    elif rampup:
        values["global-batch-size"] = plan.ramp[-1].batch
        values["rampup-batch-size"] = _rampup(plan)
    elif plan.tokens_per_sample is None:
        raise SpecError("the plan does not know its sequence length, and megatron-core reads "
                        "--step-batch-size-schedule's thresholds as tokens where the launch "
                        "gives --seq-length; set baseline.tokens_per_sample.")
    else:
        values["step-batch-size-schedule"] = " ".join(
            f"{st.samples_before * plan.tokens_per_sample}:{st.batch}" for st in plan.ramp)
    form = "megatron-core <= 0.17 (--rampup-batch-size)" if rampup and plan.ramp else \
        "megatron-core >= 0.18 (--step-batch-size-schedule)" if plan.ramp else "Megatron-LM"
    lines = [f"# date plan: batch {plan.target_batch:,}, plan {plan.identity}; for {form}",
             "DATE_PLAN_ARGS=("]
    for name, value in values.items():
        words = value if isinstance(value, list) else [value]
        lines.append(f"    --{name} " + " ".join(shlex.quote(_word(w)) for w in words))
    lines.append(")")
    return "\n".join(lines) + "\n", lost


def _word(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def _rampup(plan) -> list[int]:
    """``--rampup-batch-size START INCREMENT SAMPLES`` giving the ramp's rungs where the samples
    they start at: batch(s) = START + ⌊s / (SAMPLES / m)⌋ · INCREMENT for s ≤ SAMPLES (m
    increments); SpecError naming why where no such triple does."""
    batches = [st.batch for st in plan.ramp]
    starts = [st.samples_before for st in plan.ramp]
    steps = {b - a for a, b in zip(batches, batches[1:])}
    m = len(batches) - 1
    if len(steps) == 1:
        increment, total = steps.pop(), starts[-1]
        if all(math.isclose(s, j * total / m) for j, s in enumerate(starts)):
            return [batches[0], increment, total]
    raise SpecError(
        f"--rampup-batch-size cannot give this ramp ({' → '.join(map(str, batches))} from "
        f"samples {', '.join(f'{s:,}' for s in starts)}): it adds one increment at evenly "
        "spaced samples; --emit megatron writes --step-batch-size-schedule (megatron-core "
        "0.18 and later), which takes any thresholds.")


def emit_megatron_bridge(run) -> tuple[str, list[str]]:
    """The plan of ``run`` as Megatron-Bridge YAML overrides, and what they cannot express;
    a ramp is refused in one sentence (Bridge refuses a ramp with sample-based training, and
    with iterations it moves warmup and decay: Megatron-Bridge#2609)."""
    import yaml

    plan = run.plan
    if plan.ramp:
        raise SpecError("Megatron-Bridge cannot train this ramp as planned: it refuses a ramp "
                        "with sample-based training, and counts warmup and decay in iterations "
                        "of the final batch otherwise (Megatron-Bridge#2609); use --emit "
                        "megatron, or --budget hold.")
    values, lost = _settings(run)
    values["global-batch-size"] = plan.target_batch
    flags = {flag: key for key, flag in _BRIDGE.items()}
    sections: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        section, field = flags[name].split(".")
        sections.setdefault(section, {})[field] = value
    head = f"# date plan: batch {plan.target_batch:,}, plan {plan.identity}; Megatron-Bridge\n"
    return head + yaml.safe_dump(sections, sort_keys=False), lost

